"""A table's sliced backfill (SPEC §14.2): one coordinator over the plan, one committed prefix.

The poller hands a generation's first sweep here when the table is backfilling (no offset yet,
or an offset whose phase is ``backfill``) and ``backfill.slices`` is above 1. The rules live in
the pure plan (``core.backfill_plan.BackfillPlan`` over ``core.slices.Backfill``): which range
each slice reads, when it may fetch (``backfill.max.ahead.rows``, contention, leaving a range
for one nearer the prefix), the contiguous acknowledged prefix and how the backfill ends. This
module runs them as one loop, modelled on aiokafka's ``Sender``:

- ask the plan what to fetch (``next_fetches``), start those fetches (``engine.slice_pages``)
  and the produces whose turn it is, all in one ``asyncio.TaskGroup``;
- wait for the first of them to end (``asyncio.wait(FIRST_COMPLETED)``), or for a stop, or for
  the table's first offset;
- feed what happened back (``on_page``, ``on_fetch_failed``, ``on_ack`` whole or in part), commit
  the prefix when it moved (``engine.slice_prefix``), and ask again, until ``outcome()`` is no
  longer running.

A slice produces its pages one at a time, in the order read, through a delivery of its own (at
least once) or the table's transactional one; it fetches its next page meanwhile. A page ahead
of the prefix is produced only once the table has a committed offset at all (a crash must never
leave records ahead of a table that has no offset: the §13.4 rebuild needs a committed cursor to
start from). On stop the fetches are abandoned, the pages in production finish within the
stop's deadline and the rest are dropped; a produce failure ends them all and the table
restarts from its committed offset, exactly like the single pager.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from dataclasses import dataclass, field, replace

import structlog

from snowsource.core.backfill_plan import Fetch, Outcome, Status
from snowsource.core.cursor import Position, next_sweep_start
from snowsource.core.errors import TableFailedError
from snowsource.core.outbound import PageAck
from snowsource.core.page import PagePlan, plan_page
from snowsource.engine import failures
from snowsource.engine.delivery import TableDelivery
from snowsource.engine.failures import FailureSource, ProduceFailedError
from snowsource.engine.recorder import SweepCounts
from snowsource.engine.slice_pages import Arrival, Failed, Reading, SlicePager, SliceTools
from snowsource.engine.slice_prefix import SliceOffsets
from snowsource.engine.table_generation import TableGeneration
from snowsource.runtime.aio import first_error
from snowsource.runtime.retrying import StoppedError

__all__ = ["SliceTools", "SlicedBackfill", "sliced_sweep"]

Produced = tuple[PagePlan, PageAck | None, Fetch]


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


@dataclass(eq=False)
class _Slice:
    """One reader's pages on their way to Kafka: produced one at a time, in the order read."""

    delivery: TableDelivery
    reading: Reading | None = None  # its pass over the range it reads now
    ready: deque[tuple[Arrival, int]] = field(default_factory=deque)  # (page, rows kept)
    producing: asyncio.Task[Produced] | None = None


class SlicedBackfill:
    """One sliced backfill sweep of a table, from ``start`` up to ``hi``."""

    def __init__(
        self, tools: SliceTools, gen: TableGeneration, *, start: Position, hi: str
    ) -> None:
        spec = tools.spec
        self._tools, self._spec, self._gen, self._hi = tools, spec, gen, hi
        # Where the table stands: its committed position (its start, with no offset yet).
        self._committed = gen.cursor
        self._counts = SweepCounts()
        self._pager = SlicePager(tools, self._counts, start=start)
        # Rows older than this are never read again, not even by the stream phase that
        # follows (it starts at HI - overlap): they need no dedup entry.
        self._keep_from = Position(hi, "").minus(spec.overlap_seconds).ts
        self._slices = [_Slice(tools.delivery()) for _ in range(spec.backfill_slices)]
        self._fetching: dict[asyncio.Task[Arrival | Failed], Fetch] = {}
        self._failures: dict[int, TableFailedError] = {}  # id(range) -> the failure it holds
        self._log = structlog.get_logger("snowsource.engine.slices").bind(table=spec.alias)

    async def run(self) -> Position | None:
        """Read every range; the furthest row read (``None`` when there was none).

        Raises ``StoppedError`` when stopped before the end, and a range's failure as is.
        """
        tools = self._tools
        plan, first = await self._pager.first(self._hi, self._committed)
        self._plan = plan
        self._offsets = SliceOffsets(tools.spec, self._gen, tools.recorder, tools.now, plan)
        self._log.info(
            "sliced backfill", slices=self._spec.backfill_slices, ranges=len(plan.board.ranges),
            hi=self._hi,
        )  # fmt: skip
        try:
            # Every page's slot is closed here at the latest: a page read but never produced.
            async with contextlib.AsyncExitStack() as held, asyncio.TaskGroup() as group:
                if first is not None:
                    await self._fetched(first, held)
                outcome = await self._loop(group, held)
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None
        return self._ended(outcome)

    async def _loop(self, group: asyncio.TaskGroup, held: contextlib.AsyncExitStack) -> Outcome:
        """The one loop: start what the plan allows, wait for something to end, feed it back."""
        plan, stop = self._plan, self._tools.stop
        stopping = group.create_task(stop.event.wait(), name="slices:stop")
        offset = group.create_task(self._gen.has_offset.wait(), name="slices:offset")
        try:
            while True:
                if stopping.done():
                    await self._stop()
                started = self._start_fetches(group) + self._start_produces(group)
                outcome = plan.outcome()
                busy = [*self._fetching, *self._produces()]
                if outcome.status is not Status.RUNNING and not busy:
                    return outcome
                if not busy and not started and not self._waiting_for_offset():
                    raise RuntimeError(f"the sliced backfill stalls: {plan.board.ranges}")
                events = [t for t in (stopping, offset) if not t.done()]
                await asyncio.wait([*busy, *events], return_when=asyncio.FIRST_COMPLETED)
                for fetching in [t for t in self._fetching if t.done()]:
                    await self._fetch_ended(fetching, held)
                for lane in self._slices:
                    if lane.producing is not None and lane.producing.done():
                        produced, lane.producing = lane.producing.result(), None
                        self._delivered(produced)
                self._offsets.moved()
        finally:
            stopping.cancel()
            offset.cancel()

    def _start_fetches(self, group: asyncio.TaskGroup) -> int:
        """Ask the plan for pages. Each fetch waits for its page slot in the budget's fair queue
        (in turn with the other tables), so every reader is offered one."""
        plan, tools = self._plan, self._tools
        pages = tools.pages
        contended = tools.reader.contended() or (pages is not None and pages.waiting > 0)
        size = tools.reader.sizer.size
        fetches = plan.next_fetches(len(self._slices), contended=contended, page_rows=size)
        if not fetches and not self._fetching and not self._produces() and contended:
            # Nothing of this table in flight: another range adds concurrency, not requests.
            fetches = plan.next_fetches(len(self._slices), contended=False, page_rows=size)
        for fetch in fetches:
            lane = self._slices[fetch.reader]
            if lane.reading is None or lane.reading.range is not fetch.range:
                # A range left by another slice resumes where its pages ended.
                at = max(fetch.range.after, self._committed)
                lane.reading = Reading(fetch.range, at, at)
            job = self._pager.fetch(fetch, lane.reading)
            self._fetching[group.create_task(job, name=f"slice-fetch:{fetch.reader}")] = fetch
        if fetches:
            tools.recorder.slices(plan.progress())
        return len(fetches)

    def _start_produces(self, group: asyncio.TaskGroup) -> int:
        """Start each slice's oldest page read, once its page before it is acknowledged."""
        started = 0
        for index, lane in enumerate(self._slices):
            if lane.producing is not None or not lane.ready:
                continue
            arrival, keep = lane.ready[0]
            if not self._may_produce(arrival):
                continue
            lane.ready.popleft()
            job = self._produce(lane.delivery, arrival, keep)
            lane.producing = group.create_task(job, name=f"slice-page:{index}")
            started += 1
        return started

    def _may_produce(self, arrival: Arrival) -> bool:
        """Produce ahead of the prefix only once the table has a committed offset."""
        return self._gen.has_offset.is_set() or self._plan.board.holds_prefix(arrival.fetch.range)

    def _waiting_for_offset(self) -> bool:
        return any(lane.ready and lane.producing is None for lane in self._slices)

    def _produces(self) -> list[asyncio.Task[Produced]]:
        return [lane.producing for lane in self._slices if lane.producing is not None]

    async def _stop(self) -> None:
        """Stop requested: no more fetches; the pages in production finish, the rest drop."""
        self._plan.stop()
        for task in self._fetching:
            task.cancel()
        for lane in self._slices:
            while lane.ready:
                await lane.ready.popleft()[0].slot.aclose()

    async def _fetch_ended(
        self, task: asyncio.Task[Arrival | Failed], held: contextlib.AsyncExitStack
    ) -> None:
        fetch = self._fetching.pop(task)
        if task.cancelled():
            self._plan.on_fetch_failed(fetch)  # abandoned on stop
        else:
            await self._fetched(task.result(), held)

    async def _fetched(self, result: Arrival | Failed, held: contextlib.AsyncExitStack) -> None:
        """A fetch ended: the plan hears of its page (or its failure); a kept page waits for
        its slice's turn to produce."""
        plan = self._plan
        if isinstance(result, Failed):
            fails = isinstance(result.error, TableFailedError)
            plan.on_fetch_failed(result.fetch, fails_table=fails)
            if isinstance(result.error, TableFailedError):
                self._failures[id(result.fetch.range)] = result.error
            return
        held.push_async_exit(result.slot)
        keep = plan.on_page(result.fetch, result.keys)
        reading, keys = result.reading, result.keys
        reading.previous_full = len(keys) >= result.limit
        if not keep:
            await result.slot.aclose()
            return
        reading.previous = Position(*keys[keep - 1])
        self._slices[result.fetch.reader].ready.append((result, keep))

    async def _produce(self, delivery: TableDelivery, arrival: Arrival, keep: int) -> Produced:
        """Plan and deliver a page (its slot is given back after); the pages of one range are
        planned in order (a slice produces one page at a time)."""
        async with arrival.slot:
            fetch, plan = arrival.fetch, self._page_plan(arrival, keep)
            del arrival  # its decoded rows are not held while the page awaits its acks
            ack: PageAck | None = None
            if plan.emits:
                offset = functools.partial(
                    self._offsets.for_transaction, fetch.range, plan.emits[-1].position
                )
                plan = replace(plan, commit_offset=offset)
                with self._tools.failures.acks_overdue(self._spec, len(plan.emits)):
                    ack = await delivery.deliver_page(plan)
                if ack is None:
                    raise StoppedError("stop requested while records were unacknowledged")
            return plan, ack, fetch

    def _page_plan(self, arrival: Arrival, keep: int) -> PagePlan:
        """The page's records; planned here, not when it arrived, so that the next request
        leaves first and a range's pages are planned in order, each after the one before."""
        reading, keys = arrival.reading, arrival.keys[:keep]
        plan = plan_page(
            self._spec, self._tools.hooks.shaper, arrival.rows[:keep], keys,
            phase="backfill", cursor=reading.cursor, late_floor=reading.late_floor,
            dedup=self._gen.dedup, keep_from=min(keys[-1][0], self._keep_from),
        )  # fmt: skip
        reading.cursor = plan.cursor or reading.cursor
        return plan

    def _delivered(self, produced: Produced) -> None:
        """A page's acks: the plan takes them in (the prefix may move); a record Kafka refused
        fails or restarts the table once the prefix is committed up to it."""
        plan, ack, fetch = produced
        emitted = ack.acked if ack is not None else 0
        acked_to = plan.emits[emitted - 1].position if emitted else None
        complete = ack is None or ack.complete
        self._plan.on_ack(fetch.range, acked_to, complete=complete)
        self._offsets.moved()  # the prefix first: the status shows the cursor it moved to
        tools = self._tools
        tools.recorder.page_delivered(self._counts, self._gen.cursor, plan, ack)
        failures.refused(self._spec, plan, ack)
        tools.failures.succeeded(FailureSource.KAFKA)

    def _ended(self, outcome: Outcome) -> Position | None:
        """The furthest row read when every range is acknowledged; else why not, raised."""
        if outcome.status is Status.DONE:
            return self._plan.last_read()
        if outcome.status is Status.STOPPED or self._tools.stop.is_set():
            raise StoppedError("stop requested during the sliced backfill")
        if outcome.status is Status.FAILED and outcome.failed is not None:
            raise self._failures[id(outcome.failed)]
        raise ProduceFailedError(f"the sliced backfill ended early: {outcome.reason}")
