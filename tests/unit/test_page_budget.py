"""The page budget bounds decoded pages across tables and always gives its slots back."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from snowsource.core.clock import InstanceClock
from snowsource.core.grants import Priority
from snowsource.core.outbound import Headers, PageAck, PageRecordLike
from snowsource.core.page import Emit
from snowsource.core.retry import RetryPolicy
from snowsource.core.table_status import TableState
from snowsource.core.tableapi import Page
from snowsource.engine.budget import PageBudget, page_slots
from snowsource.engine.poller import Poller
from snowsource.engine.ports import PageSource
from snowsource.runtime.deadline import StopSignal
from tests.fakes import FakeStore, make_spec
from tests.polling import poll_until
from tests.unit import test_poller
from tests.unit.test_poller import Running, World

world = test_poller.world  # the emulator and fakes of the poller's own tests


def _poller(world: World, alias: str, budget: PageBudget, stop: StopSignal) -> Poller:

    return Poller(
        make_spec(alias, name=alias, snow_url=world.url, batch_size=10),
        client=world.client,
        sink=world.sink,
        store=FakeStore(),
        clock=InstanceClock(),
        retry=RetryPolicy(0.01, 0.05),
        stop=stop,
        pages=budget,
    )


def test_one_table_can_always_fetch_ahead() -> None:
    assert page_slots(1) == 2
    assert page_slots(8) == 16
    with pytest.raises(ValueError, match="two slots"):
        PageBudget(1)


async def test_three_tables_share_two_slots_and_every_slot_comes_back(world: World) -> None:
    tables = ("incident", "change_request", "sys_user")
    world.emu.seed(tables=tables, rows=45)
    budget = PageBudget(2)
    stop = StopSignal()
    runs = [Running(_poller(world, alias, budget, stop)) for alias in tables]
    await poll_until(lambda: all(r.poller.status.caught_up for r in runs), timeout=20)
    # Five pages or more per table went through two shared slots: nothing was lost on the way.
    expected = {r["sys_id"].encode() for t in tables for r in world.emu.rows(t)}
    assert {r.key for r in world.sink.sent} == expected
    await runs[0].finish()
    for run in runs[1:]:
        await run.task
    assert all(r.poller.status.state == TableState.STOPPED for r in runs)
    assert budget.free == 2  # every slot was given back, the prefetch's included


class _Rows(list[dict[str, Any]]):
    """A page's decoded rows that a weak reference can follow (a plain list cannot)."""


@dataclasses.dataclass
class _Held:
    """The most rows seen in memory at once, decoded and planned, and of tables waiting."""

    budget: PageBudget
    pages: list[weakref.ref[_Rows]] = dataclasses.field(default_factory=list)
    decoded: int = 0
    planned: int = 0
    waiting: int = 0

    def sample(self) -> None:
        decoded = (page() for page in self.pages)
        self.decoded = max(self.decoded, sum(len(rows) for rows in decoded if rows is not None))
        self.planned = max(self.planned, sum(1 for o in gc.get_objects() if type(o) is Emit))
        self.waiting = max(self.waiting, self.budget.waiting)


class _CountingSource:
    """The emulator's client; every page's decoded rows are followed by a weak reference."""

    def __init__(self, client: PageSource, held: _Held) -> None:
        self._client = client
        self._held = held

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page:
        page = await self._client.get_page(table, params, label=label)
        rows = _Rows(page.rows)
        self._held.pages.append(weakref.ref(rows))
        self._held.sample()
        return dataclasses.replace(page, rows=rows)


class _HeldSink:
    """Keeps no record (only the keys seen) and acknowledges a page when the test says so."""

    def __init__(self, held: _Held) -> None:
        self.keys: set[bytes] = set()
        self.waiting: list[tuple[asyncio.Future[PageAck], int]] = []
        self._held = held

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        self._held.sample()
        self.keys.update(key for key, _, _ in records)
        future: asyncio.Future[PageAck] = asyncio.get_running_loop().create_future()
        self.waiting.append((future, len(records)))
        return future

    def ack_oldest(self) -> None:
        future, count = self.waiting.pop(0)
        future.set_result(PageAck(records=count, acked=count, failure=None))


async def test_pages_in_memory_across_tables_stay_within_the_budget(world: World) -> None:
    # Five tables, two slots, acks held back: the tables without a slot wait with a page behind
    # them. What they still hold then is what memory grows with the number of tables.
    tables = ("incident", "change_request", "sys_user", "cmdb_ci", "task_sla")
    world.emu.seed(tables=tables, rows=40)
    budget, batch = PageBudget(2), 10
    held = _Held(budget)
    source, sink = _CountingSource(world.client, held), _HeldSink(held)
    stop = StopSignal()
    pollers = [
        Poller(
            make_spec(alias, name=alias, snow_url=world.url, batch_size=batch),
            client=source,
            sink=sink,
            store=FakeStore(),
            clock=InstanceClock(),
            retry=RetryPolicy(0.01, 0.05),
            stop=stop,
            pages=budget,
        )
        for alias in tables
    ]
    acked = 0
    # Without the cyclic collector, a page kept alive by a reference cycle counts as held.
    gc.disable()
    try:
        runs = [Running(poller) for poller in pollers]
        while not all(r.poller.status.caught_up for r in runs):
            await poll_until(
                lambda: bool(sink.waiting) or all(r.poller.status.caught_up for r in runs)
            )
            held.sample()
            if sink.waiting:
                sink.ack_oldest()
                acked += 1
    finally:
        gc.enable()
    expected = {r["sys_id"].encode() for t in tables for r in world.emu.rows(t)}
    assert sink.keys == expected
    assert acked >= len(tables) * 4  # four full pages each, one slot at a time
    assert held.waiting >= len(tables) - budget.slots  # the others did wait for a slot
    # A page's decoded rows and its planned records are held only while it holds a slot.
    assert batch <= held.decoded <= budget.slots * batch
    assert batch <= held.planned <= budget.slots * batch
    await runs[0].finish()
    for run in runs[1:]:
        await run.task
    assert budget.free == budget.slots


def _reached(granted: list[str], count: int) -> bool:
    return len(granted) == count


async def test_waiting_tables_take_turns_whatever_each_queued() -> None:
    budget = PageBudget(2)
    await budget.acquire("held")
    await budget.acquire("held")
    granted: list[str] = []

    async def reader(key: str) -> None:
        await budget.acquire(key)
        granted.append(key)

    # Five backfills queue four slices' pages each, then a streaming table asks once.
    tasks = [asyncio.create_task(reader(f"backfill{b}")) for _ in range(4) for b in range(5)]
    await poll_until(lambda: budget.waiting == 20)
    tasks.append(asyncio.create_task(reader("stream")))
    await poll_until(lambda: budget.waiting == 21)
    for expected in range(1, 22):
        budget.release()
        await poll_until(functools.partial(_reached, granted, expected))
    # One page of each backfill at most comes before the stream's.
    assert granted.index("stream") <= 5
    assert budget.free == 0
    await asyncio.gather(*tasks)


async def test_a_cancelled_waiter_leaves_the_queue_and_a_granted_one_passes_its_slot_on() -> None:
    budget = PageBudget(2)
    await budget.acquire("a")
    await budget.acquire("a")
    waiting = asyncio.create_task(budget.acquire("b"))
    await poll_until(lambda: budget.waiting == 1)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert budget.waiting == 0
    granted_then_cancelled = asyncio.create_task(budget.acquire("c"))
    await poll_until(lambda: budget.waiting == 1)
    budget.release()  # granted to c ...
    granted_then_cancelled.cancel()  # ... which is cancelled before it runs again
    await asyncio.gather(granted_then_cancelled, return_exceptions=True)
    assert granted_then_cancelled.cancelled()
    assert (budget.free, budget.waiting) == (1, 0), "c's slot was given back"
    budget.release()
    assert budget.free == 2


async def test_a_sliced_backfill_holds_no_page_outside_its_slots(world: World) -> None:
    # One table read by four slices, four slots, acks held back: whatever the slices read
    # ahead, decoded rows and planned records are held only by pages that hold a slot.
    world.emu.seed(tables=("incident",), rows=300)
    budget, batch = PageBudget(4), 10
    held = _Held(budget)
    source, sink = _CountingSource(world.client, held), _HeldSink(held)
    poller = Poller(
        make_spec("incident", snow_url=world.url, batch_size=batch, backfill_slices=4),
        client=source,
        sink=sink,
        store=FakeStore(),
        clock=InstanceClock(),
        retry=RetryPolicy(0.01, 0.05),
        stop=StopSignal(),
        pages=budget,
    )
    gc.disable()  # a page kept alive by a reference cycle counts as held
    try:
        run = Running(poller)
        while not poller.status.caught_up:
            await poll_until(lambda: bool(sink.waiting) or poller.status.caught_up)
            held.sample()
            if sink.waiting:
                sink.ack_oldest()
    finally:
        gc.enable()
    assert sink.keys == {r["sys_id"].encode() for r in world.emu.rows("incident")}
    assert batch <= held.decoded <= budget.slots * batch
    assert batch <= held.planned <= budget.slots * batch
    await run.finish()
    assert budget.free == budget.slots
