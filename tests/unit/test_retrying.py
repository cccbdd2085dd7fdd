"""The one retry loop: ``async for attempt in retrying(policy, stop, deadline)``."""

from __future__ import annotations

import asyncio

import pytest

from snowsource.core.errors import RateLimitedError
from snowsource.core.retry import RetryPolicy
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.retrying import (
    Attempt,
    DeadlineExceededError,
    StoppedError,
    retrying,
)

FAST = RetryPolicy(0.001, 0.002)


class Flaky:
    """Fails ``failures`` times with ``error``, then answers ``result``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


async def _run(call: Flaky, **kwargs: object) -> str:
    async for attempt in retrying(FAST, **kwargs):  # type: ignore[arg-type]
        with attempt:
            return await call()
    raise AssertionError("unreachable")


async def test_retries_until_success_and_reports_each_retry() -> None:
    seen: list[tuple[int, float]] = []
    call = Flaky(3, OSError("down"))

    def on_retry(attempt: Attempt, delay: float) -> None:
        assert isinstance(attempt.error, OSError)
        seen.append((attempt.number, delay))

    assert await _run(call, on_retry=on_retry) == "ok"
    assert call.calls == 4
    assert [n for n, _ in seen] == [0, 1, 2]


async def test_an_error_that_is_not_retriable_propagates_at_once() -> None:
    call = Flaky(5, ValueError("bug"))
    with pytest.raises(ValueError, match="bug"):
        await _run(call, retry_if=lambda exc: isinstance(exc, OSError))
    assert call.calls == 1


async def test_stop_ends_the_loop_instead_of_sleeping() -> None:
    stop = asyncio.Event()
    call = Flaky(10**6, OSError("down"))
    slow = RetryPolicy(30, 30)

    async def attempt_forever() -> None:
        async for attempt in retrying(slow, stop):
            with attempt:
                await call()

    task = asyncio.create_task(attempt_forever())
    await asyncio.sleep(0.05)
    stop.set()
    with pytest.raises(StoppedError) as raised:
        await asyncio.wait_for(task, 2)
    assert isinstance(raised.value.__cause__, OSError)
    assert call.calls == 1


async def test_already_stopped_makes_no_attempt() -> None:
    stop = asyncio.Event()
    stop.set()
    call = Flaky(0, OSError())
    with pytest.raises(StoppedError):
        await _run(call, stop=stop)
    assert call.calls == 0


async def test_the_deadline_ends_the_loop_with_the_last_error_chained() -> None:
    call = Flaky(10**6, OSError("down"))
    policy = RetryPolicy(0.05, 0.05)
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def attempt_until_the_deadline() -> None:
        async for attempt in retrying(policy, None, Deadline.after(0.3)):
            with attempt:
                await call()

    with pytest.raises(DeadlineExceededError, match="deadline passed") as raised:
        await attempt_until_the_deadline()
    assert loop.time() - began < 1
    assert isinstance(raised.value.__cause__, OSError)
    assert call.calls >= 2


async def test_retry_after_set_by_the_body_is_the_next_wait() -> None:
    delays: list[float] = []
    policy = RetryPolicy(0.0, 0.0)
    calls = 0
    async for attempt in retrying(policy, on_retry=lambda a, d: delays.append(d)):
        with attempt:
            calls += 1
            if calls == 1:
                attempt.retry_after = 0.02
                raise OSError("429")
    assert delays == [0.02]


async def test_an_error_carrying_retry_after_sets_the_next_wait_by_itself() -> None:
    # Every loop obeys a 429's Retry-After, not only those that copy it into the attempt.
    delays: list[float] = []
    error = RateLimitedError("429", retry_after=0.03)
    call = Flaky(1, error)
    async for attempt in retrying(RetryPolicy(0.0, 0.0), on_retry=lambda a, d: delays.append(d)):
        with attempt:
            await call()
    assert delays == [0.03]


async def test_an_error_without_a_wait_leaves_the_policy_to_choose() -> None:
    delays: list[float] = []
    call = Flaky(1, RateLimitedError("429", retry_after=None))
    async for attempt in retrying(RetryPolicy(0.0, 0.0), on_retry=lambda a, d: delays.append(d)):
        with attempt:
            await call()
    assert delays == [0.0]


async def test_progress_during_a_failed_attempt_starts_the_run_of_failures_over() -> None:
    numbers: list[int] = []
    progress = 0
    calls = 0

    async def call() -> str:
        nonlocal progress, calls
        calls += 1
        if calls == 3:
            progress += 1  # this attempt got somewhere before it failed
        if calls <= 4:
            raise OSError("down")
        return "ok"

    def on_retry(attempt: Attempt, delay: float) -> None:
        numbers.append(attempt.number)

    async for attempt in retrying(FAST, on_retry=on_retry, progress=lambda: progress):
        with attempt:
            await call()
    assert calls == 5
    # Attempts 0 and 1 failed without progress; the third made progress, so it counts as the
    # first failure of a new run, and the fourth as the second.
    assert numbers == [0, 1, 0, 1]
