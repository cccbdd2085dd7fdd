"""Reads a table's columns through the Table API (``value.format: typed``).

The walk itself is pure (:mod:`snowsource.core.dictionary`); this module does its requests:
one ``sys_db_object`` row per step up ``super_class``, then the dictionary rows of the whole
lineage, paged by ``sys_id`` (a database view's: its ``sys_db_view_table`` rows, then each
joined table's columns under its prefix). It retries nothing itself but a dictionary page the
instance found too expensive, asked again at half the size (as table pages are): the daemon
hands it its
stream's request path (``engine.snow_requests.SnowRequests.getter``), which retries each
request except that one; ``snowsource check`` hands it the client, and a retriable error
reaches the check. A 403 on either schema table becomes a ``TableError`` naming the read access
typed records need.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from snowsource.core.db_views import (
    VIEW_TABLE,
    VIEW_TABLE_FIELDS,
    joined_tables,
    prefixed_columns,
)
from snowsource.core.dictionary import (
    DB_OBJECT_FIELDS,
    DICTIONARY_FIELDS,
    children_query,
    columns,
    db_object_query,
    lineage,
    parent_query,
    raw,
)
from snowsource.core.discovery import VIEW_CLASS
from snowsource.core.errors import ExecutionTimeExceededError, TableError
from snowsource.core.grants import Priority
from snowsource.core.tableapi import Page, schema_params

# Real hierarchies are a few levels deep (cmdb_ci_linux_server has five ancestors); a deeper
# chain is a super_class loop the pure walk then names.
_MAX_DEPTH: Final = 32
_MIN_PAGE_SIZE: Final = 1


class PageGetter(Protocol):
    """What the walk needs of a client (``ServiceNowClient`` or a test's fake)."""

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page: ...


async def _rows(
    client: PageGetter,
    table: str,
    query: str,
    fields: tuple[str, ...],
    limit: int,
    *,
    label: str | None = None,
) -> list[dict[str, Any]]:
    try:
        # Behind the tables' streaming pages when requests queue, beside the derived streams.
        page = await client.get_page(
            table, schema_params(query, fields, limit), label=label, priority=Priority.DERIVED
        )
    except TableError as exc:
        if exc.status == 403:
            raise TableError(
                f"typed records need read access to {table} (and to sys_db_object and "
                f"sys_dictionary): grant the integration user a read ACL on them, or use "
                f"value.format: string. The instance said: {exc}",
                status=exc.status,
            ) from exc
        raise
    return page.rows


async def read_columns(
    client: PageGetter, table: str, *, page_size: int = 1000, label: str | None = None
) -> dict[str, str]:
    """``element -> internal_type`` for ``table``, inherited columns included; ``label`` is
    whose requests they are in the HTTP metrics and the session pool (the table's alias).

    A database view has no dictionary rows of its own: its columns are those of its joined
    tables (``sys_db_view_table``), each under its table's prefix (``inc_priority``), so typed
    values and sensitive columns work on a view as on its tables.
    """
    objects: list[dict[str, Any]] = []
    query: str | None = db_object_query(table)
    seen: set[str] = set()
    while query is not None and len(objects) < _MAX_DEPTH:
        found = await _rows(client, "sys_db_object", query, DB_OBJECT_FIELDS, 1, label=label)
        if not found or found[0].get("sys_id") in seen:
            break  # missing or looping: the pure walk below says which
        seen.add(str(found[0].get("sys_id")))
        objects.append(found[0])
        query = parent_query(found[0])
    if objects and raw(objects[0], "sys_class_name") == VIEW_CLASS:
        return await _view_columns(client, raw(objects[0], "sys_id"), page_size, label)
    chain = lineage(table, objects)
    rows = await _keyset_rows(
        client,
        "sys_dictionary",
        f"nameIN{','.join(chain)}",
        ("sys_id", *DICTIONARY_FIELDS),
        page_size,
        label=label,
    )
    return columns(chain, rows)


async def _view_columns(
    client: PageGetter, view_id: str, page_size: int, label: str | None
) -> dict[str, str]:
    """A view's columns: its joined tables' columns, prefixed (``core.db_views``)."""
    rows = await _keyset_rows(
        client, VIEW_TABLE, f"view={view_id}", VIEW_TABLE_FIELDS, page_size, label=label
    )
    joined = joined_tables(rows)
    found: dict[str, dict[str, str]] = {}
    for table in {t.table for t in joined}:
        found[table] = await read_columns(client, table, page_size=page_size, label=label)
    return prefixed_columns(joined, found)


async def _keyset_rows(
    client: PageGetter,
    table: str,
    base: str,
    fields: tuple[str, ...],
    page_size: int,
    *,
    label: str | None,
) -> list[dict[str, Any]]:
    """Every row of ``table`` matching ``base``, paged by a keyset on ``sys_id`` (``fields``
    must hold it): schema rows have no other unique order."""
    rows: list[dict[str, Any]] = []
    after = ""
    while True:
        keyset = f"{base}^sys_id>{after}" if after else base
        try:
            page = await _rows(
                client, table, f"{keyset}^ORDERBYsys_id", fields, page_size, label=label
            )
        except ExecutionTimeExceededError:
            # Too expensive for the instance: the same page at half the size, as table pages
            # do (retrying it unchanged would fail the same way, forever).
            if page_size <= _MIN_PAGE_SIZE:
                raise
            page_size = max(page_size // 2, _MIN_PAGE_SIZE)
            continue
        rows.extend(page)
        if len(page) < page_size:
            return rows
        after = str(page[-1]["sys_id"])


async def child_classes(client: PageGetter, table: str, *, limit: int = 1000) -> list[str]:
    """Every table that extends ``table``, at any depth (``sys_db_object.super_class``), sorted.

    Rows of those tables are rows of ``table`` too (the Table API on a parent table returns
    them), but ``sys_audit_delete`` records their deletes under their own names.
    """
    found = await _rows(client, "sys_db_object", db_object_query(table), DB_OBJECT_FIELDS, 1)
    if not found:
        return []
    names: set[str] = set()
    seen = {raw(found[0], "sys_id")}
    level = sorted(seen)
    for _ in range(_MAX_DEPTH):
        rows = await _rows(client, "sys_db_object", children_query(level), DB_OBJECT_FIELDS, limit)
        level = sorted({raw(r, "sys_id") for r in rows} - seen)
        seen.update(level)
        names.update(raw(r, "name") for r in rows)
        if not level or len(names) >= limit:
            break
    return sorted(names - {table})
