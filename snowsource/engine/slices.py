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

import structlog

from snowsource.core.backfill_plan import Fetch, Outcome, Status
from snowsource.core.cursor import Position, next_sweep_start
from snowsource.core.errors import TableFailedError
from snowsource.engine.failures import ProduceFailedError
from snowsource.engine.page_step import last_acked
from snowsource.engine.recorder import SweepCounts
from snowsource.engine.slice_pages import Arrival, Failed, Reading, SlicePager, placed
from snowsource.engine.slice_prefix import SliceOffsets
from snowsource.engine.slice_produce import Produced, SliceLane, SliceProducer
from snowsource.engine.sweep import SweepTools
from snowsource.engine.table_generation import TableGeneration
from snowsource.runtime.aio import first_error
from snowsource.runtime.retrying import StoppedError

__all__ = ["SlicedBackfill", "sliced_sweep"]


async def sliced_sweep(
    tools: SweepTools, gen: TableGeneration, start: Position, hi: str
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
        self, tools: SweepTools, gen: TableGeneration, *, start: Position, hi: str
    ) -> None:
        spec = tools.spec
        self._tools, self._spec, self._gen, self._hi = tools, spec, gen, hi
        # Where the table stands: its committed position (its start, with no offset yet).
        self._committed = gen.cursor
        self._counts = SweepCounts()
        self._pager = SlicePager(tools, self._counts, start=start)
        self._slices = [SliceLane(tools.delivery()) for _ in range(spec.backfill_slices)]
        self._fetching: dict[asyncio.Task[Arrival | Failed], Fetch] = {}
        self._failures: dict[int, TableFailedError] = {}  # id(range) -> the failure it holds
        self._log = structlog.get_logger("snowsource.engine.slices").bind(table=spec.alias)

    async def run(self) -> Position | None:
        """Read every range; the furthest row read (``None`` when there was none).

        Raises ``StoppedError`` when stopped before the end, and a range's failure as is.
        """
        tools = self._tools
        plan, first = await self._pager.first(self._hi, self._committed, self._reads)
        self._plan = plan
        self._offsets = SliceOffsets(tools.spec, self._gen, tools.recorder, tools.now, plan)
        self._producer = SliceProducer(tools, self._gen, self._offsets, hi=self._hi)
        self._log.info(
            "sliced backfill", slices=self._spec.backfill_slices, ranges=len(plan.board.ranges),
            hi=self._hi,
        )  # fmt: skip
        try:
            async with asyncio.TaskGroup() as group:
                if first is not None:
                    await self._fetched(first)
                    first = None  # its rows are held by its page's slot from here, not by us
                outcome = await self._loop(group)
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None
        finally:
            await self._give_back()
        return self._ended(outcome)

    def _reads(self, fetch: Fetch) -> Reading:
        """The pass of the fetch's reader over its range (a new one when it starts a range)."""
        return self._slices[fetch.reader].reads(fetch, self._committed)

    async def _loop(self, group: asyncio.TaskGroup) -> Outcome:
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
                del busy  # a page's task (and its rows) is not held past its turn
                await self._feed_back()
        finally:
            stopping.cancel()
            offset.cancel()

    def _start_fetches(self, group: asyncio.TaskGroup) -> int:
        """Ask the plan for pages. Each fetch waits for its page slot in the budget's fair queue
        (in turn with the other tables), so every reader is offered one."""
        plan, tools = self._plan, self._tools
        contended = tools.reader.contended() or tools.pager.contended
        size = tools.reader.sizer.size
        fetches = plan.next_fetches(len(self._slices), contended=contended, page_rows=size)
        if not fetches and not self._fetching and not self._produces() and contended:
            # Nothing of this table in flight: another range adds concurrency, not requests.
            fetches = plan.next_fetches(len(self._slices), contended=False, page_rows=size)
        for fetch in fetches:
            job = self._pager.fetch(fetch, self._reads(fetch))
            self._fetching[group.create_task(job, name=f"slice-fetch:{fetch.reader}")] = fetch
        if fetches:
            tools.recorder.slices(plan.progress())
        return len(fetches)

    def _start_produces(self, group: asyncio.TaskGroup) -> int:
        """Start each slice's oldest page read once its page before is acknowledged; ahead of
        the prefix, only once the table has a committed offset at all."""
        started = 0
        for index, lane in enumerate(self._slices):
            page = lane.next_page()
            written = self._gen.has_offset.is_set()
            if page is not None and (written or self._plan.board.holds_prefix(page.fetch.range)):
                self._producer.start(lane, group, f"slice-page:{self._spec.alias}:{index}")
                started += 1
        return started

    def _waiting_for_offset(self) -> bool:
        return any(lane.next_page() is not None for lane in self._slices)

    def _produces(self) -> list[asyncio.Task[Produced]]:
        return [lane.producing for lane in self._slices if lane.producing is not None]

    async def _stop(self) -> None:
        """Stop requested: no more fetches; the pages in production finish, the rest drop."""
        self._plan.stop()
        for task in self._fetching:
            task.cancel()
        for lane in self._slices:
            await lane.drop()

    async def _give_back(self) -> None:
        """Every task ended: give back the slot of every page read and never produced, also a
        page whose fetch ended while the task group was failing (nobody read its result)."""
        for lane in self._slices:
            await lane.drop()
        for task in self._fetching:
            if task.done() and not task.cancelled() and task.exception() is None:
                result = task.result()
                if isinstance(result, Arrival):
                    await result.slot.aclose()

    async def _feed_back(self) -> None:
        """Tell the plan what ended: fetches first (a page read), then produces (its acks)."""
        for task in [t for t in self._fetching if t.done()]:
            await self._fetch_ended(task)
        for lane in self._slices:
            if lane.producing is not None and lane.producing.done():
                async with lane.finished() as produced:
                    self._delivered(produced)
        self._offsets.moved()

    async def _fetch_ended(self, task: asyncio.Task[Arrival | Failed]) -> None:
        fetch = self._fetching.pop(task)
        if task.cancelled():
            self._plan.on_fetch_failed(fetch)  # abandoned on stop
        else:
            await self._fetched(task.result())

    async def _fetched(self, result: Arrival | Failed) -> None:
        """A fetch ended: the plan hears of its page (or its failure); a kept page waits for
        its slice's turn to produce."""
        plan = self._plan
        if isinstance(result, Failed):
            fails = isinstance(result.error, TableFailedError)
            plan.on_fetch_failed(result.fetch, fails_table=fails)
            if isinstance(result.error, TableFailedError):
                self._failures[id(result.fetch.range)] = result.error
            return
        kept = plan.on_page(result.fetch, result.keys)
        result.reading.previous_full = len(result.keys) >= result.limit
        placed(result, kept.first, self._committed)
        if not kept.rows:
            await result.slot.aclose()
            return
        result.reading.previous = Position(*result.keys[kept.rows - 1])
        self._slices[result.fetch.reader].ready.append((result, kept.rows))

    def _delivered(self, produced: Produced) -> None:
        """A page's acks: the plan takes them in (the prefix may move); a record Kafka refused
        fails or restarts the table once the prefix is committed up to it."""
        plan, ack, fetch = produced
        last = last_acked(plan, ack)
        acked_to = last.position if last is not None else None
        self._plan.on_ack(fetch.range, acked_to, complete=ack is None or ack.complete)
        self._offsets.moved()  # the prefix first: the status shows the cursor it moved to
        self._tools.step.recorded(self._counts, self._gen.cursor, plan, ack)

    def _ended(self, outcome: Outcome) -> Position | None:
        """The furthest row read when every range is acknowledged; else why not, raised."""
        if outcome.status is Status.DONE:
            return self._plan.last_read()
        if outcome.status is Status.STOPPED or self._tools.stop.is_set():
            raise StoppedError("stop requested during the sliced backfill")
        if outcome.status is Status.FAILED and outcome.failed is not None:
            raise self._failures[id(outcome.failed)]
        raise ProduceFailedError(f"the sliced backfill ended early: {outcome.reason}")
