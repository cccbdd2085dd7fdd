"""The one way tests wait for a condition: poll it until it holds, fail after a timeout.

Never a bare sleep as synchronisation: the predicate says what is awaited, and a condition that
never comes fails the test with what was awaited instead of hanging it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def poll_until(
    predicate: Callable[[], Any],
    *,
    timeout: float = 30,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """Wait until ``predicate`` (plain or async) returns something truthy, and return it;
    ``AssertionError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(interval)
