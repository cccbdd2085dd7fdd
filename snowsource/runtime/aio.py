"""Small asyncio helpers for waiting on work *or* a stop signal, leaving no task behind."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``; True when woken early by ``stop``."""
    if seconds <= 0:
        return stop.is_set()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()


async def done_before(task: asyncio.Future[Any], stop: asyncio.Event) -> bool:
    """Wait until ``task`` is done or ``stop`` is set; True when ``task`` finished first.

    ``task`` is left running when ``stop`` wins (the caller decides whether to cancel it); the
    internal waiter on ``stop`` never outlives this call.
    """
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        try:
            await waiter
        except asyncio.CancelledError:
            # The waiter's own cancellation is expected; a cancel of the task running this
            # (arriving while the waiter unwinds) must not be swallowed with it.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
    return task.done()


async def together(*jobs: Coroutine[Any, Any, object]) -> None:
    """Run ``jobs`` at once; the first to fail cancels the others and its error is raised as
    itself (not inside an ``ExceptionGroup``), so callers catch what they caught before the
    steps ran side by side."""
    try:
        async with asyncio.TaskGroup() as group:
            for job in jobs:
                group.create_task(job)
    except BaseExceptionGroup as failed:
        raise first_error(failed) from None


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error a task group ended with: the first that is not a cancellation."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]
