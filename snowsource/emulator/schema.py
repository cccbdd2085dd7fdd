"""Table definitions of the emulated instance: fields, types, choices, references, inheritance.

Pure data, no I/O. Tables inherit fields from their parent (``incident`` extends ``task``), as
they do on a real instance; a child may redefine a parent's field (e.g. its own ``state``
choices) without moving it. Every table gets the ServiceNow system fields; ``no_update`` tables
(append-only, like ``sys_audit``) lack ``sys_updated_on``/``sys_updated_by``/``sys_mod_count``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from snowsource.emulator.encoded_query import FieldType

FIELD_TYPES: frozenset[str] = frozenset(
    {"string", "integer", "decimal", "boolean", "datetime", "reference", "choice", "sys_id"}
)
# The ``sys_dictionary.internal_type`` a field type shows unless the field names its own: the
# query evaluator needs only the coarse type, a typed reader needs the instance's real name.
_DEFAULT_INTERNAL_TYPES: Mapping[str, str] = {
    "string": "string",
    "integer": "integer",
    "decimal": "decimal",
    "boolean": "boolean",
    "datetime": "glide_date_time",
    "reference": "reference",
    "choice": "choice",
    "sys_id": "GUID",
}


@dataclasses.dataclass(frozen=True)
class Field:
    """One column: its type, and for references the target table, for choices the labels."""

    name: str
    type: FieldType = "string"
    reference: str | None = None
    choices: Mapping[str, str] = dataclasses.field(default_factory=dict)
    label: str = ""
    # A reference whose target rows are not stored (sys_domain): display the raw value.
    display_is_value: bool = False
    # The real instance's type name when it differs from the default for ``type``: a choice
    # stored as a number (``priority``) is ``integer``, a date-only column ``glide_date``.
    internal_type: str | None = None

    @property
    def dictionary_type(self) -> str:
        """``sys_dictionary.internal_type`` of this field."""
        return self.internal_type or _DEFAULT_INTERNAL_TYPES[self.type]

    @property
    def max_length(self) -> int:
        """``sys_dictionary.max_length`` as the platform defaults it per type."""
        if self.dictionary_type in ("GUID", "reference", "domain_id"):
            return 32
        if self.dictionary_type in ("string", "choice", "domain_path", "sys_class_name"):
            return 4000 if self.name == "description" else 255
        return 40

    def __post_init__(self) -> None:
        if self.type not in FIELD_TYPES:
            raise ValueError(f"unknown field type {self.type!r} for {self.name}")
        if self.type == "reference" and not self.reference:
            raise ValueError(f"reference field {self.name} needs a target table")


@dataclasses.dataclass(frozen=True)
class TableDef:
    """A table: its own fields (parent fields are inherited), display field and attributes."""

    name: str
    label: str
    own_fields: tuple[Field, ...]
    parent: TableDef | None = None
    display_field: str = "sys_id"
    no_update: bool = False
    no_audit_delete: bool = False
    number_prefix: str | None = None
    domain_separated: bool = True
    # A database view: exactly ``own_fields`` (prefixed), no system fields, read-only.
    view: bool = False
    fields: Mapping[str, Field] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        merged: dict[str, Field] = {}
        if self.parent is not None:
            merged.update(self.parent.fields)
        elif not self.view:
            for f in system_fields(
                no_update=self.no_update, domain_separated=self.domain_separated
            ):
                merged[f.name] = f
        for f in self.own_fields:
            merged[f.name] = f
        object.__setattr__(self, "fields", merged)

    def lineage(self) -> list[TableDef]:
        """This table and its ancestors, nearest first."""
        out: list[TableDef] = []
        table: TableDef | None = self
        while table is not None:
            out.append(table)
            table = table.parent
        return out

    def root(self) -> TableDef:
        """The topmost ancestor (where the system fields are defined)."""
        return self.lineage()[-1]


def system_fields(*, no_update: bool = False, domain_separated: bool = True) -> list[Field]:
    """The global default fields every table carries (``r_GlobalDefaultFields``)."""
    out = [
        Field("sys_id", "sys_id", label="Sys ID"),
        Field("sys_created_on", "datetime", label="Created"),
        Field("sys_created_by", label="Created by"),
    ]
    if not no_update:
        out += [
            Field("sys_updated_on", "datetime", label="Updated"),
            Field("sys_updated_by", label="Updated by"),
            Field("sys_mod_count", "integer", label="Updates"),
        ]
    out.append(Field("sys_class_name", label="Class", internal_type="sys_class_name"))
    if domain_separated:
        out += [
            Field(
                "sys_domain",
                "reference",
                reference="sys_user_group",
                label="Domain",
                display_is_value=True,
                internal_type="domain_id",
            ),
            Field("sys_domain_path", label="Domain Path", internal_type="domain_path"),
        ]
    return out


def _ref(name: str, target: str, label: str = "") -> Field:
    return Field(name, "reference", reference=target, label=label)


def _choice(name: str, choices: Mapping[str, str], label: str = "") -> Field:
    # Choice lists keyed by numbers are integer columns on a real instance (priority, state);
    # the others are strings with a choice list.
    numeric = all(value.lstrip("-").isdigit() for value in choices)
    return Field(
        name,
        "choice",
        choices=dict(choices),
        label=label,
        internal_type="integer" if numeric else None,
    )


PRIORITY = {
    "1": "1 - Critical",
    "2": "2 - High",
    "3": "3 - Moderate",
    "4": "4 - Low",
    "5": "5 - Planning",
}
IMPACT = {"1": "1 - High", "2": "2 - Medium", "3": "3 - Low"}
TASK_STATE = {
    "-5": "Pending",
    "1": "Open",
    "2": "Work in Progress",
    "3": "Closed Complete",
    "4": "Closed Incomplete",
    "7": "Closed Skipped",
}
INCIDENT_STATE = {
    "1": "New",
    "2": "In Progress",
    "3": "On Hold",
    "6": "Resolved",
    "7": "Closed",
    "8": "Canceled",
}
CHANGE_STATE = {
    "-5": "New",
    "-4": "Assess",
    "-3": "Authorize",
    "-2": "Scheduled",
    "-1": "Implement",
    "0": "Review",
    "3": "Closed",
    "4": "Canceled",
}
INSTALL_STATUS = {
    "1": "Installed",
    "2": "On Order",
    "3": "In Maintenance",
    "4": "Pending Install",
    "5": "Pending Repair",
    "6": "In Stock",
    "7": "Retired",
    "100": "Absent",
}
OPERATIONAL_STATUS = {
    "1": "Operational",
    "2": "Non-Operational",
    "3": "Repair in Progress",
    "4": "DR Standby",
    "5": "Ready",
    "6": "Retired",
}


def builtin_tables() -> dict[str, TableDef]:
    """The tables every emulator starts with, by name."""
    sys_user = TableDef(
        "sys_user",
        "User",
        (
            Field("user_name", label="User ID"),
            Field("name", label="Name"),
            Field("first_name", label="First name"),
            Field("last_name", label="Last name"),
            Field("email", label="Email"),
            Field("title", label="Title"),
            Field("department", label="Department"),
            Field("time_zone", label="Time zone"),
            Field("date_format", label="Date format"),
            Field("time_format", label="Time format"),
            Field("active", "boolean", label="Active"),
            Field("locked_out", "boolean", label="Locked out"),
        ),
        display_field="name",
    )
    task = TableDef(
        "task",
        "Task",
        (
            Field("number", label="Number"),
            Field("short_description", label="Short description"),
            Field("description", label="Description"),
            _choice("priority", PRIORITY, "Priority"),
            _choice("impact", IMPACT, "Impact"),
            _choice("urgency", IMPACT, "Urgency"),
            _choice("state", TASK_STATE, "State"),
            Field("active", "boolean", label="Active"),
            _ref("assigned_to", "sys_user", "Assigned to"),
            _ref("opened_by", "sys_user", "Opened by"),
            Field("opened_at", "datetime", label="Opened"),
            Field("closed_at", "datetime", label="Closed"),
            Field("due_date", "datetime", label="Due date"),
            _ref("cmdb_ci", "cmdb_ci", "Configuration item"),
            Field("reassignment_count", "integer", label="Reassignment count"),
            Field("work_notes", label="Work notes", internal_type="journal_input"),
        ),
        display_field="number",
        number_prefix="TASK",
    )
    incident = TableDef(
        "incident",
        "Incident",
        (
            _ref("caller_id", "sys_user", "Caller"),
            _choice("state", INCIDENT_STATE, "State"),
            _choice(
                "category",
                {
                    "inquiry": "Inquiry / Help",
                    "software": "Software",
                    "hardware": "Hardware",
                    "network": "Network",
                    "database": "Database",
                },
                "Category",
            ),
            _choice("severity", IMPACT, "Severity"),
            Field("resolved_at", "datetime", label="Resolved"),
        ),
        parent=task,
        display_field="number",
        number_prefix="INC",
    )
    change_request = TableDef(
        "change_request",
        "Change Request",
        (
            _choice("state", CHANGE_STATE, "State"),
            _choice(
                "type",
                {"normal": "Normal", "standard": "Standard", "emergency": "Emergency"},
                "Type",
            ),
            _choice("risk", {"2": "High", "3": "Moderate", "4": "Low"}, "Risk"),
            _choice(
                "category",
                {
                    "Hardware": "Hardware",
                    "Software": "Software",
                    "Service": "Service",
                    "Network": "Network",
                },
                "Category",
            ),
            _ref("requested_by", "sys_user", "Requested by"),
            Field("start_date", "datetime", label="Planned start date"),
            Field("end_date", "datetime", label="Planned end date"),
        ),
        parent=task,
        display_field="number",
        number_prefix="CHG",
    )
    cmdb_ci = TableDef(
        "cmdb_ci",
        "Configuration Item",
        (
            Field("name", label="Name"),
            Field("asset_tag", label="Asset tag"),
            Field("serial_number", label="Serial number"),
            Field("ip_address", label="IP Address"),
            _choice("install_status", INSTALL_STATUS, "Status"),
            _choice("operational_status", OPERATIONAL_STATUS, "Operational status"),
            _ref("assigned_to", "sys_user", "Assigned to"),
            Field("category", label="Category"),
            Field("cost", "decimal", label="Cost"),
            Field("discovery_source", label="Discovery source"),
            Field("last_discovered", "datetime", label="Most recent discovery"),
            Field("purchase_date", label="Purchased", internal_type="glide_date"),
        ),
        display_field="name",
    )
    cmdb_ci_server = TableDef(
        "cmdb_ci_server",
        "Server",
        (
            Field("os", label="Operating System"),
            Field("cpu_count", "integer", label="CPU count"),
            Field("ram", "integer", label="RAM (MB)"),
            Field("disk_space", "decimal", label="Disk space (GB)", internal_type="float"),
        ),
        parent=cmdb_ci,
        display_field="name",
    )
    task_sla = TableDef(
        "task_sla",
        "Task SLA",
        (
            _ref("task", "task", "Task"),
            Field("sla", label="SLA definition"),
            _choice(
                "stage",
                {
                    "in_progress": "In progress",
                    "paused": "Paused",
                    "completed": "Completed",
                    "cancelled": "Cancelled",
                },
                "Stage",
            ),
            Field("has_breached", "boolean", label="Has breached"),
            Field("active", "boolean", label="Active"),
            Field("start_time", "datetime", label="Start time"),
            Field("end_time", "datetime", label="Stop time"),
            Field("planned_end_time", "datetime", label="Breach time"),
            Field("business_percentage", "decimal", label="Business elapsed percentage"),
        ),
        display_field="sla",
    )
    sys_audit_delete = TableDef(
        "sys_audit_delete",
        "Deleted Record",
        (
            Field("tablename", label="Table"),
            Field("documentkey", label="Document key"),
            Field("display_value", label="Display value"),
            Field("payload", label="Payload"),
        ),
        display_field="documentkey",
        domain_separated=False,
        no_audit_delete=True,
    )
    sys_audit = TableDef(
        "sys_audit",
        "Audit",
        (
            Field("tablename", label="Table name"),
            Field("documentkey", label="Document key"),
            Field("fieldname", label="Field name"),
            Field("oldvalue", label="Old value"),
            Field("newvalue", label="New value"),
            Field("user", label="User"),
            Field("reason", label="Reason"),
            Field("record_checkpoint", "integer", label="Record checkpoint"),
        ),
        display_field="documentkey",
        no_update=True,
        domain_separated=False,
        no_audit_delete=True,
    )
    sys_db_object = TableDef(
        "sys_db_object",
        "Table",
        (
            Field("name", label="Name"),
            Field("label", label="Label"),
            _ref("super_class", "sys_db_object", "Extends table"),
            Field("is_extendable", "boolean", label="Extensible"),
        ),
        display_field="name",
        domain_separated=False,
    )
    sys_dictionary = TableDef(
        "sys_dictionary",
        "Dictionary Entry",
        (
            Field("name", label="Table"),
            Field("element", label="Column name"),
            Field("column_label", label="Column label"),
            Field("internal_type", label="Type"),
            Field("reference", label="Reference"),
            Field("max_length", "integer", label="Max length"),
            Field("active", "boolean", label="Active"),
            Field("attributes", label="Attributes"),
        ),
        display_field="element",
        domain_separated=False,
    )
    # Comments and work notes: one insert-only row per entry, never in the record itself.
    sys_journal_field = TableDef(
        "sys_journal_field",
        "Journal Entry",
        (
            Field("element_id", label="Element ID"),
            Field("name", label="Table name"),
            Field("element", label="Element"),
            Field("value", label="Value"),
        ),
        display_field="value",
        no_update=True,
        domain_separated=False,
        no_audit_delete=True,
    )
    sys_properties = TableDef(
        "sys_properties",
        "System Property",
        (
            Field("name", label="Name"),
            Field("value", label="Value"),
            Field("type", label="Type"),
            Field("description", label="Description"),
        ),
        display_field="name",
        domain_separated=False,
    )
    tables = [
        sys_user,
        task,
        incident,
        change_request,
        cmdb_ci,
        cmdb_ci_server,
        task_sla,
        sys_audit_delete,
        sys_audit,
        sys_db_object,
        sys_dictionary,
        sys_journal_field,
        sys_properties,
    ]
    return {t.name: t for t in tables}
