"""Pages of one range of a table, in order: a sweep's way of reading the table's one pager.

A page stream reads pages back to back, in keyset order, from ``PageRange.after`` up to
``PageRange.hi``, and ends at the first page shorter than it asked for. Each page comes from the
table's pager (``engine.pager``, the one a sliced backfill's slices fetch through too) with its
slot of the page budget; the stream fetches the next page while the current one is delivered,
once its owner says where that page ends (:meth:`PageStream.read_after`), and closes the current
page's slot when the owner asks for the next page (or closes the stream).

The stream knows nothing of records, delivery or offsets: its owner decides each page,
delivers it and commits the acknowledged prefix (``engine.sweep``).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from snowsource.core.cursor import Position
from snowsource.engine.pager import Pager, PageRead
from snowsource.runtime.aio import done_before
from snowsource.runtime.retrying import StoppedError

__all__ = ["FetchedPage", "PageRange", "PageStream"]


@dataclass(frozen=True, slots=True)
class PageRange:
    """Rows strictly after ``after`` in keyset order, with a timestamp up to ``hi`` inclusive."""

    after: Position
    hi: str


@dataclass(slots=True)
class FetchedPage:
    """One page of a stream, read after ``after``. ``previous`` is the last row of the page
    before it (None for the range's first page); ``full`` says more rows may follow."""

    rows: list[dict[str, Any]]
    after: Position
    previous: Position | None
    full: bool


class PageStream:
    """Pages of one range; use as ``async with stream: async for page in stream: ...``.

    Raises ``StoppedError`` when stop is requested while a page is awaited (the request is
    abandoned). ``complete`` is True once the range was read to its end.
    """

    def __init__(
        self,
        pager: Pager,
        span: PageRange,
        *,
        stop: asyncio.Event,
        name: str = "page-stream",
        backfill: bool = False,
    ) -> None:
        """``backfill``: the range is part of a backfill, whose requests wait behind streaming
        pages and derived streams when requests queue."""
        self.span = span
        self.complete = False
        self._pager = pager
        self._stop = stop
        self._name = name
        self._backfill = backfill
        self._after = span.after
        self._first = True
        self._full = False
        # The slot of the page its owner holds (not the page: its rows go once it is planned).
        self._slot: contextlib.AsyncExitStack | None = None
        self._fetch: asyncio.Task[PageRead] | None = None

    def read_after(self, position: Position) -> None:
        """Start fetching the page after ``position``, the current (full) page's last row."""
        if self._fetch is None and self._full:
            self._after = position
            self._fetch = self._start(position)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> FetchedPage:
        await self._done_with_current()
        fetch = self._fetch
        if fetch is None:
            raise StopAsyncIteration
        if not await done_before(fetch, self._stop):
            raise StoppedError("stop requested")
        self._fetch = None
        read = fetch.result()
        self._slot = read.slot
        previous = None if self._first else self._after
        was_full, self._first = self._full, False
        self._full = read.full
        if not self._full:
            self.complete = True
            if not read.page.rows and was_full:
                await self._pager.reader.check_hidden(self._after, self.span.hi)
        return FetchedPage(read.page.rows, self._after, previous, self._full)

    async def __aenter__(self) -> Self:
        """Ask for the range's first page."""
        if self._first and self._fetch is None:
            self._fetch = self._start(self.span.after)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Give back the current page's slot and abandon a fetch in flight (idempotent)."""
        await self._done_with_current()
        fetch, self._fetch = self._fetch, None
        if fetch is not None:
            fetch.cancel()
            await asyncio.gather(fetch, return_exceptions=True)
            if not fetch.cancelled() and fetch.exception() is None:
                await fetch.result().slot.aclose()  # it arrived before the cancel: unread

    def _start(self, after: Position) -> asyncio.Task[PageRead]:
        job = self._pager.fetch(after, self.span.hi, backfill=self._backfill)
        return asyncio.create_task(job, name=f"fetch:{self._name}")

    async def _done_with_current(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            await slot.aclose()
