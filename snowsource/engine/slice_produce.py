"""A sliced backfill's pages on their way to Kafka (SPEC §14.2): one slice, one page at a time.

Each slice (a reader of the plan) produces the pages it read one at a time, in the order it read
them, through a delivery of its own (at least once: slices produce side by side) or the table's
transactional one, while it fetches its next page. A page is planned only when its turn comes,
not when it arrived: its range's pages are planned in order, each from the cursor the one before
left, and the next request leaves first. With exactly-once its transaction carries the backfill's
prefix as it stands with this page in (``SliceOffsets.for_transaction``). The page's slot of the
page budget is given back once the coordinator took its acks in (or it failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from snowsource.core.backfill_plan import Fetch
from snowsource.core.cursor import Position
from snowsource.core.outbound import PageAck
from snowsource.core.page import PagePlan, plan_page
from snowsource.engine.delivery import TableDelivery
from snowsource.engine.slice_pages import Arrival, Reading
from snowsource.engine.slice_prefix import SliceOffsets
from snowsource.engine.sweep import SweepTools
from snowsource.engine.table_generation import TableGeneration

__all__ = ["Produced", "SliceLane", "SliceProducer"]

#: A produced page: its plan, what Kafka said (``None``: no record to send) and its fetch.
Produced = tuple[PagePlan, PageAck | None, Fetch]


@dataclass(eq=False)
class SliceLane:
    """One slice's pages after they arrived: the ones waiting for their turn, the one in
    production, and the slice's pass over the range it reads now."""

    delivery: TableDelivery
    reading: Reading | None = None
    ready: deque[tuple[Arrival, int]] = field(default_factory=deque)  # (page, rows kept)
    producing: asyncio.Task[Produced] | None = None
    # The slot of the page in production, given back once the coordinator took its acks in
    # (:meth:`finished`; its plan is held till then), or by :meth:`drop`.
    slot: contextlib.AsyncExitStack | None = None

    def reads(self, fetch: Fetch, committed: Position) -> Reading:
        """The pass a fetch belongs to: a new one when the slice starts a range (a range left
        by another slice resumes where its pages ended, never below the committed offset)."""
        if self.reading is None or self.reading.range is not fetch.range:
            at = max(fetch.range.after, committed)
            self.reading = Reading(fetch.range, at, at)
        return self.reading

    async def drop(self) -> None:
        """Give back the slots of the pages not produced (stop, or the backfill ended)."""
        while self.ready:
            await self.ready.popleft()[0].slot.aclose()
        if self.slot is not None:
            await self.slot.aclose()  # closing twice does nothing

    @contextlib.asynccontextmanager
    async def finished(self) -> AsyncIterator[Produced]:
        """The page in production is done: its result, its slot held while the block runs."""
        task, self.producing = self.producing, None
        slot = self.slot
        assert task is not None, "no page in production"
        assert slot is not None, "a page in production holds a slot"
        async with slot:
            yield task.result()

    def take(self) -> tuple[Arrival, int]:
        """The next page and the rows kept of it, now in production."""
        arrival, keep = self.ready.popleft()
        self.slot = arrival.slot
        return arrival, keep

    def next_page(self) -> Arrival | None:
        """The page whose turn it is, if no page of this slice is in production."""
        return self.ready[0][0] if self.ready and self.producing is None else None


class SliceProducer:
    """Plans and delivers the pages of one sliced backfill."""

    def __init__(
        self, tools: SweepTools, gen: TableGeneration, offsets: SliceOffsets, *, hi: str
    ) -> None:
        spec = tools.spec
        self._spec, self._shaper, self._gen, self._offsets = spec, tools.hooks.shaper, gen, offsets
        self._step = tools.step
        # Rows older than this are never read again, not even by the stream phase that
        # follows (it starts at HI - overlap): they need no dedup entry.
        self._keep_from = Position(hi, "").minus(spec.overlap_seconds).ts

    def start(self, lane: SliceLane, group: asyncio.TaskGroup, name: str) -> None:
        """Start producing the lane's next page."""
        arrival, keep = lane.take()
        job = self._produce(lane.delivery, arrival, keep)
        lane.producing = group.create_task(job, name=name)

    async def _produce(self, delivery: TableDelivery, arrival: Arrival, keep: int) -> Produced:
        fetch, plan = arrival.fetch, self._plan(arrival, keep)
        del arrival  # its decoded rows are not held while the page awaits its acks
        if plan.emits:
            offset = functools.partial(
                self._offsets.for_transaction, fetch.range, plan.emits[-1].position
            )
            plan = replace(plan, commit_offset=offset)
        return plan, await self._step.deliver(delivery, plan), fetch

    def _plan(self, arrival: Arrival, keep: int) -> PagePlan:
        reading, keys = arrival.reading, arrival.keys[:keep]
        plan = plan_page(
            self._spec, self._shaper, arrival.rows[:keep], keys, phase="backfill",
            cursor=reading.cursor, late_floor=reading.late_floor, dedup=self._gen.dedup,
            keep_from=min(keys[-1][0], self._keep_from),
        )  # fmt: skip
        reading.cursor = plan.cursor or reading.cursor
        return plan
