"""What a table's extra streams need, as ``snowsource check`` lines (SPEC §13.6, §13.7).

A table with ``deletes: audit`` also reads ``sys_audit_delete``; one with ``value.format: typed``
reads its columns from ``sys_db_object`` and ``sys_dictionary``. Neither shows in the table's own
read: without the access the daemon starts, and then the delete stream FAILs, or the table does
when it reads its dictionary. These lines ask the same questions the daemon asks, with the same
requests, so a missing ACL is a FAIL here first, naming the access that is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.cli.check_governance import (
    sensitive_check,
    sensitive_name,
    wants_sensitive_check,
)
from snowsource.cli.check_report import CheckResult, Status
from snowsource.config.fields import ValueFormat
from snowsource.config.snow import TableConfig
from snowsource.core.deletes import ACCESS_HINT, AUDIT_TABLE, audit_query
from snowsource.core.errors import ServiceNowError
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import Page, stream_probe_params
from snowsource.engine.dictionary_reader import child_classes, read_columns

__all__ = ["access_checks", "probe_stream", "skipped_access"]

_DICTIONARY_ACCESS: Final = (
    "typed records need read access to sys_db_object and sys_dictionary (a table-level read "
    "ACL on both for the integration user, usually granted with the admin role), or use "
    "value.format: string"
)


def _deletes_name(alias: str) -> str:
    return f"table {alias} deletes readable ({AUDIT_TABLE})"


def _dictionary_name(alias: str, table: TableConfig) -> str:
    return f"table {alias} dictionary readable (value.format: {table.value_format.value})"


def _wants_deletes(table: TableConfig) -> bool:
    return table.deletes.audit


def _wants_typed(table: TableConfig) -> bool:
    # avro and json_schema derive their schema from the same dictionary.
    return table.value_format is ValueFormat.TYPED or table.value_format.registered


def skipped_access(alias: str, table: TableConfig, why: str) -> list[CheckResult]:
    """The lines :func:`access_checks` would print, skipped for ``why``."""
    out: list[CheckResult] = []
    if _wants_deletes(table):
        out.append(CheckResult(_deletes_name(alias), Status.SKIP, why))
    if _wants_typed(table):
        out.append(CheckResult(_dictionary_name(alias, table), Status.SKIP, why))
    if wants_sensitive_check(table):
        out.append(CheckResult(sensitive_name(alias), Status.SKIP, why))
    return out


async def access_checks(
    client: ServiceNowClient, alias: str, table: TableConfig, streams: Sequence[TableSpec]
) -> list[CheckResult]:
    """One line per extra stream the table has: its audit rows, its dictionary (for typed
    values, or for its sensitive columns).

    ``streams`` are the table's stream specs as the daemon resolves them (``stream_specs``),
    so the audit probe asks exactly what the delete stream will ask.
    """
    out: list[CheckResult] = []
    if _wants_deletes(table):
        deletes = next(s for s in streams if s.stream == "deletes")
        out.append(await _deletes(client, alias, table, deletes))
    if _wants_typed(table):
        out.append(await _dictionary(client, alias, table))
    if wants_sensitive_check(table):
        out.append(await sensitive_check(client, alias, table))
    return out


async def probe_stream(
    client: ServiceNowClient,
    stream: TableSpec,
    name: str,
    *,
    refused: str,
    hints: tuple[str, ...],
) -> Page | CheckResult:
    """The first page of a derived stream, asked as the daemon asks it; the check's FAIL when
    the instance refuses (``refused`` says what that would do, ``hints`` how to fix a 403)."""
    try:
        return await client.get_page(stream.name, stream_probe_params(stream))
    except ServiceNowError as exc:
        if exc.status == 403:
            why = f"the instance refused {stream.name} (HTTP 403): {refused}"
            return CheckResult(name, Status.FAIL, why, hints)
        return CheckResult(name, Status.FAIL, str(exc) or type(exc).__name__)


async def _deletes(
    client: ServiceNowClient, alias: str, table: TableConfig, stream: TableSpec
) -> CheckResult:
    name = _deletes_name(alias)
    page = await probe_stream(
        client,
        stream,
        name,
        refused=f"the delete stream of {alias} would FAIL at start",
        hints=(ACCESS_HINT, f"or set snow.tables.{alias}.deletes: none"),
    )
    if isinstance(page, CheckResult):
        return page
    if page.rows and not page.rows[0].get("documentkey"):
        # The daemon cannot tell which row an audit row deleted without it.
        return CheckResult(
            name,
            Status.FAIL,
            f"{AUDIT_TABLE} rows of {table.name} come without documentkey: a field ACL hides it",
            (f"grant the integration user read access to {AUDIT_TABLE}.documentkey",),
        )
    found = page.total_count
    detail = f"{AUDIT_TABLE} with query {audit_query(table.name)!r}"
    if found is not None:
        detail += f", {found} delete(s) recorded"
    return await _children_missed(client, alias, table, name, detail)


async def _children_missed(
    client: ServiceNowClient, alias: str, table: TableConfig, name: str, detail: str
) -> CheckResult:
    """A WARN when ``table`` has child classes: their deletes are not read (decisions.md)."""
    try:
        children = await child_classes(client, table.name)
    except ServiceNowError:
        return CheckResult(name, Status.PASS, f"{detail}; its child classes could not be read")
    if not children:
        return CheckResult(name, Status.PASS, detail)
    shown = ", ".join(children[:8]) + (
        f" and {len(children) - 8} more" if len(children) > 8 else ""
    )
    return CheckResult(
        name,
        Status.WARN,
        f"{detail}; but {table.name} has child classes ({shown}), whose rows are in its "
        f"topic while their deletes are recorded under their own tablename and not read: "
        f"their rows stay in the topic after they are deleted",
        (
            f"read the child tables themselves, each with deletes: audit, instead of "
            f"{table.name}; or accept that deletes of {alias}'s child-class rows are missed",
        ),
    )


async def _dictionary(client: ServiceNowClient, alias: str, table: TableConfig) -> CheckResult:
    name = _dictionary_name(alias, table)
    try:
        columns = await read_columns(client, table.name)
    except ServiceNowError as exc:
        if exc.status == 403:
            return CheckResult(
                name,
                Status.FAIL,
                f"the instance refused the dictionary of {table.name} (HTTP 403): {alias} "
                f"would FAIL at start",
                (_DICTIONARY_ACCESS,),
            )
        return CheckResult(name, Status.FAIL, str(exc) or type(exc).__name__)
    if not columns:
        return CheckResult(
            name,
            Status.WARN,
            f"sys_dictionary lists no columns of {table.name} that the integration user can "
            f"see: every value would stay a string",
            (f"check the table name, or grant read access to sys_dictionary rows of {table.name}",),
        )
    return CheckResult(name, Status.PASS, f"{len(columns)} column(s) of {table.name}")
