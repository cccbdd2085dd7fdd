"""One table's requests to the Table API: its pages, counts and clock probe (SPEC §9).

Every request goes through the stream's one request path (``engine.snow_requests``: retried
until it works or stop is requested, each retry a WARN line with the table); this module says
what is asked and at which priority, and keeps the table's page size (``PageSizer``), which
"maximum execution time exceeded" halves at once.
"""

from __future__ import annotations

import asyncio

from snowsource.core.clock import InstanceClock
from snowsource.core.cursor import Position
from snowsource.core.errors import TableFailedError
from snowsource.core.grants import Priority
from snowsource.core.retry import PageSizer
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import Page, clock_probe_params, page_params
from snowsource.engine.clock_probe import observed
from snowsource.engine.snow_requests import SnowRequests


class TableReader:
    """Reads pages of one table; raises ``StoppedError`` once stop is requested."""

    def __init__(self, spec: TableSpec, requests: SnowRequests, *, stop: asyncio.Event) -> None:
        self._spec = spec
        self._requests = requests
        self._stop = stop
        self.sizer = PageSizer(spec.batch_size)
        # A derived stream (deletes, journal) reads behind the tables' own streaming pages.
        self._priority = Priority.STREAM if spec.stream == "table" else Priority.DERIVED

    def contended(self) -> bool:
        """Whether the instance's request slots (of every table) are all busy now: one more
        reader of this table would only queue behind them."""
        return self._requests.contended()

    async def page(
        self,
        after: Position,
        hi: str,
        *,
        backfill: bool = False,
        count: bool = False,
        offset: int = 0,
    ) -> tuple[Page, int]:
        """The page after ``after`` up to ``hi``, and the ``sysparm_limit`` it was asked with.

        ``backfill``: the table is still backfilling, so its pages wait behind streaming
        tables' pages and derived streams when requests queue (SPEC §15.3). ``count``: the
        answer also says how many rows match (``Page.total_count``). ``offset``: the first
        rows skipped (a sliced backfill's placing page)."""
        spec = self._spec
        return await self._requests.sized(
            spec.name,
            lambda limit: page_params(spec, after, hi, limit, count=count, offset=offset),
            self.sizer,
            priority=Priority.BACKFILL if backfill else self._priority,
            asking="a page",
        )

    async def ensure_clock(self, clock: InstanceClock) -> None:
        """HI is never computed from the local clock alone: see one ``Date`` header first
        (the probe in flight for this clock when there is one, else this table's own)."""
        spec = self._spec
        probe = clock_probe_params(spec)
        await observed(
            clock,
            lambda: self._requests.get(
                spec.name, probe, priority=Priority.STREAM, asking="the instance's clock"
            ),
            stop=self._stop,
        )

    async def check_hidden(self, after: Position, hi: str, *, at_least: int = 1) -> None:
        """An empty page after a full one: are rows there that the user may not read?

        ``at_least`` is how many matching rows make the empty page a stuck one: a slice's first
        page that came back empty with fewer matches than its limit was simply short (every
        match was in it, hidden), so nothing readable can follow it in that range."""
        params = page_params(self._spec, after, hi, 1, count=True)
        page = await self._requests.get(
            self._spec.name, params, priority=self._priority, asking="a count of hidden rows"
        )
        if (page.total_count or 0) >= max(at_least, 1) and not page.rows:
            raise TableFailedError(
                f"{self._spec.describe}: {page.total_count} row(s) after "
                f"{after.ts}/{after.id or '-'} match the query but none is readable by the "
                f"integration user (row-level ACLs are applied after sysparm_limit); grant read "
                f"access to these rows or narrow the table's query"
            )
