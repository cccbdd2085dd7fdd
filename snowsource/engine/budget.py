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


class PageBudget:
    """Slots for pages fetched but not yet produced, shared by every table of a generation."""

    def __init__(self, slots: int) -> None:
        if slots < 2:
            raise ValueError(f"a page budget needs two slots for one table to fetch ahead: {slots}")
        self.slots = slots
        self._free = asyncio.Semaphore(slots)
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Pollers waiting for a slot: with many tables, most of them (holding no page)."""
        return self._waiting

    async def acquire(self) -> None:
        """Wait for a free slot."""
        self._waiting += 1
        try:
            await self._free.acquire()
        finally:
            self._waiting -= 1

    def release(self) -> None:
        """Give a slot back (its page was produced, dropped or never arrived)."""
        self._free.release()


def page_slots(max_concurrent_requests: int) -> int:
    """Two pages per request that may be in flight: one arriving while one is produced."""
    return max(2, 2 * max_concurrent_requests)
