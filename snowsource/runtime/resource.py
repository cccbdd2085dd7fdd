"""The one shape every long-lived resource has: ``start``, idempotent ``close``, ``async with``."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from snowsource.runtime.deadline import Deadline


class AsyncResource:
    """Base for resources opened with ``start()`` and released with an idempotent ``close()``.

    ``async with resource:`` starts it and always closes it, so resources compose in dependency
    order with ``contextlib.AsyncExitStack``. A ``start()`` that fails half-way is followed by
    ``close()`` before the error propagates, so ``close`` must cope with a partial start (close
    what was opened, skip the rest). ``close(deadline)`` never waits past ``deadline``: at
    shutdown every close shares the one budget.
    """

    async def start(self) -> None:
        """Acquire the resource."""

    async def close(self, deadline: Deadline | None = None) -> None:
        """Release the resource within ``deadline``; safe to call more than once."""

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
