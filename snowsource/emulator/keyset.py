"""Keyset pages from the store's ``(ts, sys_id)`` index: the read path that does not grow.

A query sorted by exactly ``ORDERBY<ts>^ORDERBYsys_id`` (every page the daemon asks for), or by
``ORDERBYsys_id`` alone (a key sweep's pages), is answered by walking the index instead of
reading, filtering and sorting the whole table. The
query's ``^NQ`` groups give a conservative key range to walk; every row on the way still passes
the full evaluator (:meth:`ParsedQuery.matches`), so the answer is filter-then-sort's by
construction and only the walk's start and end depend on the range. Unless the range is
*exact*: a query made of nothing but key bounds (a keyset page as the daemon sends it, with no
filter of the table's own) selects every row of the range, so its count and its
``sysparm_offset`` are walked without evaluating each row, as a database answers them from an
index range scan (the evaluator took most of a 200,000-row count's time).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping

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
    #: Every row in the range matches: the query is only these bounds (a keyset page's own,
    #: as the daemon sends it), so a count or an offset walks the index without evaluating
    #: each row, as a database's index range scan does.
    exact: bool = False


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
        return KeyRange(ts_field, None, None, exact=not parsed.matches_nothing)
    lows: list[tuple[str, ...]] = []
    highs: list[str] = []
    unbounded_low = unbounded_high = False
    exact: list[tuple[tuple[str, ...], str | None]] = []
    every_exact = True
    for group in parsed.groups:
        low, high, group_exact = _group_range(group, ts_field, id_field)
        if group_exact and low is not None:
            exact.append((low, high))
        else:
            every_exact = False
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
        exact=every_exact and _contiguous(exact),
    )


def _group_range(
    group: AndGroup, ts_field: str, id_field: str
) -> tuple[tuple[str, ...] | None, str | None, bool]:
    """``(low, high_ts, exact)`` of one AND-group; only single-condition terms bound it.

    ``exact``: the group selects exactly the keys from ``low`` up to ``high_ts``, nothing less
    (every term is such a bound, and there is a ``low``): its rows need no evaluation.
    """
    lows: list[tuple[str, ...]] = []
    highs: list[str] = []
    equal_ts: str | None = None
    id_bounds: list[tuple[str, str]] = []
    exact = True
    for chain in group:
        if len(chain) != 1:
            exact = False
            continue  # an ^OR chain may match outside any one condition's range
        condition = chain[0]
        value = literal_operand(condition)
        if not value:
            exact = False
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
                exact = exact and op == "<="
            else:
                exact = False
        elif condition.field == id_field and op in (">", ">="):
            id_bounds.append((op, value))
        else:
            exact = False
    if equal_ts is not None and id_bounds:
        op, value = id_bounds[-1]
        lows.append((equal_ts, value + "\0" if op == ">" else value))
    # An id bound says nothing of the seconds but one: exact only as the one bound of that one.
    exact = (
        exact and bool(lows) and (not id_bounds or (equal_ts is not None and len(id_bounds) == 1))
    )
    # An AND is the intersection: the tightest bound of its terms holds.
    return (max(lows) if lows else None, min(highs) if highs else None, exact)


def _contiguous(ranges: list[tuple[tuple[str, ...], str | None]]) -> bool:
    """Whether the union of ``(low, high_ts)`` key ranges leaves no key out between its lowest
    low and its highest high: no gap after one range's last second before the next one's low."""
    ranges = sorted(ranges, key=lambda r: r[0])
    reach = ranges[0][1]
    for low, high in ranges[1:]:
        if reach is None:
            return True  # unbounded: everything after the first low is covered
        if low > (reach + "\0",):
            return False  # a key lies after every second up to ``reach`` and before ``low``
        reach = None if high is None else max(reach, high)
    return True


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
    wanted = offset + limit
    if key_range.exact:
        return _exact_page(rows, ts_field, high, offset=offset, wanted=wanted, count=need_total)
    matches_row = parsed.matches
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


def _exact_page(
    rows: Iterator[Row], ts_field: str, high: str | None, *, offset: int, wanted: int, count: bool
) -> tuple[list[Row], int]:
    """:func:`indexed_page` of an exact key range: every row up to ``high`` matches."""
    page: list[Row] = list(itertools.islice(rows, wanted))
    if high is not None:
        inside = len(page)
        while inside and page[inside - 1].get(ts_field, "") > high:
            inside -= 1
        if inside < len(page):
            return page[offset:inside], inside
    total = len(page)
    if count and total == wanted:
        if high is None:
            total += sum(1 for _ in rows)
        else:
            total += sum(
                1 for _ in itertools.takewhile(lambda r: r.get(ts_field, "") <= high, rows)
            )
    return page[offset:], total
