"""The one retry loop: ``async for attempt in retrying(policy, stop, deadline)``.

The policy decides how long to wait (``snowsource.core.retry``); this loop does the waiting, on
the stop event so shutdown wakes it at once, and never past the deadline. Usage::

    async for attempt in retrying(policy, stop, deadline, retry_if=is_retriable):
        with attempt:
            await store.write(key, value)

A retriable error inside ``with attempt`` is swallowed and the next attempt follows after the
policy's delay; any other error propagates at once. The loop ends after the first attempt that
raised nothing. When stop is requested it raises :class:`StoppedError`; when the next wait would
pass the deadline it raises :class:`DeadlineExceededError`; both chain the last error.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from types import TracebackType
from typing import Self

from snowsource.core.retry import RetryPolicy
from snowsource.runtime.aio import sleep_or_stop
from snowsource.runtime.deadline import Deadline


class StoppedError(Exception):
    """Stop was requested while retrying; the caller abandons the work."""


class DeadlineExceededError(Exception):
    """The deadline passed before an attempt succeeded."""


OnRetry = Callable[["Attempt", float], None]


class Attempt:
    """One try. Use as ``with attempt:``; ``retry_after`` lets the body ask for a given wait."""

    def __init__(self, number: int, retry_if: Callable[[BaseException], bool]) -> None:
        self.number = number
        self.error: BaseException | None = None
        self.retry_after: float | None = None
        self.succeeded = False
        self._retry_if = retry_if

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None:
            self.succeeded = True
            return False
        if isinstance(exc, Exception) and self._retry_if(exc):
            self.error = exc
            # An error that carries the server's own wait (a 429's ``retry_after``) is obeyed
            # by every loop, not only by those that remember to copy it here.
            wait = getattr(exc, "retry_after", None)
            if self.retry_after is None and isinstance(wait, int | float):
                self.retry_after = float(wait)
            return True
        return False


class retrying:  # noqa: N801 - reads as the loop it drives: ``async for ... in retrying(...)``
    """Attempts until one succeeds, stop is requested or the deadline would pass."""

    def __init__(
        self,
        policy: RetryPolicy,
        stop: asyncio.Event | None = None,
        deadline: Deadline | None = None,
        *,
        retry_if: Callable[[BaseException], bool] = lambda exc: True,
        on_retry: OnRetry | None = None,
        progress: Callable[[], object] | None = None,
    ) -> None:
        """``progress`` (optional) tells whether an attempt got anywhere before it failed: when
        its value changed during the attempt, the run of failures starts over, with the
        policy's first delay (a table that emitted rows before a produce failure)."""
        self._policy = policy
        self._stop = stop if stop is not None else asyncio.Event()
        self._deadline = deadline if deadline is not None else Deadline.never()
        self._retry_if = retry_if
        self._on_retry = on_retry
        self._progress = progress
        self._progress_seen: object = None
        self._last: Attempt | None = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Attempt:
        last = self._last
        if last is not None:
            if last.succeeded:
                raise StopAsyncIteration
            if last.error is None:
                # The body of ``with attempt`` was skipped or left by ``break``/``continue``.
                raise StopAsyncIteration
            if self._progress is not None and self._progress() != self._progress_seen:
                last.number = 0
            await self._wait(last)
        elif self._stop.is_set():
            raise StoppedError("stop requested")
        if self._progress is not None:
            self._progress_seen = self._progress()
        number = 0 if last is None else last.number + 1
        self._last = Attempt(number, self._retry_if)
        return self._last

    async def _wait(self, last: Attempt) -> None:
        delay = self._policy.next_delay(last.number, last.retry_after)
        if self._on_retry is not None:
            self._on_retry(last, delay)
        left = self._deadline.remaining()
        if left <= delay and not math.isinf(left):
            raise DeadlineExceededError(
                f"gave up after {last.number + 1} attempt(s): the deadline passed "
                f"(last error: {last.error!r})"
            ) from last.error
        if await sleep_or_stop(self._stop, delay):
            raise StoppedError("stop requested") from last.error
