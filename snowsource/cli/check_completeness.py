"""``check`` lines about completeness: will the instance tell snowsource everything it asks?

- ``deletes: audit`` relies on the instance recording deletions in ``sys_audit_delete``. It does
  not for a table whose dictionary has ``no_audit_delete=true``, nor for a ``sys_*`` table that
  the property ``glide.ui.audit_deleted_tables`` does not list (read through ``sys_properties``).
  Either is a WARN that suggests ``deletes: reconcile``, which needs no audit record.
- ``journal: true`` reads ``sys_journal_field``. A user lacking its read ACL gets ``200`` with
  an empty result, so the stream would run and stay empty: a WARN when no journal row is
  visible although the count (before ACLs) says there are some, or although the table has
  journal fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.cli.check_access import probe_stream
from snowsource.cli.check_report import CheckResult, Status
from snowsource.config.snow import TableConfig
from snowsource.core.dictionary import raw
from snowsource.core.errors import ServiceNowError
from snowsource.core.journal import JOURNAL_TABLE
from snowsource.core.table import TableSpec
from snowsource.engine.dictionary_reader import read_columns

__all__ = ["completeness_checks", "skipped_completeness"]

AUDITED_TABLES_PROPERTY: Final = "glide.ui.audit_deleted_tables"
_JOURNAL_TYPES: Final = frozenset({"journal", "journal_input", "journal_list"})


def _audited_name(alias: str) -> str:
    return f"table {alias} deletes recorded by the instance"


def _journal_name(alias: str) -> str:
    return f"table {alias} journal readable ({JOURNAL_TABLE})"


def skipped_completeness(alias: str, table: TableConfig, why: str) -> list[CheckResult]:
    """The lines :func:`completeness_checks` would print, skipped for ``why``."""
    out: list[CheckResult] = []
    if table.deletes.audit:
        out.append(CheckResult(_audited_name(alias), Status.SKIP, why))
    if table.journal:
        out.append(CheckResult(_journal_name(alias), Status.SKIP, why))
    return out


async def completeness_checks(
    client: ServiceNowClient, alias: str, table: TableConfig, streams: Sequence[TableSpec]
) -> list[CheckResult]:
    """The table's completeness lines (none for a table without audit deletes or journal)."""
    out: list[CheckResult] = []
    if table.deletes.audit:
        out.append(await _audited(client, alias, table))
    journal = next((s for s in streams if s.stream == "journal"), None)
    if journal is not None:
        out.append(await _journal(client, alias, table, journal))
    return out


def _reconcile_hint(alias: str) -> str:
    return (
        f"use snow.tables.{alias}.deletes: reconcile (or [audit, reconcile]): a key sweep "
        f"finds deleted rows without an audit record"
    )


async def _one(client: ServiceNowClient, table: str, query: str, fields: str) -> list[str]:
    params = {
        "sysparm_query": query,
        "sysparm_fields": fields,
        "sysparm_limit": "1",
        "sysparm_no_count": "true",
    }
    page = await client.get_page(table, params)
    return [raw(row, fields) for row in page.rows]


async def _audited(client: ServiceNowClient, alias: str, table: TableConfig) -> CheckResult:
    name = _audited_name(alias)
    try:
        attributes = await _one(
            client, "sys_dictionary", f"name={table.name}^elementISEMPTY", "attributes"
        )
    except ServiceNowError as exc:
        return CheckResult(name, Status.WARN, f"sys_dictionary is not readable: {exc}")
    flags = {part.strip() for value in attributes for part in value.split(",")}
    if "no_audit_delete=true" in flags:
        return CheckResult(
            name,
            Status.WARN,
            f"the dictionary of {table.name} has no_audit_delete=true: the instance records "
            f"none of its deletions in sys_audit_delete, so deletes: audit sends no tombstone",
            (_reconcile_hint(alias),),
        )
    if not table.name.startswith("sys_"):
        return CheckResult(name, Status.PASS, f"{table.name} has no no_audit_delete attribute")
    return await _audited_system_table(client, alias, table, name)


async def _audited_system_table(
    client: ServiceNowClient, alias: str, table: TableConfig, name: str
) -> CheckResult:
    try:
        values = await _one(client, "sys_properties", f"name={AUDITED_TABLES_PROPERTY}", "value")
    except ServiceNowError as exc:
        return CheckResult(
            name,
            Status.WARN,
            f"{table.name} is a sys_* table, whose deletions are recorded only when the "
            f"property {AUDITED_TABLES_PROPERTY} lists it, and sys_properties is not "
            f"readable: {exc}",
            (_reconcile_hint(alias),),
        )
    listed = {part.strip() for value in values for part in value.split(",")}
    if table.name not in listed:
        return CheckResult(
            name,
            Status.WARN,
            f"{table.name} is a sys_* table missing from {AUDITED_TABLES_PROPERTY}: the "
            f"instance records none of its deletions in sys_audit_delete",
            (
                _reconcile_hint(alias),
                f"or add {table.name} to {AUDITED_TABLES_PROPERTY} on the instance",
            ),
        )
    return CheckResult(name, Status.PASS, f"{AUDITED_TABLES_PROPERTY} lists {table.name}")


async def _journal(
    client: ServiceNowClient, alias: str, table: TableConfig, stream: TableSpec
) -> CheckResult:
    name = _journal_name(alias)
    page = await probe_stream(
        client,
        stream,
        name,
        refused=f"the journal stream of {alias} would FAIL",
        hints=(
            f"grant the integration user read access to {JOURNAL_TABLE}, or set "
            f"snow.tables.{alias}.journal: false",
        ),
    )
    if isinstance(page, CheckResult):
        return page
    if page.rows:
        counted = f", {page.total_count} entries" if page.total_count is not None else ""
        return CheckResult(name, Status.PASS, f"{JOURNAL_TABLE} rows of {table.name}{counted}")
    hidden = (page.total_count or 0) > 0
    if not hidden and not await _has_journal_fields(client, table.name):
        return CheckResult(name, Status.PASS, "no journal entries and no journal fields yet")
    why = (
        f"{page.total_count} entries match but none is readable"
        if hidden
        else f"none is readable although {table.name} has journal fields"
    )
    return CheckResult(
        name,
        Status.WARN,
        f"the integration user sees no {JOURNAL_TABLE} rows of {table.name} ({why}): an ACL "
        f"answers 200 with an empty result, and the journal stream would stay empty",
        (f"grant the integration user read access to {JOURNAL_TABLE} (the journal read ACL)",),
    )


async def _has_journal_fields(client: ServiceNowClient, table: str) -> bool:
    try:
        columns = await read_columns(client, table)
    except ServiceNowError:
        return True  # unknown: say what the empty answer may mean
    return any(internal_type in _JOURNAL_TYPES for internal_type in columns.values())
