"""The process-wide bound on pages in memory (memory with many tables).

Every poller holds at most two pages: the one it is producing and the one it fetches ahead. With
fifty tables that is a hundred pages at once (megabytes each), although only
``snow.http.max.concurrent.requests`` requests can be in flight anyway. A poller takes a slot
before it asks for a page and gives it back once that page is produced and acknowledged, so
memory grows with the slots, not with the number of tables; one table still fetches ahead.

The bound holds only because a poller keeps nothing of a page outside its slot: the decoded rows
are dropped once the page is planned (only the record values wait for the acks) and the plan
once it is committed, before the table waits for its next page — a table waiting for a slot
holds no page at all (``tests/unit/test_page_budget.py`` counts both).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from snowsource.core.grants import FairQueue


class PageBudget:
    """Slots for pages fetched but not yet produced, shared by every table of a generation.

    Waiting tables take turns (round-robin by key, ``core.grants.FairQueue``, like the session
    pool's grants): a table with several readers (backfill slices) gets one turn among the
    others, so a streaming table never waits behind more than one page of each backfill.
    """

    def __init__(self, slots: int) -> None:
        if slots < 2:
            raise ValueError(f"a page budget needs two slots for one table to fetch ahead: {slots}")
        self.slots = slots
        self._free = slots
        self._queue: FairQueue[asyncio.Future[None]] = FairQueue()

    @property
    def free(self) -> int:
        """Slots no page holds now."""
        return self._free

    @property
    def waiting(self) -> int:
        """Readers waiting for a slot: with many tables, most of them (holding no page)."""
        return len(self._queue)

    async def acquire(self, key: str = "") -> None:
        """Wait for a free slot; ``key`` (a table's alias) is whose turn it takes."""
        if self._free > 0 and not len(self._queue):
            self._free -= 1
            return
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.push(key, ticket)
        try:
            await ticket
        except BaseException:
            # Cancelled while waiting: withdraw; granted just before: the slot goes on.
            if not self._queue.remove(key, ticket) and ticket.done() and not ticket.cancelled():
                self.release()
            raise

    @contextlib.asynccontextmanager
    async def lease(self, key: str = "") -> AsyncIterator[None]:
        """A slot held while the block runs: taken in turn on entry, given back on exit
        whatever happens (a page produced, dropped, failed or cancelled)."""
        await self.acquire(key)
        try:
            yield
        finally:
            self.release()

    def release(self) -> None:
        """Give a slot back (its page was produced, dropped or never arrived): to the next
        table in turn when one waits."""
        while (ticket := self._queue.pop()) is not None:
            if not ticket.done():
                ticket.set_result(None)
                return
        self._free += 1


def page_slots(max_concurrent_requests: int) -> int:
    """Two pages per request that may be in flight: one arriving while one is produced."""
    return max(2, 2 * max_concurrent_requests)
