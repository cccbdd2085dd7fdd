"""Database views (``sys_db_view``) as a reader sees them: joined tables and prefixed columns.

Pure, no I/O. A view joins tables; each joined table is a ``sys_db_view_table`` row (``view``:
the view's sys_id, ``table``, ``variable_prefix``, ``order``) and its columns come back as
``<prefix>_<column>`` (``inc_sys_id``, ``inc_sys_updated_on``). A view has no ``sys_id``,
``sys_updated_on`` or ``sys_mod_count`` of its own, and no dictionary rows of its own either:
queries, ORDERBY and the dictionary all go through the prefixed names of its tables.

The rule snowsource reads a view by (SPEC §15.2, decisions.md): the first joined table (lowest
``order``) is the base, and its prefixed cursor fields are the view's cursor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "VIEW_TABLE",
    "VIEW_TABLE_FIELDS",
    "JoinedTable",
    "ViewCursor",
    "base_tables",
    "joined_tables",
    "no_base_reason",
    "prefixed_columns",
    "view_cursor",
]

#: The table that lists a view's joined tables.
VIEW_TABLE: Final = "sys_db_view_table"
#: The columns of ``sys_db_view_table`` a reader needs (sys_id: the keyset).
VIEW_TABLE_FIELDS: Final = ("sys_id", "view", "table", "variable_prefix", "order")
# A row whose order is missing or not a number sorts after every numbered one.
_UNORDERED: Final = 1 << 62


@dataclass(frozen=True, order=True)
class JoinedTable:
    """One table of a view: sorted by ``order`` (then prefix), as the view joins them."""

    order: int
    prefix: str
    table: str
    view: str  # the view's sys_id (sys_db_object / sys_db_view)


@dataclass(frozen=True)
class ViewCursor:
    """A view's cursor fields: its base table's, prefixed."""

    timestamp_field: str
    id_field: str


def _plain(value: Any) -> str:
    """A column's raw value: ``{"value": v}`` (a reference with its link) is ``v``."""
    if isinstance(value, Mapping):
        value = value.get("value", "")
    return value if isinstance(value, str) else ""


def _order(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        return _UNORDERED


def joined_tables(rows: Iterable[Mapping[str, Any]]) -> list[JoinedTable]:
    """``sys_db_view_table`` rows as :class:`JoinedTable`, sorted; rows without a view, a table
    or a prefix are left out (the view cannot be read through them)."""
    found: list[JoinedTable] = []
    for row in rows:
        view, table, prefix = (_plain(row.get(k)) for k in ("view", "table", "variable_prefix"))
        if view and table and prefix:
            found.append(JoinedTable(_order(_plain(row.get("order"))), prefix, table, view))
    return sorted(found)


def base_tables(joined: Iterable[JoinedTable]) -> dict[str, JoinedTable]:
    """Each view's base table (its lowest ``order``), by the view's sys_id."""
    bases: dict[str, JoinedTable] = {}
    for table in sorted(joined):
        bases.setdefault(table.view, table)
    return bases


def view_cursor(base: JoinedTable, timestamp_field: str, id_field: str) -> ViewCursor:
    """The cursor of a view whose base is ``base``: the table's cursor fields (as the template
    names them: ``sys_updated_on``/``sys_id`` by default), prefixed."""
    return ViewCursor(f"{base.prefix}_{timestamp_field}", f"{base.prefix}_{id_field}")


def no_base_reason(name: str) -> str:
    """Why a view without a readable base table is SKIPPED."""
    return (
        f"database view {name}: no joined table with a variable prefix in {VIEW_TABLE}, so its "
        f"prefixed cursor fields are unknown; grant the integration user read access to "
        f"{VIEW_TABLE}, or list the view under snow.tables with timestamp.field and id.field "
        "(e.g. inc_sys_updated_on, inc_sys_id)"
    )


def prefixed_columns(
    joined: Iterable[JoinedTable], columns: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """A view's dictionary (``column -> internal type``) from its tables' (``columns``: by table
    name), each column under its table's prefix; the first definition of a name wins."""
    found: dict[str, str] = {}
    for table in sorted(joined):
        for column, kind in columns.get(table.table, {}).items():
            found.setdefault(f"{table.prefix}_{column}", kind)
    return found
