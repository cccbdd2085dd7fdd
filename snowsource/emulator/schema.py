"""Table definitions of the emulated instance: fields, types, choices, references, inheritance.

The built-in tables are data, ``builtin_tables.json`` beside this module (shipped with the
package), built into ``TableDef`` objects by :func:`builtin_tables`; ``sys_journal_field`` holds
comments and work notes, one insert-only row per entry, never in the record itself.

Tables inherit fields from their parent (``incident`` extends ``task``), as they do on a real
instance; a child may redefine a parent's field (e.g. its own ``state`` choices) without moving
it. Every table gets the ServiceNow system fields; ``no_update`` tables (append-only, like
``sys_audit``) lack ``sys_updated_on``/``sys_updated_by``/``sys_mod_count``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

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


#: The tables every emulator starts with, as data: each table's own fields (a choice field names
#: a shared choice list or carries its own), parents listed before their children.
_BUILTIN_TABLES = "builtin_tables.json"


def builtin_tables() -> dict[str, TableDef]:
    """The tables every emulator starts with, by name."""
    data = json.loads(resources.files(__package__).joinpath(_BUILTIN_TABLES).read_text("utf-8"))
    shared: Mapping[str, Mapping[str, str]] = data["choices"]
    tables: dict[str, TableDef] = {}
    for entry in data["tables"]:
        fields = tuple(_field(spec, shared) for spec in entry.pop("fields"))
        parent = entry.pop("parent", None)
        table = TableDef(
            entry.pop("name"),
            entry.pop("label"),
            fields,
            parent=tables[parent] if parent else None,
            **entry,
        )
        tables[table.name] = table
    return tables


def _field(spec: dict[str, Any], shared: Mapping[str, Mapping[str, str]]) -> Field:
    """One field of ``builtin_tables.json``."""
    choices = spec.pop("choices", None)
    if choices is not None:
        return _choice(
            spec["name"], shared[choices] if isinstance(choices, str) else choices, spec["label"]
        )
    return Field(spec.pop("name"), spec.pop("type", "string"), **spec)
