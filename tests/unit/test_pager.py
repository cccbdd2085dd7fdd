"""The table's one pager: a page holds its budget slot from before its request until its owner
closes the lease, and a fetch that fails or is cancelled gives the slot back."""

from __future__ import annotations

import asyncio

import pytest

from snowsource.core.cursor import Position
from snowsource.core.errors import TableFailedError
from snowsource.core.tableapi import Page
from snowsource.engine.budget import PageBudget
from snowsource.engine.pager import Pager
from tests.polling import poll_until

HI = "2026-01-01 00:10:00"
START = Position("2025-12-31 00:00:00", "")


class Reader:
    """One row a page; ``fail`` raises from the request, ``hold`` blocks it."""

    def __init__(self) -> None:
        self.asked: list[tuple[Position, bool, int]] = []
        self.fail: BaseException | None = None
        self.hold: asyncio.Event | None = None

    async def page(
        self,
        after: Position,
        hi: str,
        *,
        backfill: bool = False,
        count: bool = False,
        offset: int = 0,
    ) -> tuple[Page, int]:
        self.asked.append((after, count, offset))
        if self.hold is not None:
            await self.hold.wait()
        if self.fail is not None:
            raise self.fail
        row = {"sys_updated_on": "2026-01-01 00:00:01", "sys_id": "a" * 32}
        return Page([row], 200, None, 7 if count else None, 0.0), 1

    async def check_hidden(self, after: Position, hi: str, *, at_least: int = 1) -> None:
        raise AssertionError("not asked here")


async def test_a_page_holds_its_slot_until_its_owner_closes_the_lease() -> None:
    budget = PageBudget(2)
    pager = Pager(Reader(), budget, key="t")
    first = await pager.fetch(START, HI)
    second = await pager.fetch(START, HI, count=True, offset=3)
    assert budget.free == 0
    assert first.full
    assert second.page.total_count == 7
    await first.slot.aclose()
    assert budget.free == 1
    await first.slot.aclose()  # idempotent
    assert budget.free == 1
    await second.slot.aclose()
    assert budget.free == 2


async def test_the_options_reach_the_request() -> None:
    reader = Reader()
    pager = Pager(reader, None, key="t")
    read = await pager.fetch(START, HI, backfill=True, count=True, offset=41)
    assert reader.asked == [(START, True, 41)]
    assert read.limit == 1
    await read.slot.aclose()


async def test_a_failed_request_gives_its_slot_back() -> None:
    budget = PageBudget(2)
    reader = Reader()
    reader.fail = TableFailedError("a bad row")
    pager = Pager(reader, budget, key="t")
    with pytest.raises(TableFailedError):
        await pager.fetch(START, HI)
    assert budget.free == 2


async def test_a_cancelled_fetch_gives_its_slot_back_in_flight_or_queued() -> None:
    budget = PageBudget(2)
    reader = Reader()
    pager = Pager(reader, budget, key="t")
    held = [await pager.fetch(START, HI) for _ in range(1)]
    reader.hold = asyncio.Event()
    in_flight = asyncio.create_task(pager.fetch(START, HI))
    queued = asyncio.create_task(pager.fetch(START, HI))
    await poll_until(lambda: len(reader.asked) == 2 and budget.waiting == 1, interval=0.001)
    assert pager.contended
    for task in (in_flight, queued):
        task.cancel()
    await asyncio.gather(in_flight, queued, return_exceptions=True)
    assert budget.free == 1
    assert budget.waiting == 0
    await held[0].slot.aclose()
    assert budget.free == 2
    assert not pager.contended
