"""One shutdown budget, created once and handed to every drain and close (SPEC §1).

A fresh timeout per step adds up: poller drain, REST cleanup, group leave and two producer
closes at 30 s each are minutes. A ``Deadline`` is a fixed instant on the monotonic clock; each
step asks how much is *left* and waits no longer than that.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any


class Deadline:
    """A fixed instant on the monotonic clock (``Deadline.after(30)``; ``Deadline.never()``)."""

    __slots__ = ("_at",)

    def __init__(self, at: float) -> None:
        self._at = at

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """The instant ``seconds`` from now."""
        return cls(time.monotonic() + max(seconds, 0.0))

    @classmethod
    def never(cls) -> Deadline:
        """No bound at all (``remaining()`` is infinite)."""
        return cls(math.inf)

    def earlier(self, seconds: float) -> Deadline:
        """The instant ``seconds`` before this one (``Deadline.never()`` stays unbounded)."""
        return Deadline(self._at - max(seconds, 0.0))

    @property
    def bounded(self) -> bool:
        """False for ``Deadline.never()``."""
        return math.isfinite(self._at)

    def remaining(self, cap: float | None = None) -> float:
        """Seconds left (never negative), at most ``cap`` when given."""
        left = max(self._at - time.monotonic(), 0.0)
        return left if cap is None else min(left, cap)

    @property
    def expired(self) -> bool:
        """True once the instant has passed."""
        return time.monotonic() >= self._at

    @asynccontextmanager
    async def limit(self, cap: float | None = None) -> AsyncIterator[None]:
        """Cancel the block when the deadline (or ``cap`` seconds, if sooner) passes.

        Raises ``TimeoutError`` like ``asyncio.timeout``.
        """
        seconds = self.remaining(cap)
        async with asyncio.timeout(None if math.isinf(seconds) else seconds):
            yield

    def __repr__(self) -> str:
        return f"Deadline(remaining={self.remaining():.3f}s)" if self.bounded else "Deadline.never"


class StopSignal:
    """A stop request and the deadline that came with it.

    Sleepers wait on ``event`` and wake at once; work that must still finish after the request
    (acks, final offset writes) gets ``deadline``'s remaining time, then is abandoned.

    ``lease`` (group mode) says why the work may no longer go on, or None while it may: a
    member that stood still past its group session may have lost its tables to another member
    before any of its tasks could notice. :meth:`revoked` asks it synchronously.
    """

    def __init__(self, lease: Callable[[], str | None] | None = None) -> None:
        self.event = asyncio.Event()
        self._deadline: Deadline | None = None
        self._lease = lease
        self.revoked_because: str | None = None

    def request(self, deadline: Deadline) -> None:
        """Ask to stop within ``deadline``; a second request keeps the first deadline."""
        if self._deadline is None:
            self._deadline = deadline
        self.event.set()

    def is_set(self) -> bool:
        """True once stop was requested."""
        return self.event.is_set()

    def revoked(self) -> bool:
        """True once the lease is gone: then stop is requested with no time left, so nothing
        more is sent, acknowledged or committed by this work."""
        if self.revoked_because is None and self._lease is not None:
            self.revoked_because = self._lease()
            if self.revoked_because is not None:
                self._deadline = Deadline.after(0)
                self.event.set()
        return self.revoked_because is not None

    @property
    def deadline(self) -> Deadline:
        """The stop's deadline; ``Deadline.never()`` while no stop was requested."""
        return self._deadline if self._deadline is not None else Deadline.never()

    async def finish(self, *work: asyncio.Future[Any]) -> bool:
        """Wait for all of ``work``; once stop is requested, no longer than its deadline.

        True when everything finished. What is left is left running (the caller decides).
        """
        pending = {w for w in work if not w.done()}
        if pending and not self.is_set():
            waiter = asyncio.ensure_future(self.event.wait())
            try:
                while pending and not waiter.done():
                    done, _ = await asyncio.wait(
                        pending | {waiter}, return_when=asyncio.FIRST_COMPLETED
                    )
                    pending -= done
            finally:
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
        if pending:
            seconds = self.deadline.remaining()
            _, pending = await asyncio.wait(
                pending, timeout=None if math.isinf(seconds) else seconds
            )
        return not pending
