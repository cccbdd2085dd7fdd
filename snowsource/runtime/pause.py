"""A gate that is shut until a given moment: ``Pause.hold_for(seconds)``, ``await pause.wait()``.

The ServiceNow client holds every request of the process behind one (SPEC §15.3): a 429 whose
``Retry-After`` names a time means the instance's rate-limit rule (kept per user, so per
process and per group) answers every request before that time with another 429, which counts
against the user too. Requests already sent are not called back; only new ones wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Pause:
    """Shut until the latest moment any ``hold_for`` named; open again by itself after it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = 0.0

    def hold_for(self, seconds: float) -> bool:
        """Shut the gate for ``seconds`` from now (never shortening a longer pause).

        True when this moved the end of the pause later (a new or longer pause)."""
        if seconds <= 0:
            return False
        until = self._clock() + seconds
        if until <= self._until:
            return False
        self._until = until
        return True

    def remaining(self) -> float:
        """Seconds until the gate opens (0 when open)."""
        return max(0.0, self._until - self._clock())

    async def wait(self) -> float:
        """Return once the gate is open; the seconds waited. A pause extended meanwhile (another
        429 while this one waits) is waited for as well."""
        waited = 0.0
        while (left := self.remaining()) > 0:
            await asyncio.sleep(left)
            waited += left
        return waited
