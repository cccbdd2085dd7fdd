"""One table's requests to the Table API, with the retry policy of SPEC §9.

Every request is retried forever (each attempt logged at WARN with the table) until it succeeds
or stop is requested; 429 waits ``Retry-After``; "maximum execution time exceeded" halves the
page size at once (``PageSizer``), and any other failure breaks its run of good pages.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping

import structlog

from snowsource.core.clock import InstanceClock
from snowsource.core.cursor import Position
from snowsource.core.errors import (
    ExecutionTimeExceededError,
    RateLimitedError,
    RetriableError,
    TableFailedError,
)
from snowsource.core.grants import Priority
from snowsource.core.retry import PageSizer, RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import Page, clock_probe_params, page_params
from snowsource.engine.clock_probe import observed
from snowsource.engine.failures import FailureSource, FailureTracker
from snowsource.engine.ports import PageSource, SharedSource
from snowsource.observability import metrics
from snowsource.runtime.retrying import Attempt, StoppedError, retrying


class TableReader:
    """Reads pages of one table; raises ``StoppedError`` once stop is requested."""

    def __init__(
        self,
        spec: TableSpec,
        client: PageSource,
        *,
        retry: RetryPolicy,
        stop: asyncio.Event,
        log: structlog.typing.FilteringBoundLogger,
        failures: FailureTracker | None = None,
    ) -> None:
        self._spec = spec
        self._client = client
        self._retry = retry
        self._stop = stop
        self._log = log
        self._failures = failures
        self.sizer = PageSizer(spec.batch_size)
        # A derived stream (deletes, journal) reads behind the tables' own streaming pages.
        self._priority = Priority.STREAM if spec.stream == "table" else Priority.DERIVED

    def contended(self) -> bool:
        """Whether the instance's request slots (of every table) are all busy now: one more
        reader of this table would only queue behind them."""
        client = self._client
        return isinstance(client, SharedSource) and client.saturated()

    async def page(
        self, after: Position, hi: str, *, backfill: bool = False, count: bool = False
    ) -> tuple[Page, int]:
        """The page after ``after`` up to ``hi``, and the ``sysparm_limit`` it was asked with.

        ``backfill``: the table is still backfilling, so its pages wait behind streaming
        tables' pages and derived streams when requests queue (SPEC §15.3). ``count``: the
        answer also says how many rows match (``Page.total_count``)."""
        limits: list[int] = []

        def params() -> dict[str, str]:
            limits.append(self.sizer.size)
            return page_params(self._spec, after, hi, limits[-1], count=count)

        priority = Priority.BACKFILL if backfill else self._priority
        page = await self._request(params, sizing=True, priority=priority)
        return page, limits[-1]

    async def ensure_clock(self, clock: InstanceClock) -> None:
        """HI is never computed from the local clock alone: see one ``Date`` header first
        (the probe in flight for this clock when there is one, else this table's own)."""
        probe = clock_probe_params(self._spec)
        await observed(
            clock,
            lambda: self._request(lambda: probe, sizing=False, priority=Priority.STREAM),
            stop=self._stop,
        )

    async def check_hidden(self, after: Position, hi: str, *, at_least: int = 1) -> None:
        """An empty page after a full one: are rows there that the user may not read?

        ``at_least`` is how many matching rows make the empty page a stuck one: a slice's first
        page that came back empty with fewer matches than its limit was simply short (every
        match was in it, hidden), so nothing readable can follow it in that range."""
        params = page_params(self._spec, after, hi, 1, count=True)
        page = await self._request(lambda: params, sizing=False, priority=self._priority)
        if (page.total_count or 0) >= max(at_least, 1) and not page.rows:
            raise TableFailedError(
                f"{self._spec.describe}: {page.total_count} row(s) after "
                f"{after.ts}/{after.id or '-'} match the query but none is readable by the "
                f"integration user (row-level ACLs are applied after sysparm_limit); grant read "
                f"access to these rows or narrow the table's query"
            )

    async def _request(
        self, params: Callable[[], Mapping[str, str]], *, sizing: bool, priority: Priority
    ) -> Page:
        async for attempt in retrying(
            self._retry,
            self._stop,
            retry_if=lambda exc: isinstance(exc, RetriableError),
            on_retry=functools.partial(self._retrying, sizing),
        ):
            with attempt:
                page = await self._get(params, sizing=sizing, priority=priority)
                if sizing:
                    self.sizer.success()
                if self._failures is not None:
                    self._failures.succeeded(FailureSource.SERVICENOW)
                return page
        raise StoppedError("stop requested")  # pragma: no cover - retrying raises first

    async def _get(
        self, params: Callable[[], Mapping[str, str]], *, sizing: bool, priority: Priority
    ) -> Page:
        """One request; a page too expensive for the instance is asked again at half the size."""
        spec = self._spec
        while True:
            try:
                return await self._client.get_page(
                    spec.name, params(), label=spec.alias, priority=priority
                )
            except ExecutionTimeExceededError as exc:
                if not (sizing and self.sizer.shrink()):
                    raise
                self._log.warning(
                    "page too expensive for the instance; halving the page size",
                    page_size=self.sizer.size,
                    error=str(exc),
                )
                metrics.RETRIES.labels(table=spec.alias).inc()
                if self._failures is not None:
                    self._failures.failed(FailureSource.SERVICENOW, str(exc))

    def _retrying(self, sizing: bool, attempt: Attempt, delay: float) -> None:
        error = attempt.error
        alias = self._spec.alias
        if sizing:
            self.sizer.failure()
        if isinstance(error, RateLimitedError):
            metrics.THROTTLED_SECONDS.labels(table=alias).inc(delay)
        metrics.RETRIES.labels(table=alias).inc()
        if self._failures is not None:
            self._failures.failed(FailureSource.SERVICENOW, str(error))
        self._log.warning(
            "ServiceNow request failed; retrying",
            error=str(error),
            status=getattr(error, "status", None),
            attempt=attempt.number + 1,
            retry_in=round(delay, 2),
        )
