"""The wait-for-work-or-stop helpers."""

from __future__ import annotations

import asyncio

import pytest

from snowsource.runtime.aio import done_before, sleep_or_stop


async def test_sleep_or_stop_wakes_at_once_when_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_soon(stop.set)
    started = loop.time()
    assert await sleep_or_stop(stop, 30) is True
    assert loop.time() - started < 5


async def test_sleep_or_stop_times_out_without_stop() -> None:
    assert await sleep_or_stop(asyncio.Event(), 0.01) is False
    assert await sleep_or_stop(asyncio.Event(), 0) is False


async def test_done_before_reports_the_task_finishing_first() -> None:
    stop = asyncio.Event()
    task = asyncio.ensure_future(asyncio.sleep(0, result=7))
    assert await done_before(task, stop) is True
    assert task.result() == 7
    assert len(asyncio.all_tasks()) == 1  # only this test: no waiter left behind


async def test_done_before_leaves_the_task_running_when_stop_wins() -> None:
    stop = asyncio.Event()
    release = asyncio.Event()
    task = asyncio.ensure_future(release.wait())
    asyncio.get_running_loop().call_soon(stop.set)
    assert await done_before(task, stop) is False
    assert not task.done()
    release.set()
    await task
    assert len(asyncio.all_tasks()) == 1


@pytest.mark.parametrize("steps", range(6))
async def test_a_cancel_arriving_while_done_before_unwinds_is_not_swallowed(steps: int) -> None:
    # done_before suspends twice per call: in its wait, then while its stop waiter unwinds.
    # A cancel landing in either must end the task that called it (the second was once
    # swallowed, and a parallel-backfill slice waited for ever on a cancelled task group).
    stop = asyncio.Event()
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready.set_result(None)

    async def looping() -> None:
        while True:
            await done_before(ready, stop)

    task = asyncio.create_task(looping())
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done, "the cancel was swallowed: the task is still looping"
    assert task.cancelled()
