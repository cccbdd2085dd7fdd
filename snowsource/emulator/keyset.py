"""Keyset pages from the store's ``(ts, sys_id)`` index: the read path that does not grow.

A query sorted by exactly ``ORDERBY<ts>^ORDERBYsys_id`` (every page the daemon asks for), or by
``ORDERBYsys_id`` alone (a key sweep's pages), is answered by walking the index instead of
reading, filtering and sorting the whole table. The
query's ``^NQ`` groups give a conservative key range to walk; every row on the way still passes
the full evaluator (:meth:`ParsedQuery.matches`), so the answer is filter-then-sort's by
construction and only the walk's start and end depend on the range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from snowsource.emulator.auth import User
from snowsource.emulator.emulator import Emulator
from snowsource.emulator.encoded_query import AndGroup, ParsedQuery, literal_operand

Row = Mapping[str, str]

# Types whose values compare and sort as plain strings (no numeric or boolean coercion), so a
# string-ordered index agrees with the evaluator's comparisons.
_STRING_ORDERED = frozenset({"string", "datetime", "sys_id", "reference", "choice"})


@dataclasses.dataclass(frozen=True)
class KeyRange:
    """A conservative range of ``(ts, id)`` keys holding every row a query can select.

    ``low`` is a key tuple to bisect to (``("T",)`` = from the first row of second T, ``("T",
    "S")`` = from id S of second T); ``high_ts`` is the last ``ts`` value that can match. ``None``
    is unbounded. Rows inside the range must still pass :meth:`ParsedQuery.matches`.
    """

    ts_field: str
    low: tuple[str, ...] | None
    high_ts: str | None


def key_range(parsed: ParsedQuery, id_field: str) -> KeyRange | None:
    """Where in ``(ts, id)`` order the rows ``parsed`` selects can lie; ``None``: not indexable.

    Defined only when the sort is exactly ``ORDERBY<ts>^ORDERBY<id_field>``, both ascending, on
    string-ordered fields: then walking rows in ``(ts, id)`` order and keeping those the query
    matches is the same answer as filter-then-sort.
    """
    if not 1 <= len(parsed.order_by) == len(parsed.order_types) <= 2:
        return None
    # ORDERBYsys_id alone (a key sweep) walks the same kind of index, keyed by the id itself.
    ts_key, id_key = parsed.order_by if len(parsed.order_by) == 2 else parsed.order_by * 2
    if ts_key.descending or id_key.descending or id_key.field != id_field:
        return None
    if not _STRING_ORDERED.issuperset(parsed.order_types):
        return None
    ts_field = ts_key.field
    if parsed.matches_nothing or not parsed.groups:
        return KeyRange(ts_field, None, None)
    lows: list[tuple[str, ...]] = []
    highs: list[str] = []
    unbounded_low = unbounded_high = False
    for group in parsed.groups:
        low, high = _group_range(group, ts_field, id_field)
        if low is None:
            unbounded_low = True
        else:
            lows.append(low)
        if high is None:
            unbounded_high = True
        else:
            highs.append(high)
    # ^NQ groups are an OR: the union of their ranges, so the loosest bound of any group.
    return KeyRange(
        ts_field,
        None if unbounded_low else min(lows),
        None if unbounded_high else max(highs),
    )


def _group_range(
    group: AndGroup, ts_field: str, id_field: str
) -> tuple[tuple[str, ...] | None, str | None]:
    """``(low, high_ts)`` of one AND-group; only single-condition terms bound it."""
    lows: list[tuple[str, ...]] = []
    highs: list[str] = []
    equal_ts: str | None = None
    id_after: str | None = None
    for chain in group:
        if len(chain) != 1:
            continue  # an ^OR chain may match outside any one condition's range
        condition = chain[0]
        value = literal_operand(condition)
        if not value:
            continue
        op = condition.operator
        if condition.field == ts_field:
            if op == ">":
                # Every string greater than T is >= T + "\0": nothing sorts between them.
                lows.append((value + "\0",))
            elif op == ">=":
                lows.append((value,))
            elif op == "=":
                lows.append((value,))
                highs.append(value)
                equal_ts = value
            elif op in ("<=", "<"):
                highs.append(value)
        elif condition.field == id_field and op in (">", ">="):
            id_after = value
    if equal_ts is not None and id_after is not None:
        lows.append((equal_ts, id_after))
    # An AND is the intersection: the tightest bound of its terms holds.
    return (max(lows) if lows else None, min(highs) if highs else None)


def indexed_page(
    emu: Emulator,
    table: str,
    parsed: ParsedQuery,
    key_range: KeyRange,
    *,
    at: float,
    user: User,
    all_domains: bool,
    offset: int,
    limit: int,
    need_total: bool,
) -> tuple[list[Row], int]:
    """The page and match count the full evaluator gives, for a query sorted by ``(ts, sys_id)``.

    Without a count to report (``sysparm_no_count`` and no Link header) the walk stops once the
    page is full; otherwise the count is exact (every row up to the range's end is tested).
    """
    rows = emu.read_ordered_at(
        table, key_range.ts_field, at, user, all_domains=all_domains, low=key_range.low
    )
    ts_field, high = key_range.ts_field, key_range.high_ts
    matches_row = parsed.matches
    wanted = offset + limit
    page: list[Row] = []
    total = 0
    for row in rows:
        if high is not None and row.get(ts_field, "") > high:
            break
        if matches_row(row):
            if total < wanted:
                page.append(row)
            total += 1
            if total >= wanted and not need_total:
                break
    return page[offset:], total
