"""A model of the engine driving a sliced backfill's board, in virtual time (SPEC §15.3).

It counts the keyset page requests a sliced backfill spends, without the emulator, Kafka or
wall-clock time: the rows are a sorted list, a page is the next ``page`` rows after a position
up to HI, every request takes ``latency`` (times a seeded jitter) and every produced page is
acknowledged ``produce`` later. The slices follow ``engine/slices.py``: slice 0 reads the
window's first page (counted, so the board knows the window's rows), then each slice takes a
range, waits before each page until the board admits it (or leaves the range), asks its next
page as soon as one arrives, and produces a page only once the page before it is acknowledged;
each page holds a slot of the process's page budget (two per request that may be in flight)
from before its request until it is acknowledged or dropped, and while the budget or the
session pool is exhausted the slices after the first start no new range.

What it leaves out: the instance's own queueing (2 nodes of 4 threads), Kafka's acknowledgement
times under load, the adaptive page size. On the benchmark at 8 slices the model's figures are
lower than the daemon's (docs/performance.md).

Time is virtual: the event loop's clock jumps to the next timer whenever nothing is ready, so
a run of hundreds of pages takes a fraction of a second and gives the same count every time.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import random
import selectors
import time
from collections.abc import Iterator
from dataclasses import dataclass

from snowsource.core.cursor import Position
from snowsource.core.slices import Backfill, SliceRange, seconds_between
from snowsource.core.timestamps import format_ts, parse_ts

Key = tuple[str, str]

NOW = parse_ts("2026-06-01 00:00:00")
END = int(NOW.timestamp())
SPAN = 30 * 86_400
MOST_TAKES = 10_000  # takes of one slice in one backfill: far above any real schedule


def rows_like_the_benchmark(count: int, *, skewed: bool, seed: int = 1) -> list[Key]:
    """Sorted (timestamp, id) keys spread like ``bench/emulator_proc.py``'s tables: updates of
    rows created over 30 days (denser towards now), or 90 % of them in the last tenth."""
    rng = random.Random(seed)
    keys: list[Key] = []
    for _ in range(count):
        if skewed:
            recent = rng.random() < 0.9
            age = rng.uniform(60, SPAN / 10) if recent else rng.uniform(SPAN / 10, SPAN)
        else:
            created = rng.uniform(60, SPAN)
            age = created - rng.uniform(0, created - 30)
        # time.strftime on an epoch: formatting 200,000 datetimes one by one takes seconds.
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(END - int(age)))
        keys.append((ts, f"{rng.getrandbits(64):016x}"))
    keys.sort()
    return keys


class _Skip(selectors.SelectSelector):
    """A selector that never waits: it moves the virtual clock to the next timer instead."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("the model is stuck: nothing ready and no timer")
        self._clock[0] += timeout
        return []


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._clock = [0.0]
        super().__init__(_Skip(self._clock))

    def time(self) -> float:
        return self._clock[0]


@contextlib.contextmanager
def virtual_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop whose clock only moves when nothing is ready."""
    loop = _VirtualLoop()
    try:
        yield loop
    finally:
        loop.close()


@dataclass
class Run:
    """What one modelled backfill spent."""

    requests: int
    seconds: float
    ranges: int


class Model:
    """One sliced backfill of ``rows`` with ``slices`` slices, pages of ``page`` rows."""

    def __init__(
        self,
        rows: list[Key],
        slices: int,
        *,
        page: int = 1_000,
        max_ahead: int = 50_000,
        latency: float = 0.25,
        produce: float = 0.05,
        jitter: float = 0.3,
        seed: int = 0,
        requests_at_once: int = 8,
    ) -> None:
        self.rows, self.slices, self.page, self.max_ahead = rows, slices, page, max_ahead
        self.latency, self.produce_time, self.jitter = latency, produce, jitter
        self.rng = random.Random(seed)
        self.requests = 0
        self.delivered = 0
        self.hi = format_ts(NOW)
        self.board: Backfill | None = None
        self._waiters: list[asyncio.Future[None]] = []
        # The process's page budget (``engine/budget.py``: two pages per request in flight) and
        # the session pool's limit: while either is exhausted, slices after the first start no
        # new range (``engine/slices.py``, ``_while_contended``).
        self._slots = 2 * requests_at_once
        self._slot_waiters: list[asyncio.Future[None]] = []
        self._at_once = requests_at_once
        self._in_flight = 0

    def run(self) -> Run:
        with virtual_loop() as loop:
            loop.run_until_complete(self._run())
            seconds = loop.time()
        assert self.board is not None
        return Run(self.requests, seconds, len(self.board.ranges))

    async def _acquire(self) -> None:
        if self._slots > 0 and not self._slot_waiters:
            self._slots -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        await waiter

    def _release(self) -> None:
        if self._slot_waiters:
            self._slot_waiters.pop(0).set_result(None)
        else:
            self._slots += 1
        self._wake()

    def _contended(self) -> bool:
        return self._in_flight >= self._at_once or bool(self._slot_waiters)

    async def _fetch(self, after: Position, skip: int = 0) -> tuple[list[Key], int]:
        await self._acquire()
        self.requests += 1
        self._in_flight += 1
        await asyncio.sleep(self.latency * (1 + self.jitter * self.rng.random()))
        self._in_flight -= 1
        first = bisect.bisect_right(self.rows, (after.ts, after.id)) + skip
        end = bisect.bisect_right(self.rows, (self.hi, "\uffff"))
        return self.rows[first : min(end, first + self.page)], end - first

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _next_event(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    async def _run(self) -> None:
        start = Position(self.rows[0][0][:10] + " 00:00:00", "")
        keys, total = await self._fetch(start)
        full = len(keys) >= self.page
        spanned = seconds_between(keys[0][0], keys[-1][0]) if full else None
        board = Backfill(
            Position(keys[0][0], ""),
            self.hi,
            slices=self.slices,
            max_ahead=self.max_ahead,
            expected_rows=total,
            page_rows=self.page,
            first_page_seconds=spanned,
        )
        self.board = board
        first = board.take(0)
        assert first is not None
        board.reserve(first, self.page)
        async with asyncio.TaskGroup() as group:
            for index in range(self.slices):
                given = (first, keys) if index == 0 else None
                group.create_task(self._slice(index, given))
        assert board.done()
        assert self.delivered == len(self.rows)

    async def _slice(self, index: int, given: tuple[SliceRange, list[Key]] | None) -> None:
        assert self.board is not None
        producing: list[asyncio.Task[None]] = []
        if given is not None:
            await self._read(given[0], producing, given[1])
        for _ in range(MOST_TAKES):  # a rule that takes and leaves for ever fails, not hangs
            board = self.board
            while index and self._contended() and not board.done() and not board.prefix_free():
                await self._next_event()
            r = self.board.take(index)
            if r is None:
                if self.board.all_read():
                    break
                await self._next_event()
                continue
            await self._read(r, producing)
        else:
            raise AssertionError(f"slice {index} took {MOST_TAKES} times: a take/leave loop")
        for task in producing:
            await task

    async def _fetch_for(self, r: SliceRange) -> list[Key] | None:
        board = self.board
        assert board is not None
        while not board.holds_prefix(r):
            if board.should_leave(r):
                if not r.pending:
                    board.leave(r)
                    return None
            elif board.may_fetch(r, self.page):
                break
            await self._next_event()
        after, skip = board.ask(r)
        board.reserve(r, self.page)
        keys, _ = await self._fetch(after, skip)
        return keys

    async def _read(
        self, r: SliceRange, producing: list[asyncio.Task[None]], first: list[Key] | None = None
    ) -> None:
        board = self.board
        assert board is not None
        fetch: asyncio.Future[list[Key] | None] | None
        if first is not None:
            fetch = asyncio.get_running_loop().create_future()
            fetch.set_result(first)
        else:
            fetch = asyncio.ensure_future(self._fetch_for(r))
        while fetch is not None:
            keys = await fetch
            if keys is None:
                return
            dropped = board.place(r, keys) if r.floating else 0
            keys = keys[dropped:]
            keep = board.arrived(r, keys, self.page - dropped)
            fetch = None if r.finished else asyncio.ensure_future(self._fetch_for(r))
            if not keep:
                self._release()
            if keep:
                for task in producing:
                    await task
                producing.clear()
                producing.append(asyncio.ensure_future(self._produce(r, keys[:keep])))
            self._wake()

    async def _produce(self, r: SliceRange, keys: list[Key]) -> None:
        assert self.board is not None
        await asyncio.sleep(self.produce_time)
        self.delivered += len(keys)
        self.board.acked(r, Position(*keys[-1]))
        self._release()
        self._wake()
