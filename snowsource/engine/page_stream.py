"""One keyset pager over a range of a table: the pages after a position, up to a bound.

A page stream reads pages back to back, in keyset order, from ``PageRange.after`` up to
``PageRange.hi``, and ends at the first page shorter than it asked for. It fetches the next page
while the current one is delivered, once its owner says where that page ends
(:meth:`PageStream.read_after`); every page holds a slot of the process's page budget from the
moment it is asked for until the owner asks for the next one, so memory grows with the slots,
not with the tables.

The stream knows nothing of records, delivery or offsets: its owner (the table) decides each
page, delivers it and commits the contiguous acknowledged prefix. So a table may own several
streams, one per range, and commit what all of them acknowledged in cursor order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self

from snowsource.core.cursor import Position
from snowsource.core.tableapi import Page
from snowsource.engine.budget import PageBudget
from snowsource.runtime.aio import done_before
from snowsource.runtime.retrying import StoppedError


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


class PageReader(Protocol):
    """Reads one table's pages, retrying as SPEC §9 says (``engine.reader.TableReader``)."""

    async def page(
        self, after: Position, hi: str, *, backfill: bool = False
    ) -> tuple[Page, int]: ...

    async def check_hidden(self, after: Position, hi: str) -> None: ...


class PageStream:
    """Pages of one range; use as ``async with stream: async for page in stream: ...``.

    Raises ``StoppedError`` when stop is requested while a page is awaited (the request is
    abandoned). ``complete`` is True once the range was read to its end.
    """

    def __init__(
        self,
        reader: PageReader,
        span: PageRange,
        *,
        stop: asyncio.Event,
        budget: PageBudget | None = None,
        name: str = "page-stream",
        backfill: bool = False,
    ) -> None:
        """``backfill``: the range is part of a backfill, whose requests wait behind streaming
        pages and derived streams when requests queue."""
        self.span = span
        self.complete = False
        self._reader = reader
        self._stop = stop
        self._budget = budget
        self._name = name
        self._backfill = backfill
        self._after = span.after
        self._first = True
        self._full = False
        self._holding = False  # the current page's budget slot, given back at the next page
        self._fetch: asyncio.Task[tuple[Page, int]] | None = None

    def read_after(self, position: Position) -> None:
        """Start fetching the page after ``position``, the current (full) page's last row."""
        if self._fetch is None and self._full:
            self._after = position
            self._fetch = self._start(position)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> FetchedPage:
        self._give_back()
        fetch = self._fetch
        if fetch is None:
            raise StopAsyncIteration
        if not await done_before(fetch, self._stop):
            raise StoppedError("stop requested")
        self._fetch = None
        page, limit = fetch.result()
        self._holding = True
        previous = None if self._first else self._after
        was_full, self._first = self._full, False
        self._full = bool(page.rows) and len(page.rows) >= limit
        if not self._full:
            self.complete = True
            if not page.rows and was_full:
                await self._reader.check_hidden(self._after, self.span.hi)
        return FetchedPage(page.rows, self._after, previous, self._full)

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
        self._give_back()
        fetch, self._fetch = self._fetch, None
        if fetch is not None:
            fetch.cancel()
            await asyncio.gather(fetch, return_exceptions=True)
            if not fetch.cancelled() and fetch.exception() is None:
                self._release()  # it arrived before the cancel: nobody reads it

    def _start(self, after: Position) -> asyncio.Task[tuple[Page, int]]:
        return asyncio.create_task(self._get(after), name=f"fetch:{self._name}")

    async def _get(self, after: Position) -> tuple[Page, int]:
        """A page, once the page budget has room for it; the slot goes with the page."""
        if self._budget is None:
            return await self._reader.page(after, self.span.hi, backfill=self._backfill)
        await self._budget.acquire(self._name)
        try:
            return await self._reader.page(after, self.span.hi, backfill=self._backfill)
        except BaseException:
            self._budget.release()
            raise

    def _give_back(self) -> None:
        if self._holding:
            self._holding = False
            self._release()

    def _release(self) -> None:
        if self._budget is not None:
            self._budget.release()
