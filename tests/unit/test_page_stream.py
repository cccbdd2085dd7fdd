"""One keyset pager over a range: pages in order, the next one fetched ahead, slots given back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from snowsource.core.cursor import Position
from snowsource.core.tableapi import Page
from snowsource.engine.budget import PageBudget
from snowsource.engine.page_stream import PageRange, PageStream
from snowsource.engine.pager import Pager
from snowsource.runtime.retrying import StoppedError
from tests.polling import poll_until

HI = "2026-01-01 00:10:00"


def _row(second: int) -> dict[str, str]:
    return {"sys_updated_on": f"2026-01-01 00:00:{second:02d}", "sys_id": f"{second:032x}"}


class Reader:
    """Answers pages of ``limit`` rows out of ``total``; ``hold`` blocks every request."""

    def __init__(self, total: int, limit: int, *, hidden: bool = False) -> None:
        self.rows = [_row(i) for i in range(total)]
        self.limit = limit
        self.asked: list[Position] = []
        self.hidden_checks: list[Position] = []
        self.hold: asyncio.Event | None = None
        self.hidden = hidden

    async def page(
        self,
        after: Position,
        hi: str,
        *,
        backfill: bool = False,
        count: bool = False,
        offset: int = 0,
    ) -> tuple[Page, int]:
        self.asked.append(after)
        if self.hold is not None:
            await self.hold.wait()
        rows = [r for r in self.rows if (r["sys_updated_on"], r["sys_id"]) > (after.ts, after.id)]
        return Page(rows[: self.limit], 200, None, None, 0.0), self.limit

    async def check_hidden(self, after: Position, hi: str, *, at_least: int = 1) -> None:
        self.hidden_checks.append(after)


def _asked_more(reader: Reader, than: int) -> Callable[[], bool]:
    return lambda: len(reader.asked) > than


def _last(rows: list[dict[str, str]]) -> Position:
    return Position(rows[-1]["sys_updated_on"], rows[-1]["sys_id"])


async def test_pages_follow_the_positions_the_owner_gives_until_a_short_page() -> None:
    reader = Reader(total=5, limit=2)
    start = Position("2025-12-31 00:00:00", "")
    seen: list[tuple[int, Position, Position | None, bool]] = []
    async with PageStream(
        Pager(reader, None, key="t"), PageRange(start, HI), stop=asyncio.Event()
    ) as stream:
        async for page in stream:
            seen.append((len(page.rows), page.after, page.previous, page.full))
            if page.full:
                stream.read_after(_last(page.rows))
    assert stream.complete
    assert [s[0] for s in seen] == [2, 2, 1]
    assert seen[0][1:] == (start, None, True)
    assert seen[1][1] == seen[1][2] == _last(reader.rows[:2])
    assert not seen[2][3]
    assert reader.hidden_checks == []


async def test_an_empty_page_after_a_full_one_asks_about_hidden_rows() -> None:
    reader = Reader(total=4, limit=2)
    start = Position("2025-12-31 00:00:00", "")
    async with PageStream(
        Pager(reader, None, key="t"), PageRange(start, HI), stop=asyncio.Event()
    ) as stream:
        sizes = []
        async for page in stream:
            sizes.append(len(page.rows))
            if page.full:
                stream.read_after(_last(page.rows))
    assert sizes == [2, 2, 0]
    assert stream.complete
    assert reader.hidden_checks == [_last(reader.rows)]


async def test_an_owner_that_does_not_ask_for_more_ends_the_stream_incomplete() -> None:
    reader = Reader(total=5, limit=2)
    budget = PageBudget(2)
    start = Position("2025-12-31 00:00:00", "")
    pager = Pager(reader, budget, key="t")
    async with PageStream(pager, PageRange(start, HI), stop=asyncio.Event()) as stream:
        pages = [page async for page in stream]
    assert len(pages) == 1
    assert not stream.complete
    assert len(reader.asked) == 1
    # Every slot is back once the stream is closed.
    for _ in range(2):
        await asyncio.wait_for(budget.acquire(), 1)


async def test_stop_abandons_the_page_in_flight_and_gives_its_slot_back() -> None:
    reader = Reader(total=5, limit=2)
    reader.hold = asyncio.Event()
    stop = asyncio.Event()
    budget = PageBudget(2)
    start = Position("2025-12-31 00:00:00", "")
    stream = PageStream(Pager(reader, budget, key="t"), PageRange(start, HI), stop=stop)

    async def first_page() -> None:
        async with stream:
            async for _ in stream:
                raise AssertionError("no page arrives while the request is held")

    asyncio.get_running_loop().call_soon(stop.set)
    with pytest.raises(StoppedError):
        await first_page()
    assert not stream.complete
    for _ in range(2):
        await asyncio.wait_for(budget.acquire(), 1)


async def test_the_page_held_and_the_page_ahead_each_hold_a_slot() -> None:
    reader = Reader(total=6, limit=2)
    budget = PageBudget(3)
    start = Position("2025-12-31 00:00:00", "")
    free_while_held: list[int] = []
    pager = Pager(reader, budget, key="t")
    async with PageStream(pager, PageRange(start, HI), stop=asyncio.Event()) as stream:
        async for page in stream:
            if page.full:
                asked = len(reader.asked)
                stream.read_after(_last(page.rows))
                # The reader answers at once: once asked, the page ahead holds its slot.
                await poll_until(_asked_more(reader, asked), interval=0.001)
            free_while_held.append(budget.free)
    # Each full page held with the next one fetched: one slot free; the last page alone: two.
    assert free_while_held == [1, 1, 1, 2]
    assert budget.free == 3
