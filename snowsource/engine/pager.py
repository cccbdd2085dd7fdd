"""A table's one pager: every keyset page it reads, with the page budget's slot it holds.

Whoever reads a table's pages, one pager in order (``engine.page_stream``, a sweep's) or a
sliced backfill's slices side by side (``engine.slice_pages``), a page is fetched here and only
here: a slot of the process's page budget is leased before the request leaves, and the lease is
handed over with the page (:attr:`PageRead.slot`) to whoever produces or drops it. So a page
holds its slot from the moment it is asked for until its owner closes the lease, whatever
happens in between (a failure, a cancel on stop), and memory grows with the slots, not with
the tables or the slices.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Protocol

from snowsource.core.cursor import Position
from snowsource.core.tableapi import Page
from snowsource.engine.budget import PageBudget

__all__ = ["PageRead", "PageReader", "Pager"]


class PageReader(Protocol):
    """Reads one table's pages, retrying as SPEC §9 says (``engine.reader.TableReader``)."""

    async def page(
        self,
        after: Position,
        hi: str,
        *,
        backfill: bool = False,
        count: bool = False,
        offset: int = 0,
    ) -> tuple[Page, int]: ...

    async def check_hidden(self, after: Position, hi: str, *, at_least: int = 1) -> None: ...


@dataclass(frozen=True, eq=False)
class PageRead:
    """A page, the ``sysparm_limit`` it was asked with, and its page-budget lease (closed by
    whoever is done with the page: ``await read.slot.aclose()``)."""

    page: Page
    limit: int
    slot: contextlib.AsyncExitStack

    @property
    def full(self) -> bool:
        """As many rows as asked for: more may follow."""
        return bool(self.page.rows) and len(self.page.rows) >= self.limit


class Pager:
    """Fetches one table's pages within the page budget (none: no bound)."""

    def __init__(self, reader: PageReader, budget: PageBudget | None, *, key: str) -> None:
        """``key``: whose turn a page takes in the budget's fair queue (the table's alias)."""
        self.reader = reader
        self._budget = budget
        self._key = key

    @property
    def contended(self) -> bool:
        """Whether pages of some table wait for a slot now."""
        return self._budget is not None and self._budget.waiting > 0

    def lease(self) -> contextlib.AbstractAsyncContextManager[None]:
        """A page's slot of the page budget (none without a budget)."""
        budget = self._budget
        return contextlib.nullcontext() if budget is None else budget.lease(self._key)

    async def fetch(
        self,
        after: Position,
        hi: str,
        *,
        backfill: bool = False,
        count: bool = False,
        offset: int = 0,
    ) -> PageRead:
        """The page after ``after`` up to ``hi`` (``TableReader.page`` says what the options
        ask), holding its slot from before the request on; a failed or cancelled fetch gives
        the slot back."""
        async with contextlib.AsyncExitStack() as slot:
            await slot.enter_async_context(self.lease())
            page, limit = await self.reader.page(
                after, hi, backfill=backfill, count=count, offset=offset
            )
            return PageRead(page, limit, slot.pop_all())
        raise AssertionError("unreachable")  # pragma: no cover - mypy: the block returns
