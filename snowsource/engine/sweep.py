"""One sweep of a table by one pager (SPEC §5-§7): pages from a start up to HI, in order.

A table's poller decides which sweep runs and when (``engine.poller``); a sweep reads. This one
reads one page stream (``engine.page_stream``) from ``start`` up to ``HI``, fetching the next page
while the current one is delivered; ``engine.slices`` is the other, a backfill's first sweep read
by several slices side by side. Both get the same :class:`SweepTools` from the poller, fetch
every page through the table's one pager (``engine.pager``) and end each page with the same
deliver-and-record step (``engine.page_step``).

Each page: the decision (``core.page``), the delivery (at most one page per table
unacknowledged), and the commit of the acknowledged prefix's last offset. A short page ends the
sweep, which then moves the offset to the last row it read (SPEC §15.4) and says where the next
one starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from snowsource.core.cursor import Position, next_sweep_start, parse_ts
from snowsource.core.page import PagePlan, page_positions, plan_page
from snowsource.core.table import TableSpec
from snowsource.engine.delivery import TableDelivery
from snowsource.engine.page_step import PageStep, last_acked
from snowsource.engine.page_stream import FetchedPage, PageRange, PageStream
from snowsource.engine.pager import Pager
from snowsource.engine.reader import TableReader
from snowsource.engine.recorder import SweepCounts, TableRecorder
from snowsource.engine.streams import StreamHooks
from snowsource.engine.table_generation import TableGeneration
from snowsource.observability import metrics
from snowsource.runtime.deadline import StopSignal

__all__ = ["SweepTools", "paged_sweep"]


@dataclass(frozen=True)
class SweepTools:
    """What a poller lends its sweeps, one pager's and a sliced backfill's (built once)."""

    spec: TableSpec
    reader: TableReader
    hooks: StreamHooks
    recorder: TableRecorder
    stop: StopSignal
    #: The table's own delivery, and how to make another like it.
    table_delivery: TableDelivery
    fresh_delivery: Callable[[], TableDelivery]
    now: Callable[[], datetime]  # instance time, for the lag
    step: PageStep  # the table's deliver-and-record step
    pager: Pager  # every page of the table, one pager's or a slice's, with its budget slot

    def delivery(self) -> TableDelivery:
        """A delivery for one slice: a fresh one each (at least once), so slices produce side
        by side; the table's own with exactly once: one transactional producer per table, whose
        transactions take turns anyway."""
        if self.table_delivery.exactly_once:
            return self.table_delivery
        return self.fresh_delivery()


async def paged_sweep(
    tools: SweepTools, gen: TableGeneration, start: Position, hi: str
) -> Position | None:
    """Pages from ``start`` up to ``hi``; where the next sweep starts, or None when this one
    ended before reading its range to the end (stop requested)."""
    spec, recorder = tools.spec, tools.recorder
    began, counts, last_read = time.monotonic(), SweepCounts(), None
    recorder.sweep_began(hi)
    stream = PageStream(
        tools.pager, PageRange(start, hi), stop=tools.stop.event, name=spec.alias,
        backfill=gen.backfilling,
    )  # fmt: skip
    async with stream:
        async for page in stream:
            recorder.page_read(counts)
            if not page.rows:
                continue
            plan, keep_from = await _decide(tools, gen, stream, page)
            del page  # acks take a while: meanwhile hold only the values
            await _deliver(tools, gen, plan, counts)
            _page_done(tools, gen, plan, keep_from)
            last_read = plan.last
            del plan  # not held while this table waits for its next page (and a slot)
    tools.step.acknowledged()  # everything read was acknowledged
    recorder.sweep_ended(caught_up=stream.complete)
    if not stream.complete:
        return None
    tools.hooks.completed(hi)
    recorder.phase("stream")
    gen.sweep_read(last_read, phase="stream")
    lag = max((tools.now() - parse_ts(hi)).total_seconds(), 0.0)
    recorder.swept(counts, time.monotonic() - began, lag=lag, cursor=gen.cursor, hi=hi)
    following = next_sweep_start(start, last_read, hi, spec.overlap_seconds)
    # Entries older than the re-read window can never suppress a row again.
    gen.dedup.evict_older_than(following.ts)
    tools.hooks.evict_older_than(following.ts)
    return following


async def _decide(
    tools: SweepTools, gen: TableGeneration, stream: PageStream, page: FetchedPage
) -> tuple[PagePlan, str]:
    """What to emit of a page; the next page is asked for as soon as its start is known."""
    spec, hooks, rows, hi = tools.spec, tools.hooks, page.rows, stream.span.hi
    skip = await hooks.prepare(rows)
    positions = page_positions(
        spec, hooks.shaper, rows, after=page.after, hi=hi, previous=page.previous
    )
    last = positions[-1]
    if page.full and not tools.stop.is_set():
        stream.read_after(Position(*last))
    # Neither this sweep nor the next reads below min(this row, HI - overlap), so rows
    # older than that need no dedup entry: a long backfill stays small.
    keep_from = min(last[0], Position(hi, "").minus(spec.overlap_seconds).ts)
    plan = plan_page(
        spec,
        hooks.shaper,
        rows,
        positions,
        phase="backfill" if page.full else "stream",
        cursor=gen.cursor,
        late_floor=gen.late_floor,
        dedup=gen.dedup,
        keep_from=keep_from,
        skip=skip,
    )
    return plan, keep_from


async def _deliver(
    tools: SweepTools, gen: TableGeneration, plan: PagePlan, counts: SweepCounts
) -> None:
    """Deliver a page, then commit its acknowledged prefix with one offset write.

    The page is acknowledged before the next one is sent: at most one page of records per
    table is unacknowledged, and the offset is queued as soon as the acks allow it.
    """
    caps_before = gen.dedup.evictions_by_cap
    ack = await tools.step.deliver(tools.table_delivery, plan)
    assert plan.cursor is not None
    gen.cursor = plan.cursor
    tools.recorder.evicted(gen.dedup.evictions_by_cap - caps_before, gen.dedup.max_entries)
    if (last := last_acked(plan, ack)) is not None:
        # Only the contiguous acknowledged prefix: an unacknowledged record holds back
        # every later offset of the table.
        gen.commit(last.offset)
    tools.step.recorded(counts, plan.cursor, plan, ack)


def _page_done(tools: SweepTools, gen: TableGeneration, plan: PagePlan, keep_from: str) -> None:
    gen.dedup.evict_older_than(keep_from)
    metrics.DEDUP_ENTRIES.labels(table=tools.spec.alias).set(len(gen.dedup))
    if plan.phase == "backfill":  # a full page: more rows wait behind it
        tools.recorder.backfilling((tools.now() - parse_ts(gen.cursor.ts)).total_seconds())
