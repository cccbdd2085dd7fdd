"""Database views (``sys_db_view``): joined tables exposed under ``<prefix>_<field>`` columns.

No I/O. A view's rows are computed per request from what the underlying tables show at that
instant. The first prefix is the base table; each further table is joined on one pair of
prefixed columns, as a left join by default (no match: that table's columns are empty). There
is no plain ``sys_id`` column: identity is the prefixed keys (``inc_sys_id``). Views are
read-only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from snowsource.emulator.schema import Field, TableDef

Values = dict[str, str]


@dataclasses.dataclass(frozen=True)
class ViewDef:
    """A database view: prefixes in join order, join columns, left-join flag, optional row cap."""

    name: str
    prefixes: tuple[tuple[str, str], ...]
    joins: tuple[tuple[str, str], ...]
    left_join: bool
    max_records: int | None
    table: TableDef


def make_view(
    name: str,
    prefixes: Mapping[str, str],
    join: tuple[str, str] | Sequence[tuple[str, str]] | None,
    tables: Mapping[str, TableDef],
    *,
    left_join: bool = True,
    max_records: int | None = None,
) -> ViewDef:
    """Build a view definition; raises ValueError for unknown tables or join columns.

    ``join`` holds one ``(left_column, right_column)`` pair of prefixed names per joined table
    after the first, e.g. ``("inc_sys_id", "sla_task")``.
    """
    pairs = list(prefixes.items())
    if not pairs:
        raise ValueError("a view needs at least one table")
    joins: list[tuple[str, str]] = []
    if join is not None and len(join) == 2 and isinstance(join[0], str):
        joins = [(str(join[0]), str(join[1]))]
    elif join is not None:
        for pair in join:
            if isinstance(pair, str) or len(pair) != 2:
                raise ValueError(f"view {name}: a join is a (column, column) pair")
            joins.append((str(pair[0]), str(pair[1])))
    if len(joins) != len(pairs) - 1:
        raise ValueError(f"view {name}: need {len(pairs) - 1} join pair(s), got {len(joins)}")
    fields: list[Field] = []
    for prefix, table_name in pairs:
        table = tables.get(table_name)
        if table is None:
            raise ValueError(f"view {name}: unknown table {table_name}")
        fields += [dataclasses.replace(f, name=f"{prefix}_{f.name}") for f in table.fields.values()]
    known = {f.name for f in fields}
    for left, right in joins:
        if left not in known or right not in known:
            raise ValueError(f"view {name}: unknown join column {left} or {right}")
    base_prefix, base_table = pairs[0]
    display = f"{base_prefix}_{tables[base_table].display_field}"
    table_def = TableDef(name, name, tuple(fields), display_field=display, view=True)
    return ViewDef(name, tuple(pairs), tuple(joins), left_join, max_records, table_def)


def view_rows(
    view: ViewDef,
    read: Callable[[str], Iterable[Mapping[str, str]]],
    tables: Mapping[str, TableDef],
) -> list[Values]:
    """Compute the view's rows; ``read(table)`` yields that table's rows visible to the caller."""

    def prefixed(prefix: str, table: str, row: Mapping[str, str]) -> Values:
        names = tables[table].fields
        return {f"{prefix}_{k}": row.get(k, "") for k in names}

    base_prefix, base_table = view.prefixes[0]
    rows = [prefixed(base_prefix, base_table, r) for r in read(base_table)]
    for (prefix, table), (first, second) in zip(view.prefixes[1:], view.joins, strict=True):
        # The pair may be written either way round: `left` is the column already present,
        # `right_field` the joined table's own (unprefixed) field.
        if second.startswith(prefix + "_"):
            left, right_field = first, second.removeprefix(prefix + "_")
        else:
            left, right_field = second, first.removeprefix(prefix + "_")
        index: dict[str, list[Values]] = {}
        for r in read(table):
            key = r.get(right_field, "")
            if key:
                index.setdefault(key, []).append(prefixed(prefix, table, r))
        blank = {f"{prefix}_{k}": "" for k in tables[table].fields}
        joined: list[Values] = []
        for row in rows:
            matches = index.get(row.get(left, ""), [])
            if matches:
                joined.extend({**row, **m} for m in matches)
            elif view.left_join:
                joined.append({**row, **blank})
        rows = joined
    if view.max_records is not None:
        rows = rows[: view.max_records]
    return rows
