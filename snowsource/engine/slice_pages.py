"""The pages of a sliced backfill (SPEC §14.2): what one fetch of the plan asks and returns.

The coordinator (``engine.slices``) asks the plan which pages to fetch and runs each fetch here
as a task: the page itself comes from the table's one pager (``engine.pager``, the same one a
sweep's page stream reads) with its slot of the page budget, asked with the §5 keyset query from
the range's reader position up to the backfill's HI; here are the stream's hooks, the rows'
positions and, for an empty page, the count of rows hidden by ACLs. A page that arrives keeps
its slot: the lease is handed over with it (``Arrival.slot``) and given back when the page is
produced or dropped. A failure of the table (a bad row, a page of hidden rows) or a stop
comes back as a :class:`Failed`, for the plan to hold until the prefix reaches it.

The window's first page is special: it is read before the ranges exist, counted, and says where
they are cut (:meth:`SlicePager.first`); it is the first range's first page all the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snowsource.core.backfill_plan import BackfillPlan, Fetch
from snowsource.core.cursor import Position
from snowsource.core.errors import TableFailedError
from snowsource.core.page import page_positions, rows_before
from snowsource.core.slices import Backfill, SliceRange, seconds_between
from snowsource.engine.recorder import SweepCounts
from snowsource.engine.sweep import SweepTools
from snowsource.runtime.retrying import StoppedError

__all__ = ["Arrival", "Failed", "Reading", "SlicePager", "placed"]

Rows = list[dict[str, Any]]
Keys = list[tuple[str, str]]


@dataclass(eq=False)
class Reading:
    """One reader's pass over one range, from where it took the range: where planning stands
    (the cursor after its last planned page, and where the pass began: rows below may be in
    Kafka already) and the last page it read (the order check, the hidden rows' rule)."""

    range: SliceRange
    cursor: Position
    late_floor: Position
    previous: Position | None = None
    previous_full: bool = False


@dataclass(frozen=True, eq=False)
class Arrival:
    """A page fetched for a range, with the positions of its rows and its page slot."""

    fetch: Fetch
    reading: Reading
    rows: Rows
    keys: Keys
    limit: int  # the ``sysparm_limit`` it was asked with
    slot: contextlib.AsyncExitStack  # its page-budget lease, given back when it is closed


def placed(arrival: Arrival, first: int, committed: Position) -> None:
    """After a placing page (``core.slice_place``): its first ``first`` rows are the ranges'
    before it, dropped in place (no copy held), and its range's pass starts where the page
    placed it (never below the committed offset). Nothing for any other page."""
    if arrival.fetch.placing:
        start = max(arrival.fetch.range.start, committed)
        arrival.reading.cursor = arrival.reading.late_floor = start
        del arrival.rows[:first], arrival.keys[:first]


@dataclass(frozen=True, eq=False)
class Failed:
    """A fetch that returned no page: stopped (the range is asked for again), or failing the
    table (raised once every row before it is acknowledged)."""

    fetch: Fetch
    error: TableFailedError | StoppedError


class SlicePager:
    """Fetches the pages of one sliced backfill."""

    def __init__(self, tools: SweepTools, counts: SweepCounts, *, start: Position) -> None:
        self._tools = tools
        self._pager = tools.pager
        self._spec = tools.spec
        self._counts = counts
        self._start = start

    async def fetch(self, fetch: Fetch, reading: Reading) -> Arrival | Failed:
        """One page the plan asked for, holding its slot from before the request on."""
        async with contextlib.AsyncExitStack() as slot:
            try:
                read = await self._pager.fetch(
                    fetch.after, fetch.hi, backfill=True, offset=fetch.skip
                )
                slot.push_async_exit(read.slot)  # given back if the page goes no further
                rows, keys = await self._read(fetch, reading, read.page.rows, read.limit)
            except (TableFailedError, StoppedError) as exc:
                return Failed(fetch, exc)
            return Arrival(fetch, reading, rows, keys, read.limit, slot.pop_all())
        raise AssertionError("unreachable")  # pragma: no cover - mypy: the block returns

    async def first(
        self, hi: str, committed: Position, reads: Callable[[Fetch], Reading]
    ) -> tuple[BackfillPlan, Arrival | Failed | None]:
        """Read the window's first page, then cut the ranges from its first row on, not from
        the start (a table whose rows begin in 2015 would otherwise give most slices decades of
        nothing); the page is the first range's first page, so cutting costs no request of its
        own. No page when it came back empty (an empty window, or rows hidden by ACLs): the
        ranges then cover the whole window and each range's reader checks its own."""
        start = self._start
        async with contextlib.AsyncExitStack() as slot:
            # Counted: how many rows the window holds says how many ranges are worth a request.
            read = await self._pager.fetch(start, hi, backfill=True, count=True)
            slot.push_async_exit(read.slot)
            page, limit = read.page, read.limit
            if not page.rows:
                return BackfillPlan(self.board(start, hi, committed), page_rows=limit), None
            ts = self._row_ts(page.rows[0], hi)
            assert ts is not None, "the first row's failure was raised"
            board = self.board(start, hi, committed)
            if ts > start.ts or page.total_count is not None:
                first_row = Position(ts, "") if ts > start.ts else start
                full = len(page.rows) >= limit
                last_ts = self._row_ts(page.rows[-1], hi, fails=False) if full else None
                spanned = seconds_between(ts, last_ts) if last_ts is not None else None
                board = self.board(first_row, hi, committed, page.total_count, (limit, spanned))
            plan = BackfillPlan(board, page_rows=limit)
            fetch = plan.first_fetch(limit)
            reading = reads(fetch)  # its reader's pass over the first range
            try:
                rows, keys = await self._read(fetch, reading, page.rows, limit, after=start)
            except TableFailedError as exc:
                return plan, Failed(fetch, exc)
            return plan, Arrival(fetch, reading, rows, keys, limit, slot.pop_all())
        raise AssertionError("unreachable")  # pragma: no cover - mypy: the block returns

    def board(
        self,
        start: Position,
        hi: str,
        committed: Position,
        expected: int | None = None,
        page: tuple[int, int | None] = (0, None),
    ) -> Backfill:
        """The board; ``expected`` rows in the window (its first page's count) and that page's
        size say how many ranges are worth their requests, and the seconds it spanned (when
        full) where to cut them."""
        spec = self._spec
        return Backfill(
            start,
            hi,
            slices=spec.backfill_slices,
            max_ahead=spec.backfill_max_ahead_rows,
            committed=committed,
            expected_rows=expected,
            page_rows=page[0] or None,
            first_page_seconds=page[1],
        )

    async def _read(
        self,
        fetch: Fetch,
        reading: Reading,
        rows: Rows,
        limit: int,
        *,
        after: Position | None = None,
    ) -> tuple[Rows, Keys]:
        """A fetched page's rows and their positions. An empty page of a range hid a whole page
        of its matches when the count says so (asked before the plan hears of the page: an
        empty page finishes the range, and the prefix must not pass it while the count is in
        flight). A range's first page says nothing came before it: an empty one may be a page
        of rows the user cannot read (ACLs apply after sysparm_limit); it is stuck only when a
        whole page of the range's matches was hidden."""
        self._tools.recorder.page_read(self._counts)
        await self._tools.hooks.prepare(rows)
        rows, keys = self._positions(fetch, rows, reading.previous, after or fetch.after)
        # A placing page that came back empty leaves its range's seconds to the range before
        # it, whose reader counts hidden rows as it reads them.
        if not keys and not fetch.placing and (reading.previous_full or reading.previous is None):
            at_least = 1 if reading.previous_full else limit
            await self._tools.reader.check_hidden(fetch.after, fetch.end_hi, at_least=at_least)
        return rows, keys

    def _positions(
        self, fetch: Fetch, rows: Rows, previous: Position | None, after: Position
    ) -> tuple[Rows, Keys]:
        """The page's rows and their positions. A row that FAILs the table but lies past the
        range's end is left to its own range's reader, which meets it after the prefix it
        follows (this range's rows may still be in production): the page ends before it."""
        spec, shaper, hi = self._spec, self._tools.hooks.shaper, fetch.hi
        try:
            keys = page_positions(spec, shaper, rows, after=after, hi=hi, previous=previous)
        except TableFailedError:
            inside = rows_before(spec, shaper, rows, fetch.range.end)
            if inside == len(rows):
                raise
            rows = rows[:inside]
            keys = page_positions(spec, shaper, rows, after=after, hi=hi, previous=previous)
        return rows, keys

    def _row_ts(self, row: dict[str, Any], hi: str, *, fails: bool = True) -> str | None:
        """A row's timestamp in the window; ``None`` for a bad row when it must not ``fail``
        the table here (its range's reader meets it in order)."""
        try:
            positions = page_positions(
                self._spec, self._tools.hooks.shaper, [row], after=self._start, hi=hi,
                previous=None,
            )  # fmt: skip
        except TableFailedError:
            if fails:
                raise
            return None
        return positions[0][0]
