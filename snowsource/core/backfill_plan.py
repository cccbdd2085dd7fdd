"""The sliced backfill as a pure plan (SPEC §14.2): what to fetch next, and where it stands.

``core.slices.Backfill`` (the board) knows the ranges and their rules: which range a slice takes,
how a page is clipped, the max-ahead allowance, the contiguous acknowledged prefix. This module
puts a state machine over it that a single coordinator can drive without keeping any state of
its own (no wake lists, no failure flags):

- :meth:`BackfillPlan.next_fetches` says which pages to ask for now, given the free page slots
  and whether the instance is contended. Each :class:`Fetch` names its range, its reader (a
  slice: at most one fetch in flight each) and the window to ask for;
- :meth:`BackfillPlan.on_page` takes a fetched page's positions and says how many of its rows
  belong to the range (the rest is the next range's); :meth:`on_fetch_failed` gives a fetch's
  reservation back (a transient error: the range is asked for again; a failure of the table:
  the range holds it until the prefix reaches it);
- :meth:`BackfillPlan.on_ack` takes a page's acknowledgement, whole or in part;
- :meth:`BackfillPlan.advance` is the one place the committed offset moves: it returns the
  prefix when it passed the last one returned, never a position behind it;
- :meth:`BackfillPlan.outcome` replaces the flags: running, done, stopped, failed (a range's
  failure may now be raised: everything before it is acknowledged), or blocked (and why).

Every range is in one explicit :class:`RangeState`. The plan never waits: the coordinator
re-asks after each event (a page, an ack, a failure, a stop).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from snowsource.core.cursor import Position
from snowsource.core.slices import Backfill, SliceProgress, SliceRange

__all__ = ["BackfillPlan", "Fetch", "Kept", "Outcome", "RangeState", "Status"]

#: Pages of one range read but not acknowledged while its next page is fetched: one being
#: produced and one arriving (SPEC §5 pipelining, per slice as per pager).
PAGES_AHEAD = 2


class RangeState(Enum):
    """Where one range stands."""

    FREE = "free"  # nobody reads it (never started, or left for one nearer the prefix)
    READING = "reading"  # a slice pages it
    READ = "read"  # every row returned; some pages await their acks
    SETTLED = "settled"  # every row returned and acknowledged
    BROKEN = "broken"  # a page was acknowledged in part: the prefix never passes it
    FAILING = "failing"  # a fetch failed the table: raised once the prefix reaches it


class Status(Enum):
    """What the backfill as a whole is doing (:meth:`BackfillPlan.outcome`)."""

    RUNNING = "running"
    DONE = "done"  # every range read and acknowledged
    STOPPED = "stopped"  # stop asked, nothing in flight any more
    FAILED = "failed"  # a range's failure is to be raised now
    BLOCKED = "blocked"  # nothing can move any more (``Outcome.reason`` says why)


@dataclass(frozen=True)
class Outcome:
    status: Status
    reason: str = ""
    failed: SliceRange | None = None  # the range whose failure is raised (``FAILED``)


@dataclass(frozen=True, eq=False)
class Fetch:
    """A page to ask for: ``after`` up to the backfill's ``hi``, at most ``limit`` rows, the
    first ``skip`` of them skipped (``sysparm_offset``: a page placing its range)."""

    range: SliceRange
    reader: int
    after: Position
    end_hi: str  # the range's last second when asked (the bound of its hidden-rows count)
    hi: str
    limit: int
    skip: int = 0
    placing: bool = False  # the range's first page, which places it (``core.slice_place``)


class Kept(NamedTuple):
    """The rows of a page that are its range's: ``rows`` of them from index ``first`` on (a
    placing page's rows before its range's start are the ranges' before it)."""

    first: int
    rows: int


class BackfillPlan:
    """One sliced backfill's state machine over its board (pure, no I/O)."""

    def __init__(self, board: Backfill, *, page_rows: int) -> None:
        self.board = board
        self.page_rows = page_rows
        self._reading: dict[int, SliceRange] = {}  # reader -> the range it pages
        self._in_flight: dict[int, Fetch] = {}  # reader -> its fetch
        self._committed = board.prefix()  # the last offset :meth:`advance` returned
        self._failing: dict[int, SliceRange] = {}  # id(range) -> a range that failed the table
        self._broken: SliceRange | None = None
        self._stopped = False
        self._ids = itertools.count()

    # ------------------------------------------------------------------ the state

    def state(self, r: SliceRange) -> RangeState:
        if r.broken:
            return RangeState.BROKEN
        if id(r) in self._failing:
            return RangeState.FAILING
        if r.finished:
            return RangeState.SETTLED if r.pending == 0 else RangeState.READ
        return RangeState.FREE if r.reader is None else RangeState.READING

    def in_flight(self) -> int:
        """Fetches asked for and not answered yet."""
        return len(self._in_flight)

    def progress(self) -> SliceProgress:
        return self.board.progress()

    # ------------------------------------------------------------------ what to fetch

    def first_fetch(self, limit: int) -> Fetch:
        """The window's first page, already asked for by the engine: the first range's."""
        r = self.board.take(0)
        if r is not self.board.ranges[0]:
            raise ValueError("the first page is the first range's")
        return self._ask(0, r, limit)

    def next_fetches(
        self, free_slots: int, *, contended: bool, page_rows: int | None = None
    ) -> list[Fetch]:
        """The pages to ask for now, at most ``free_slots``; none once stopped or a page was
        acknowledged in part; once a range failed the table, only pages before it (the prefix
        must reach it before its failure is raised). ``page_rows``: the page size from now on
        (the engine halves it when the instance runs out of time, SPEC §9).

        A reader (slice) has one fetch in flight at most; a range at most ``PAGES_AHEAD`` pages
        read and unacknowledged. While the instance is ``contended`` only the first reader starts
        a new range (another range adds requests, not concurrency), unless nobody reads the
        range that holds the prefix back.
        """
        if page_rows is not None:
            self.page_rows = page_rows
            self.board.page_rows_now(page_rows)
        if self._stopped or self._broken is not None:
            return []
        fetches: list[Fetch] = []
        for reader in range(self.board.slices):
            if len(fetches) >= free_slots:
                break
            if reader in self._in_flight:
                continue
            r = self._range_for(reader, contended=contended)
            if r is not None and self._may_ask(r) and not self._after_failure(r):
                fetches.append(self._ask(reader, r, self.page_rows))
        return fetches

    def _range_for(self, reader: int, *, contended: bool) -> SliceRange | None:
        board = self.board
        r = self._reading.get(reader)
        if r is not None and id(r) in self._failing:
            return None  # its reader stays with it: it holds the table's failure
        if r is not None and not r.finished and board.should_leave(r):
            if r.pending:
                return None  # its page in production is acknowledged first
            board.leave(r)
            r = None
        if r is None or r.finished:
            self._reading.pop(reader, None)
            if reader > 0 and contended and not board.prefix_free():
                return None
            r = board.take(reader)
            if r is None:
                return None
            self._reading[reader] = r
        return r

    def _may_ask(self, r: SliceRange) -> bool:
        if r.pending >= PAGES_AHEAD:
            return False
        return self.board.may_fetch(r, self.page_rows)

    def _after_failure(self, r: SliceRange) -> bool:
        """Whether ``r`` is, or lies after, a range that failed the table."""
        if not self._failing:
            return False
        index = self.board.ranges.index(r)
        return any(self.board.ranges.index(x) <= index for x in self._failing.values())

    def _ask(self, reader: int, r: SliceRange, limit: int) -> Fetch:
        after, skip = self.board.ask(r)
        fetch = Fetch(r, reader, after, r.hi, self.board.hi, limit, skip, r.floating)
        self.board.reserve(r, limit)
        self._reading[reader] = r
        self._in_flight[reader] = fetch
        return fetch

    # ------------------------------------------------------------------ what happened

    def on_page(self, fetch: Fetch, keys: Sequence[tuple[str, str]]) -> Kept:
        """A fetched page's rows are at ``keys`` (cursor order): which belong to its range (a
        page that reaches past the range's end finishes it, and the rest is the next range's;
        a placing page's rows before where it places its range are the ranges' before it).
        Each page with a row kept awaits one :meth:`on_ack`."""
        self._done(fetch)
        r = fetch.range
        first = self.board.place(r, keys) if fetch.placing else 0
        return Kept(first, self.board.arrived(r, keys[first:], fetch.limit - first))

    def on_fetch_failed(self, fetch: Fetch, *, fails_table: bool = False) -> None:
        """A fetch returned nothing usable. Transient (stopped, cancelled, retried out): the
        range is asked for again. ``fails_table``: the range holds the table's failure until
        every row before it is acknowledged (:meth:`outcome` then says ``FAILED``)."""
        self._done(fetch)
        self.board.cancelled(fetch.range, fetch.limit)
        if fails_table:
            self._failing[id(fetch.range)] = fetch.range

    def fail(self, r: SliceRange) -> None:
        """A page of ``r`` failed the table after it arrived (a bad row)."""
        self._failing[id(r)] = r

    def on_ack(
        self, r: SliceRange, last_emitted: Position | None, *, complete: bool = True
    ) -> None:
        """``r``'s oldest unacknowledged page is acknowledged up to ``last_emitted`` (its last
        emitted row; ``None`` when none was). Not ``complete``: Kafka refused the rest, which
        will never be acknowledged: the prefix may reach ``last_emitted`` but never passes the
        page (the table restarts or FAILs from there)."""
        if complete:
            self.board.acked(r, last_emitted)
        else:
            self.board.partly_acked(r, last_emitted)
            self._broken = self._broken or r

    def stop(self) -> None:
        """No more fetches: the pages in flight or in production end as they will."""
        self._stopped = True

    def _done(self, fetch: Fetch) -> None:
        if self._in_flight.get(fetch.reader) is not fetch:
            raise ValueError(f"no such fetch in flight: {fetch}")
        del self._in_flight[fetch.reader]

    # ------------------------------------------------------------------ where it stands

    def advance(self) -> Position | None:
        """The offset to commit when the prefix moved past the last one returned (``None``
        when it did not): the one place a sliced backfill's offset moves, forward only."""
        prefix = self.board.prefix()
        if prefix is None or (self._committed is not None and prefix <= self._committed):
            return None
        self._committed = prefix
        return prefix

    @property
    def committed(self) -> Position | None:
        """The last offset :meth:`advance` returned (the backfill's start before)."""
        return self._committed

    def for_transaction(self, r: SliceRange, last_emitted: Position) -> Position | None:
        """The offset a transaction carrying ``r``'s oldest pending page commits: the prefix
        with that page acknowledged, never below the last one committed."""
        prefix = self.board.prefix_if_acked(r, last_emitted)
        if self._committed is not None and (prefix is None or prefix < self._committed):
            return self._committed
        return prefix

    def outcome(self) -> Outcome:
        """What the backfill is doing; the engine's loop runs while it is ``RUNNING``."""
        board = self.board
        busy = bool(self._in_flight) or self._acks_awaited() > 0
        for r in sorted(self._failing.values(), key=board.ranges.index):
            # Everything before it acknowledged; or nothing can move any more (a stop, a page
            # acknowledged in part, or nobody left to read the ranges before it).
            if board.settled_before(r) and r.pending == 0:
                return Outcome(Status.FAILED, "a range failed the table", failed=r)
            if not busy and (self._stopped or self._broken is not None):
                return Outcome(Status.FAILED, "a range failed the table", failed=r)
        if self._broken is not None and not busy:
            return Outcome(Status.BLOCKED, "a page was acknowledged only in part", self._broken)
        if board.done():
            return Outcome(Status.DONE)
        if self._stopped and not self._in_flight:
            return Outcome(Status.STOPPED, "stop requested")
        return Outcome(Status.RUNNING)

    def _acks_awaited(self) -> int:
        """Pages read whose acks may still come (a page acknowledged in part counts no more)."""
        return sum(r.pending for r in self.board.ranges)

    def last_read(self) -> Position | None:
        """The furthest row any page returned: where the sweep after the backfill continues."""
        return self.board.last_read()
