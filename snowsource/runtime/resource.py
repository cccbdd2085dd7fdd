"""The one shape every long-lived resource has: ``start``, idempotent ``close``, ``async with``."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class AsyncResource:
    """Base for resources opened with ``start()`` and released with an idempotent ``close()``.

    ``async with resource:`` starts it and always closes it, so resources compose in dependency
    order with ``contextlib.AsyncExitStack``.
    """

    async def start(self) -> None:
        """Acquire the resource."""

    async def close(self) -> None:
        """Release the resource; safe to call more than once."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
