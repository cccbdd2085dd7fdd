"""A table's sliced backfill (SPEC §14.2): up to N range pagers, one committed prefix.

The poller hands a generation's first sweep here when the table is backfilling (no offset yet,
or an offset whose phase is ``backfill``) and ``backfill.slices`` is above 1. The rules live in
``core.slices.Backfill``; this module only runs them:

- the ranges are cut from the window's first row on, not from ``start.timestamp``: the window's
  first page, which is also the first range's first page, says where that is;
- one task per slice, under one ``asyncio.TaskGroup``: take a range, page it with the §5 keyset
  query from the range's start up to the backfill's HI (the first row past the range's end
  finishes it, so a range whose rows run on needs no empty request; a reader whose next ranges
  nobody started takes them over, ``Backfill.arrived``), produce each page as it arrives while
  fetching the next (one unacknowledged page per slice), repeat until nothing is left to take
  or steal;
- before each page a slice outside the prefix range waits until ``backfill.max.ahead.rows``
  allows it, or leaves its range for one nearer the prefix when the rows already ahead of the
  prefix plus those expected unread before its range exceed that limit and a range before it
  can be split (``Backfill.should_leave``); it produces only once the table has a
  committed offset at all (so a crash never leaves records ahead of a table that has no offset:
  the §13.4 rebuild needs a committed cursor to start from), but fetches meanwhile;
- after each acknowledged page the prefix is recomputed and, when it moved, committed
  (``engine.slice_prefix``). With exactly-once each page's transaction carries the prefix as it
  stands with that page included.

A range is paged by its slice's own loop rather than ``engine.page_stream``: a range continues
after a short page (ACLs shorten pages; a range has no next sweep to pick up the rest), its end
may move while a page is in flight (work stealing), and every page waits for the max-ahead gate.
Pages go through the page budget like the stream's, taken only once the slice is admitted, so a
waiting slice holds no page; the HTTP pool grants requests fairly between tables (a table's
slices share its alias as their requester key). On stop every slice stops fetching, lets the page
it is producing finish within the stop's deadline, and ends; a produce failure ends them all and
the table restarts from its committed offset, exactly like the single pager.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from snowsource.core.cursor import Position, next_sweep_start
from snowsource.core.errors import TableFailedError
from snowsource.core.outbound import PageAck
from snowsource.core.page import PagePlan, page_positions, plan_page, rows_before
from snowsource.core.slices import Backfill, SliceRange, seconds_between
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import Page
from snowsource.engine import failures
from snowsource.engine.budget import PageBudget
from snowsource.engine.delivery import TableDelivery
from snowsource.engine.failures import FailureSource, FailureTracker
from snowsource.engine.reader import TableReader
from snowsource.engine.recorder import SweepCounts, TableRecorder
from snowsource.engine.slice_prefix import SlicePrefix
from snowsource.engine.streams import StreamHooks
from snowsource.engine.table_generation import TableGeneration
from snowsource.runtime.aio import done_before, first_error
from snowsource.runtime.deadline import StopSignal
from snowsource.runtime.retrying import StoppedError

__all__ = ["SliceTools", "SlicedBackfill", "sliced_sweep"]


@dataclass(frozen=True)
class SliceTools:
    """What a poller lends its sliced backfills (built once per poller)."""

    spec: TableSpec
    reader: TableReader
    hooks: StreamHooks
    recorder: TableRecorder
    stop: StopSignal
    #: The table's own delivery, and how to make another like it.
    table_delivery: TableDelivery
    fresh_delivery: Callable[[], TableDelivery]
    now: Callable[[], datetime]  # instance time, for the lag while backfilling
    failures: FailureTracker
    pages: PageBudget | None = None

    def delivery(self) -> TableDelivery:
        """A delivery for one slice: a fresh one each (at least once), so slices produce side
        by side; the table's own with exactly once: one transactional producer per table, whose
        transactions take turns anyway."""
        if self.table_delivery.exactly_once:
            return self.table_delivery
        return self.fresh_delivery()


async def sliced_sweep(
    tools: SliceTools, gen: TableGeneration, start: Position, hi: str
) -> Position:
    """A generation's first sweep, read by slices; where the sweep after it starts.

    No wait and no ``stream`` mark after it: the sweep that follows, one pager as in release 2,
    reads what changed meanwhile and says whether the table is caught up.
    """
    backfill = SlicedBackfill(tools, gen, start=start, hi=hi)
    try:
        last = await backfill.run()
    finally:
        tools.recorder.slices(None)
    # Every range acknowledged: the prefix ends at the last emitted row; rows after it that
    # were left out (already in Kafka after a crash) are passed too (SPEC §15.4).
    gen.sweep_read(last, phase="backfill")
    tools.recorder.sweep_ended(caught_up=False)
    return next_sweep_start(start, last, hi, tools.spec.overlap_seconds)


class SlicedBackfill:
    """One sliced backfill sweep of a table, from ``start`` up to ``hi``."""

    def __init__(
        self, tools: SliceTools, gen: TableGeneration, *, start: Position, hi: str
    ) -> None:
        spec = tools.spec
        self._tools = tools
        self._spec = spec
        self._gen = gen
        self._start = start
        # Where the table stands: its committed position (its start, with no offset yet).
        self._committed = gen.cursor
        self._prefix = SlicePrefix(spec, gen, tools.recorder, tools.now)
        self.board = self._board(start, hi)
        self._counts = SweepCounts()
        # Rows older than this are never read again, not even by the stream phase that
        # follows (it starts at HI - overlap): they need no dedup entry.
        self._keep_from = Position(hi, "").minus(spec.overlap_seconds).ts
        self._waiters: list[asyncio.Future[None]] = []
        self._running = spec.backfill_slices  # slices that have not ended
        self._failing = 0  # slices holding a failure of the table until the prefix reaches it
        self._undelivered = False  # a page's delivery raised: the prefix never passes it
        self._unclaimed = False  # the window's first page holds a page slot no slice took yet
        self._log = structlog.get_logger("snowsource.engine.slices").bind(table=spec.alias)

    def _board(
        self,
        start: Position,
        hi: str,
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
            committed=self._committed,
            expected_rows=expected,
            page_rows=page[0] or None,
            first_page_seconds=page[1],
        )

    async def run(self) -> Position | None:
        """Read every range; the furthest row read (``None`` when there was none).

        Raises ``StoppedError`` when stopped before the end, and a slice's failure as is.
        """
        first = await self._first_page()
        self._unclaimed = first is not None  # its page slot, until slice 0 takes the page
        spec, board = self._spec, self.board
        self._log.info(
            "sliced backfill", slices=spec.backfill_slices, ranges=len(board.ranges), hi=board.hi
        )
        self._gen.on_committed = self._wake  # slices wait for the table's first offset
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(spec.backfill_slices):
                    given = first if index == 0 else None
                    group.create_task(self._slice(index, given), name=f"slice:{spec.alias}:{index}")
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None
        finally:
            self._gen.on_committed = None
            if self._unclaimed:  # cancelled before slice 0 ran
                self._release()
        if not board.done():
            raise StoppedError("stop requested during the sliced backfill")
        return board.last_read()

    async def _first_page(self) -> tuple[SliceRange, _Fetched] | None:
        """Read the window's first page, then cut the ranges from its first row on, not from
        ``start.timestamp`` (a table whose rows begin in 2015 would otherwise give most slices
        decades of nothing); the page is the first range's first page, so cutting costs no
        request of its own. ``None`` when it came back empty (an empty window, or rows hidden by
        ACLs): the ranges then cover the whole window and each range's reader checks its own.
        """
        start, hi = self._start, self.board.hi
        # Counted: how many rows the window holds says how many ranges are worth a request.
        page, limit = await self._fetch(start, hi, count=True)  # its page slot is ours now
        try:
            if not page.rows:
                self._release()
                return None
            ts = self._row_ts(page.rows[0])
            assert ts is not None, "the first row's failure was raised"
        except BaseException:
            self._release()
            raise
        if ts > start.ts or page.total_count is not None:
            first_row = Position(ts, "") if ts > start.ts else start
            last_ts = self._row_ts(page.rows[-1], fails=False) if len(page.rows) >= limit else None
            spanned = seconds_between(ts, last_ts) if last_ts is not None else None
            self.board = self._board(first_row, hi, page.total_count, (limit, spanned))
        r = self.board.take(0)
        assert r is self.board.ranges[0], "nothing is read before the first range"
        self.board.reserve(r, limit)
        return r, _Fetched(page, limit, start, r.hi, hi, limit)

    def _row_ts(self, row: dict[str, Any], *, fails: bool = True) -> str | None:
        """A row's timestamp in the window; ``None`` for a bad row when it must not ``fail``
        the table here (its range's reader meets it in order)."""
        try:
            positions = page_positions(
                self._spec, self._tools.hooks.shaper, [row], after=self._start, hi=self.board.hi,
                previous=None,
            )  # fmt: skip
        except TableFailedError:
            if fails:
                raise
            return None
        return positions[0][0]

    # ------------------------------------------------------------------ one slice

    async def _slice(self, index: int, given: tuple[SliceRange, _Fetched] | None) -> None:
        """One slice: read ranges until none is left; ``given`` is the first range with its
        first page already fetched (slice 0)."""
        delivery = self._tools.delivery()
        # The page whose acks this slice awaits while it fetches the next (at most one: one
        # unacknowledged page per slice, as one pager has per table, SPEC §5 pipelining).
        producing: list[asyncio.Task[None]] = []
        try:
            if given is not None:
                await self._read(given[0], delivery, producing, given[1])
            while not self._tools.stop.is_set():
                if index > 0:
                    await self._while_contended()
                r = self.board.take(index)
                if r is None:
                    if self.board.all_read():
                        break
                    # Nothing worth splitting yet: a range whose first page is in flight may
                    # turn out dense. Look again after the table's next page.
                    await self._next_page()
                    continue
                self._tools.recorder.slices(self.board.progress())
                await self._read(r, delivery, producing)
            await _settle(producing)
        except StoppedError:
            # The page in production finishes (or runs out of the stop's deadline) first.
            with contextlib.suppress(StoppedError):
                await _settle(producing)
        except BaseException:
            for task in producing:
                task.cancel()
            await asyncio.gather(*producing, return_exceptions=True)
            raise
        finally:
            self._running -= 1
            self._wake()

    async def _read(
        self,
        r: SliceRange,
        delivery: TableDelivery,
        producing: list[asyncio.Task[None]],
        first: _Fetched | None = None,
    ) -> None:
        """Page ``r`` until it is finished (read to its end, or its end handed over), from
        ``first`` when its first page was fetched already. Pages ask up to the backfill's HI
        (module docstring); the next is asked for as soon as this one's last position is known,
        before it is planned and produced, so a slice's request slot stays as busy as a pager's.
        """
        tools, board = self._tools, self.board
        # A range left by another slice (``Backfill.leave``) resumes where its pages ended.
        at = _Cursor(max(r.after, self._committed))
        previous: Position | None = None
        previous_full = False
        fetch: asyncio.Future[_Fetched | None] | None = (
            _ready(first) if first is not None else asyncio.create_task(self._fetch_for(r))
        )
        try:
            while fetch is not None:
                got = await fetch  # a done future (the first page) does not suspend
                self._unclaimed = self._unclaimed and got is not first  # its slot: released below
                if got is None:
                    return  # left for a range nearer the prefix
                fetch, limit = None, got.limit
                handed_over = False
                try:
                    tools.recorder.page_read(self._counts)
                    rows = got.page.rows
                    await tools.hooks.prepare(rows)
                    rows, keys = self._positions(r, got, rows, previous)
                    if not keys and (previous_full or previous is None):
                        await self._hidden_rows(got, after_full_page=previous_full)
                    keep = board.arrived(r, keys, got.reserved)
                    if not r.finished:
                        fetch = asyncio.create_task(self._fetch_for(r))
                    if keep:
                        page = (rows[:keep], keys[:keep])
                        del got, rows
                        await _settle(producing)
                        job = self._produce(r, page, at, delivery)
                        producing.append(asyncio.create_task(job, name="slice-page"))
                        handed_over = True
                        previous = Position(*keys[keep - 1])
                    previous_full = len(keys) >= limit
                finally:
                    if not handed_over:
                        self._release()
                self._moved()
        except TableFailedError:
            await self._prefix_reaches(r)  # its page slot is free again meanwhile
            raise
        finally:
            if fetch is not None:
                await self._drop(r, fetch, first)

    async def _drop(
        self, r: SliceRange, fetch: asyncio.Future[_Fetched | None], first: _Fetched | None
    ) -> None:
        """Cancel a fetch its reader no longer waits for; a page it fetched all the same gives
        back its page slot and its reservation (a table failing, or stopping, while its next
        page was on the way would otherwise keep a slot of the process's page budget)."""
        fetch.cancel()
        try:
            await asyncio.gather(fetch, return_exceptions=True)
        finally:  # also when cancelled again meanwhile (a sibling slice failed)
            unused = _fetched(fetch)
            if unused is not None:
                self._unclaimed = self._unclaimed and unused is not first
                self.board.cancelled(r, unused.reserved)
                self._release()

    def _positions(
        self,
        r: SliceRange,
        got: _Fetched,
        rows: list[dict[str, Any]],
        previous: Position | None,
    ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
        """The page's rows and their positions. A row that FAILs the table but lies past the
        range's end is left to its own range's reader, which meets it after the prefix it
        follows (this range's rows may still be in production): the page ends before it."""
        spec, shaper = self._spec, self._tools.hooks.shaper
        try:
            keys = page_positions(spec, shaper, rows, after=got.after, hi=got.hi, previous=previous)
        except TableFailedError:
            inside = rows_before(spec, shaper, rows, r.end)
            if inside == len(rows):
                raise
            rows = rows[:inside]
            keys = page_positions(spec, shaper, rows, after=got.after, hi=got.hi, previous=previous)
        return rows, keys

    async def _prefix_reaches(self, r: SliceRange) -> None:
        """Wait until every row ``r``'s reader produced, and every row before, is acknowledged:
        a bad row (or any other failure of the table) FAILs it with everything before in Kafka
        and committed, as with one pager; the other slices read on meanwhile. Not once a
        page's delivery failed (it never will be acknowledged: a fenced producer fails every
        page after), nor when every slice still running holds a failure and no page awaits its
        acks: then nothing can move any more (nobody would read a range left free before
        them)."""
        self._failing += 1
        self._wake()
        try:
            while not (self.board.settled_before(r) and r.pending == 0):
                if self._undelivered or (
                    self._failing >= self._running and not self.board.pending()
                ):
                    return
                await self._next_page()
        finally:
            self._failing -= 1

    async def _hidden_rows(self, got: _Fetched, *, after_full_page: bool) -> None:
        """Fail the table when an empty page of a range hid a whole page of its matches.

        A range's first page says nothing came before it: an empty one may be a page of rows
        the user cannot read (ACLs apply after sysparm_limit); it is stuck only when a whole
        page of the range's matches was hidden. Asked before the board hears of the page: an
        empty page finishes the range, and the other slices' prefix must not pass it while the
        count is in flight.
        """
        at_least = 1 if after_full_page else got.limit
        await self._tools.reader.check_hidden(got.after, got.end_hi, at_least=at_least)

    async def _fetch_for(self, r: SliceRange) -> _Fetched | None:
        """``r``'s next page: once admitted, reserved on the board, and fetched; ``None``
        when the slice left ``r`` to help nearer the prefix (``Backfill.should_leave``)."""
        board = self.board
        reserved = self._tools.reader.sizer.size
        if not await self._admitted(r, reserved):
            board.leave(r)
            return None
        after, end_hi, hi = r.after, r.hi, board.hi
        board.reserve(r, reserved)
        try:
            page, limit = await self._fetch(after, hi)
        except BaseException:
            board.cancelled(r, reserved)
            raise
        return _Fetched(page, limit, after, end_hi, hi, reserved)

    async def _while_contended(self) -> None:
        """A slice other than the first starts a range only while the instance has room.

        When the session pool is saturated (requests of this table or others wait for it, or
        every slot of its limit is in flight) or pages wait for the page budget, another range
        would add requests (each range ends with a page of its own) and no concurrency: eight
        backfilling tables on eight sessions read as fast with one pager each. The slice waits
        for its table's next page (or the backfill's end) and looks again; its table's first
        slice never waits here, and a reader that pages on into untouched ranges takes them
        over without a request (``Backfill.arrived``).
        """
        board = self.board
        # Only this table's pages wake it: a range nobody reads holding the prefix back is
        # taken at once, or a table at its max-ahead limit would wait for the pool for ever.
        while self._contended() and not board.done() and not board.prefix_free():
            await self._next_page()

    async def _next_page(self) -> None:
        """Wait until a slice of this table read a page or ended (``StoppedError`` on stop)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if not await done_before(waiter, self._tools.stop.event):
            raise StoppedError("stop requested")

    async def _offset_exists(self, r: SliceRange) -> None:
        """Produce ahead of the prefix only once the table has a committed offset: a crash
        must never leave records ahead of a table without one (the §13.4 rebuild starts from a
        committed cursor). Only producing waits: the slices' first pages are fetched meanwhile.
        """
        while self._tools.recorder.status.committed is None and not self.board.holds_prefix(r):
            await self._next_page()

    def _contended(self) -> bool:
        """The session pool is saturated (``saturated()``), or pages wait for the page budget."""
        pages = self._tools.pages
        return self._tools.reader.contended() or (pages is not None and pages.waiting > 0)

    async def _admitted(self, r: SliceRange, limit: int) -> bool:
        """Wait until ``r`` may fetch a page of ``limit`` rows; False when its slice should
        leave it instead (``StoppedError`` on stop)."""
        board = self.board
        while not board.holds_prefix(r):
            if board.should_leave(r):
                if not r.pending:  # else its page in production is acknowledged first
                    return False
            elif board.may_fetch(r, limit):
                break
            await self._next_page()
        return True

    async def _fetch(self, after: Position, hi: str, *, count: bool = False) -> tuple[Page, int]:
        """A page, once the page budget has room; abandoned at once when stop is requested."""
        tools = self._tools
        if tools.pages is not None:
            await tools.pages.acquire(self._spec.alias)
        fetch = asyncio.ensure_future(tools.reader.page(after, hi, backfill=True, count=count))
        arrived = False
        try:
            arrived = await done_before(fetch, tools.stop.event)
        finally:
            if not arrived or fetch.exception() is not None:
                fetch.cancel()
                try:
                    await asyncio.gather(fetch, return_exceptions=True)
                finally:  # also when cancelled again meanwhile (a sibling slice failed)
                    self._release()
        if not arrived:
            raise StoppedError("stop requested")
        return fetch.result()

    def _release(self) -> None:
        if self._tools.pages is not None:
            self._tools.pages.release()

    def _plan(
        self,
        rows: Sequence[dict[str, Any]],
        keys: Sequence[tuple[str, str]],
        cursor: Position,
        late_floor: Position,
    ) -> PagePlan:
        return plan_page(
            self._spec,
            self._tools.hooks.shaper,
            rows,
            keys,
            phase="backfill",
            cursor=cursor,
            late_floor=late_floor,
            dedup=self._gen.dedup,
            keep_from=min(keys[-1][0], self._keep_from),
        )

    async def _produce(
        self,
        r: SliceRange,
        page: tuple[list[dict[str, Any]], list[tuple[str, str]]],
        at: _Cursor,
        delivery: TableDelivery,
    ) -> None:
        """Plan and deliver a page while its slice fetches the next; its page slot is free
        after. Planned here, not by the reader, so the next request leaves first; the pages of
        one range are planned in order (each waits for the one before it)."""
        try:
            rows, keys = page
            plan = self._plan(rows, keys, at.cursor, at.late_floor)
            del page, rows
            at.cursor = plan.cursor or at.cursor
            await self._deliver(r, plan, delivery)
        except BaseException:
            # The page awaits acks for ever (a fence, a refused transactional id, a record
            # Kafka did not take): no slice may wait for the prefix to pass it.
            self._undelivered = True
            self._wake()
            raise
        finally:
            self._release()

    async def _deliver(self, r: SliceRange, plan: PagePlan, delivery: TableDelivery) -> None:
        """Produce a page and wait for its acks; the prefix then takes them in."""
        ack: PageAck | None = None
        if plan.emits:
            await self._offset_exists(r)
            last = plan.emits[-1].position
            plan.commit_offset = lambda: self._prefix.for_transaction(self.board, r, last)
            with self._tools.failures.acks_overdue(self._spec, len(plan.emits)):
                ack = await delivery.deliver_page(plan)
            if ack is None:
                raise StoppedError("stop requested while records were unacknowledged")
        emitted = ack.acked if ack is not None else 0
        acked_to = plan.emits[emitted - 1].position if emitted else None
        if ack is None or ack.complete:
            self.board.acked(r, acked_to)
        else:
            # Kafka did not take the page after ``acked_to``: the prefix may reach it (as one
            # pager's offset does) but never pass the rest, and the table ends below it.
            self.board.partly_acked(r, acked_to)
            self._undelivered = True
        self._moved()  # the prefix first: the status shows the cursor it moved to
        self._tools.recorder.page_delivered(self._counts, self._gen.cursor, plan, ack)
        failures.refused(self._spec, plan, ack)
        self._tools.failures.succeeded(FailureSource.KAFKA)

    def _moved(self) -> None:
        """After a page: the prefix committed when it moved, the waiting slices woken."""
        self._prefix.moved(self.board)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class _Cursor:
    """Where one reader of a range stands for planning: the cursor after its last planned
    page, and where the reader started (rows below may be in Kafka already)."""

    __slots__ = ("cursor", "late_floor")

    def __init__(self, start: Position) -> None:
        self.cursor = start
        self.late_floor = start


@dataclass(frozen=True)
class _Fetched:
    """A page fetched for a range, with the window it was asked for."""

    page: Page
    limit: int
    after: Position
    end_hi: str  # the range's last second when the page was asked for (its count's bound)
    hi: str  # the query's upper bound: the backfill's HI
    reserved: int  # rows reserved on the board for it


def _fetched(fetch: asyncio.Future[_Fetched | None]) -> _Fetched | None:
    """The page a fetch ended with, if it ended with one."""
    if not fetch.done() or fetch.cancelled() or fetch.exception() is not None:
        return None
    return fetch.result()


def _ready(fetched: _Fetched) -> asyncio.Future[_Fetched | None]:
    """A page fetched before its range's reader started (the window's first), as a done
    future: awaiting it does not suspend, so no cancel can fall between the hand-over and the
    reader's own release of its page slot."""
    future: asyncio.Future[_Fetched | None] = asyncio.get_running_loop().create_future()
    future.set_result(fetched)
    return future


async def _settle(producing: list[asyncio.Task[None]]) -> None:
    """Wait for the page in production (its acks, the prefix it moves); raise its failure."""
    while producing:
        await producing[0]  # left in the list when it raises or we are cancelled: cancelled there
        producing.pop(0)
