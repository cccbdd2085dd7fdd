"""A table's columns from ``sys_db_object`` and ``sys_dictionary`` rows. Pure.

Inherited columns are defined on the parent table's dictionary rows (``incident`` gets
``number`` from ``task``), so the columns of a table are found by walking
``sys_db_object.super_class`` up to the root and reading the dictionary rows of every table on
the way, the nearest definition winning (a child may redefine a parent's column). The caller does
the I/O: it reads ``sys_db_object`` one step at a time with :func:`db_object_query` and
:func:`parent_query`, then the dictionary with :func:`dictionary_query`.

Rows may come in any Table API shape: raw strings, or reference objects (``{"link","value"}``,
``{"display_value","value"}``) for ``super_class`` and ``internal_type``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from snowsource.core.errors import TableFailedError

Row = Mapping[str, Any]

# sys_class_name: a database view's row says sys_db_view (its columns are its tables').
DB_OBJECT_FIELDS = ("sys_id", "name", "super_class", "sys_class_name")
DICTIONARY_FIELDS = ("name", "element", "internal_type", "active")


def raw(row: Row, field: str) -> str:
    """The raw value of ``field`` whatever shape the API returned it in ("" when absent)."""
    value = row.get(field)
    if isinstance(value, Mapping):
        value = value.get("value")
    return value if isinstance(value, str) else ""


def db_object_query(table: str) -> str:
    """``sysparm_query`` for the ``sys_db_object`` row of ``table``."""
    return f"name={table}"


def parent_query(row: Row) -> str | None:
    """``sysparm_query`` for the parent of a ``sys_db_object`` row (None at the root)."""
    parent = raw(row, "super_class")
    return f"sys_id={parent}" if parent else None


def children_query(sys_ids: Sequence[str]) -> str:
    """``sysparm_query`` for the ``sys_db_object`` rows whose parent is one of ``sys_ids``."""
    return f"super_classIN{','.join(sys_ids)}^ORDERBYname"


def dictionary_query(lineage: Sequence[str]) -> str:
    """``sysparm_query`` for the dictionary rows of every table of ``lineage``."""
    return f"nameIN{','.join(lineage)}^ORDERBYname^ORDERBYelement"


def lineage(table: str, db_objects: Iterable[Row]) -> list[str]:
    """``table`` and its ancestors, nearest first, from ``sys_db_object`` rows."""
    by_id: dict[str, Row] = {}
    by_name: dict[str, Row] = {}
    for row in db_objects:
        by_id[raw(row, "sys_id")] = row
        by_name[raw(row, "name")] = row
    current = by_name.get(table)
    if current is None:
        raise TableFailedError(
            f"table {table!r} has no sys_db_object row: check the table name, and that the "
            "integration user may read sys_db_object"
        )
    out: list[str] = []
    while current is not None:
        name = raw(current, "name")
        if name in out:
            raise TableFailedError(
                f"sys_db_object.super_class of {table!r} loops ({' -> '.join([*out, name])})"
            )
        out.append(name)
        parent = raw(current, "super_class")
        if not parent:
            break
        current = by_id.get(parent)
        if current is None:
            raise TableFailedError(
                f"table {name!r} extends sys_db_object {parent} which could not be read: "
                "the integration user needs read access to sys_db_object"
            )
    return out


def columns(table_lineage: Sequence[str], dictionary_rows: Iterable[Row]) -> dict[str, str]:
    """``element -> internal_type`` for a table whose lineage (nearest first) is given.

    Rows of tables outside the lineage, table-level rows (empty ``element``, internal type
    ``collection``) and inactive rows are skipped; a child's definition of a column wins over
    its parent's.
    """
    rank = {name: depth for depth, name in enumerate(table_lineage)}
    best: dict[str, tuple[int, str]] = {}
    for row in dictionary_rows:
        depth = rank.get(raw(row, "name"))
        element = raw(row, "element")
        if depth is None or not element or raw(row, "active") == "false":
            continue
        current = best.get(element)
        if current is None or depth < current[0]:
            best[element] = (depth, raw(row, "internal_type"))
    return {element: internal_type for element, (_, internal_type) in sorted(best.items())}
