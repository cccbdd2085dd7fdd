"""The session pool's bookkeeping without a network: which slot a request gets, when a slot
opens, how the limit holds requests back, and what a 401 or a new JSESSIONID does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from snowsource.adapters.session_pool import Lease, SessionPool
from snowsource.core.grants import Priority
from snowsource.core.rate_budget import RateBudget

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture
async def opened() -> AsyncIterator[list[aiohttp.ClientSession]]:
    sessions: list[aiohttp.ClientSession] = []
    yield sessions
    for session in sessions:
        await session.close()


def pool_of(opened: list[aiohttp.ClientSession], k: int, per_session: int = 1) -> SessionPool:
    def make(jar: aiohttp.abc.AbstractCookieJar) -> aiohttp.ClientSession:
        session = aiohttp.ClientSession(cookie_jar=jar)
        opened.append(session)
        return session

    return SessionPool(make, max_concurrent_requests=k, requests_per_session=per_session)


class Holder:
    """Takes leases and keeps them until told to give them back."""

    def __init__(self, pool: SessionPool) -> None:
        self.pool = pool
        self.leases: dict[str, Lease] = {}
        self._done: dict[str, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def ask(self, name: str, key: str = "t", priority: Priority = Priority.STREAM) -> None:
        self._done[name] = asyncio.Event()

        async def hold() -> None:
            async with self.pool.lease(key, priority) as lease:
                self.leases[name] = lease
                await self._done[name].wait()

        self._tasks.append(asyncio.create_task(hold()))

    def give_back(self, name: str) -> None:
        self._done[name].set()

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def close(self) -> None:
        for event in self._done.values():
            event.set()
        await asyncio.gather(*self._tasks)

    async def abandon(self) -> None:
        """Give every lease back and close the pool: requests still waiting fail."""
        for event in self._done.values():
            event.set()
        await self.pool.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def test_slots_open_lazily_and_are_reused(opened: list[aiohttp.ClientSession]) -> None:
    pool = pool_of(opened, 4)
    holder = Holder(pool)
    holder.ask("a")
    await holder.settle()
    assert pool.status().sessions_open == 1
    holder.give_back("a")
    await holder.settle()
    holder.ask("b")
    await holder.settle()
    assert holder.leases["b"].slot is holder.leases["a"].slot  # reused, not a second session
    assert len(opened) == 1
    await holder.close()
    await pool.close()
    await pool.close()  # idempotent


async def test_a_new_session_carries_one_request_until_it_answered(
    opened: list[aiohttp.ClientSession],
) -> None:
    pool = pool_of(opened, 4, per_session=2)  # two slots of two
    holder = Holder(pool)
    for name in ("a", "b", "c"):
        holder.ask(name)
    await holder.settle()
    assert set(holder.leases) == {"a", "b"}  # c waits: neither new session has answered yet
    assert holder.leases["a"].slot is not holder.leases["b"].slot
    pool.answered(holder.leases["a"], 200, session_id="S1", retry_after=False)
    await holder.settle()
    assert holder.leases["c"].slot is holder.leases["a"].slot  # now it carries two
    status = pool.status()
    assert (status.in_flight, status.waiting, status.sessions_open) == (3, 0, 2)
    assert status.sessions_opened == 1
    await holder.close()
    await pool.close()


async def test_saturation_holds_requests_back_until_in_flight_is_below_the_limit(
    opened: list[aiohttp.ClientSession],
) -> None:
    pool = pool_of(opened, 4)
    holder = Holder(pool)
    for name in "abcd":
        holder.ask(name)
    await holder.settle()
    pool.answered(holder.leases["a"], 429, session_id=None, retry_after=False)
    assert pool.status().limit == 2
    pool.answered(holder.leases["b"], 429, session_id=None, retry_after=False)
    assert pool.status().limit == 2  # granted before the decrease: the same signal
    holder.ask("e")
    await holder.settle()
    assert "e" not in holder.leases
    for name in "ab":
        holder.give_back(name)
        await holder.settle()
        assert "e" not in holder.leases, name  # 3, then 2 in flight: not below the limit
    holder.give_back("c")
    await holder.settle()
    assert "e" in holder.leases  # 1 in flight: e makes it 2
    assert pool.status().in_flight == 2
    await holder.close()
    await pool.close()


async def test_retry_after_is_not_saturation(opened: list[aiohttp.ClientSession]) -> None:
    pool = pool_of(opened, 4)
    holder = Holder(pool)
    holder.ask("a")
    await holder.settle()
    pool.answered(holder.leases["a"], 429, session_id=None, retry_after=True)
    assert pool.status().limit == 4
    await holder.close()
    await pool.close()


async def test_a_401_forgets_the_cookies_and_a_new_jsessionid_is_a_replacement(
    opened: list[aiohttp.ClientSession],
) -> None:
    pool = pool_of(opened, 1)
    holder = Holder(pool)
    holder.ask("a")
    await holder.settle()
    lease = holder.leases["a"]
    lease.session.cookie_jar.update_cookies({"JSESSIONID": "S1"})
    pool.answered(lease, 200, session_id="S1", retry_after=False)
    pool.answered(lease, 200, session_id="S2", retry_after=False)  # the instance replaced it
    assert (pool.status().sessions_opened, pool.status().sessions_replaced) == (2, 1)
    pool.answered(lease, 401, session_id=None, retry_after=False)
    assert len(lease.session.cookie_jar) == 0
    pool.answered(lease, 200, session_id="S3", retry_after=False)
    # After a 401 the next session is a new one, not a replacement the instance made.
    assert (pool.status().sessions_opened, pool.status().sessions_replaced) == (3, 1)
    await holder.close()
    await pool.close()


async def test_closing_fails_waiters_and_refuses_new_requests(
    opened: list[aiohttp.ClientSession],
) -> None:
    pool = pool_of(opened, 1)
    holder = Holder(pool)
    holder.ask("a")
    await holder.settle()
    waiter = asyncio.create_task(pool.lease("other").__aenter__())
    await holder.settle()
    assert pool.status().waiting == 1
    await pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        await waiter
    with pytest.raises(RuntimeError, match="closed"):
        async with pool.lease("late"):
            pass
    assert all(session.closed for session in opened)
    await holder.close()


def test_impossible_sizes_are_refused() -> None:
    def never(jar: aiohttp.abc.AbstractCookieJar) -> aiohttp.ClientSession:
        raise AssertionError("no session is opened")

    with pytest.raises(ValueError, match="max_concurrent_requests"):
        SessionPool(never, max_concurrent_requests=0)
    with pytest.raises(ValueError, match="requests_per_session"):
        SessionPool(never, max_concurrent_requests=1, requests_per_session=0)


class StepClock:
    """The pool's epoch clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_binding_budget_grants_the_most_urgent_waiter_first(
    opened: list[aiohttp.ClientSession],
) -> None:
    clock = StepClock()

    def make(jar: aiohttp.abc.AbstractCookieJar) -> aiohttp.ClientSession:
        session = aiohttp.ClientSession(cookie_jar=jar)
        opened.append(session)
        return session

    budget = RateBudget(max_per_hour=3600, headroom=0.0, burst=1)  # one a second
    pool = SessionPool(make, max_concurrent_requests=4, budget=budget, clock=clock)
    holder = Holder(pool)
    holder.ask("first", key="big", priority=Priority.BACKFILL)
    await holder.settle()
    assert "first" in holder.leases  # the bucket's one token
    for i in range(5):
        holder.ask(f"slice{i}", key="big", priority=Priority.BACKFILL)
    holder.ask("sweep", key="keys", priority=Priority.LOW)
    holder.ask("deletes", key="d", priority=Priority.DERIVED)
    holder.ask("live", key="live", priority=Priority.STREAM)
    await holder.settle()
    assert set(holder.leases) == {"first"}  # slots are free; the budget holds them back
    assert pool.status().waiting == 8
    granted: list[str] = []
    for _ in range(3):
        clock.now += 1.0  # one more token
        pool.rate_limit_seen(10**6, 5000.0, 5000.0)  # an answer arrives: the pool looks again
        await holder.settle()
        granted += [name for name in holder.leases if name not in granted and name != "first"]
    assert granted == ["live", "deletes", "slice0"]
    status = pool.budget_status()
    assert status is not None
    assert status.waited_seconds >= 1.0
    await holder.abandon()  # the rest would wait for tokens the frozen clock never accrues
