"""The shutdown deadline and the stop signal that carries it."""

from __future__ import annotations

import asyncio

import pytest

from snowsource.runtime.deadline import Deadline, StopSignal


def test_remaining_counts_down_and_is_capped() -> None:
    deadline = Deadline.after(30)
    assert 29 < deadline.remaining() <= 30
    assert deadline.remaining(cap=5) == 5
    assert not deadline.expired
    assert Deadline.after(-3).remaining() == 0
    assert Deadline.after(0).expired


def test_never_is_unbounded() -> None:
    never = Deadline.never()
    assert not never.bounded
    assert never.remaining() == float("inf")
    assert never.remaining(cap=2) == 2


def test_earlier_is_an_instant_before_and_never_stays_unbounded() -> None:
    deadline = Deadline.after(10)
    assert 6.9 < deadline.earlier(3).remaining() <= 7.0 < deadline.remaining()
    assert deadline.earlier(20).remaining() == 0
    assert deadline.earlier(-5).remaining() <= 10  # never later
    assert not Deadline.never().earlier(1).bounded


async def test_limit_cancels_the_block_at_the_deadline() -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(TimeoutError):
        async with Deadline.after(0.05).limit():
            await asyncio.sleep(10)
    assert loop.time() - began < 2


async def test_one_deadline_shared_by_two_steps_bounds_their_sum() -> None:
    # The point of one budget: the second step gets only what the first left.
    deadline = Deadline.after(0.2)
    loop = asyncio.get_running_loop()
    began = loop.time()
    for _ in range(2):
        with pytest.raises(TimeoutError):
            async with deadline.limit():
                await asyncio.sleep(10)
    assert loop.time() - began < 0.5


async def test_finish_waits_without_bound_until_stop_then_only_to_the_deadline() -> None:
    stop = StopSignal()
    never = asyncio.get_running_loop().create_future()
    finishing = asyncio.create_task(stop.finish(never))
    await asyncio.sleep(0.05)
    assert not finishing.done(), "no stop requested: finish waits for the work"
    stop.request(Deadline.after(0.05))
    assert await asyncio.wait_for(finishing, 2) is False
    assert not never.done()  # left for the caller to cancel
    never.cancel()


async def test_finish_is_true_when_the_work_completes() -> None:
    stop = StopSignal()
    stop.request(Deadline.after(5))
    work = asyncio.ensure_future(asyncio.sleep(0.01))
    assert await stop.finish(work) is True
    assert await stop.finish() is True  # nothing to wait for


def test_a_second_request_keeps_the_first_deadline() -> None:
    stop = StopSignal()
    assert not stop.deadline.bounded
    first = Deadline.after(1)
    stop.request(first)
    stop.request(Deadline.after(100))
    assert stop.deadline is first
    assert stop.is_set()


async def test_a_revoked_lease_stops_with_no_time_left() -> None:
    """Issue 23 item 7: a group member that stood still past its session must not send the
    page it was holding; its stop signal says so synchronously, before any task notices."""
    reason: list[str | None] = [None]
    stop = StopSignal(lambda: reason[0])
    assert not stop.revoked()
    assert not stop.is_set()
    reason[0] = "stood still"
    assert stop.revoked()
    assert stop.is_set()
    assert stop.revoked_because == "stood still"
    assert stop.deadline.remaining() == 0
    reason[0] = None  # once revoked, for good
    assert stop.revoked()
    assert not StopSignal().revoked()
