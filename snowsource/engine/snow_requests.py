"""Every ServiceNow request of the engine: one call, one retry policy (SPEC §9, §15.3).

A stream's :class:`SnowRequests` is the only place the engine retries a ServiceNow request:
table and slice pages, counts and the clock probe (``engine.reader``), dictionary reads and
existence re-checks (``engine.streams``), audit and journal pages (their streams' readers), the
key sweep's pages, re-checks and audit lookups (``engine.reconcile``). One loop does it:

- the error class decides: a ``RetriableError`` is retried until it works or stop is requested;
  anything else (``TableError``, ``AuthError``...) is the caller's, and fails the stream;
- the wait is the policy's full-jitter backoff, or what a 429's ``Retry-After`` asked for (the
  client already holds every request of the process until then, ``runtime.pause``);
- each retry is one WARN line bound to the stream, counted in ``RETRIES`` (a 429's wait also in
  ``THROTTLED_SECONDS``) and in the stream's failure tracker, whose run a success ends;
- stop requested: ``StoppedError``.

Callers say only what differs: what they ask for (the log line), the priority in the session
pool and rate budget, and, for a table's pages, the ``PageSizer`` that "maximum execution time
exceeded" halves before asking again at once.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from snowsource.core.errors import ExecutionTimeExceededError, RateLimitedError, RetriableError
from snowsource.core.grants import Priority
from snowsource.core.retry import PageSizer, RetryPolicy
from snowsource.core.tableapi import Page
from snowsource.engine.failures import FailureSource, FailureTracker
from snowsource.engine.ports import DocumentSource, PageSource, SharedSource
from snowsource.observability import metrics
from snowsource.runtime.retrying import Attempt, StoppedError, retrying

Params = Mapping[str, str]
Log = structlog.typing.FilteringBoundLogger


def is_retriable(error: BaseException) -> bool:
    """The one rule of the engine's ServiceNow retries: the error class says."""
    return isinstance(error, RetriableError)


class SnowRequests:
    """One stream's ServiceNow requests (``alias`` labels them in the pool, logs and metrics)."""

    def __init__(
        self,
        client: PageSource,
        *,
        alias: str,
        retry: RetryPolicy,
        stop: asyncio.Event,
        log: Log | None = None,
        failures: FailureTracker | None = None,
    ) -> None:
        self.alias = alias
        self._client = client
        self._retry = retry
        self._stop = stop
        self._log = log or structlog.get_logger("snowsource.engine.requests").bind(table=alias)
        self._failures = failures

    def contended(self) -> bool:
        """Whether the instance's request slots (of every stream) are all busy now."""
        client = self._client
        return isinstance(client, SharedSource) and client.saturated()

    async def get(
        self,
        table: str,
        params: Params,
        *,
        priority: Priority,
        asking: str,
        shrinks: bool = False,
    ) -> Page:
        """The answer to ``params`` on ``table``, retried as the module says. ``asking``
        names the request in the WARN line of a retry ("a key page"). ``shrinks``: the caller
        asks a page too expensive for the instance again at a smaller size itself, so that
        error reaches it instead of being retried unchanged (which fails the same way)."""
        return await self._retried(table, lambda: params, priority, asking, None, shrinks=shrinks)

    async def sized(
        self,
        table: str,
        params: Callable[[int], Params],
        sizer: PageSizer,
        *,
        priority: Priority,
        asking: str,
    ) -> tuple[Page, int]:
        """A page asked for with ``params(sizer.size)``, and the size it was asked with: a page
        too expensive for the instance is asked again at once at half the size."""
        limits: list[int] = []

        def ask() -> Params:
            limits.append(sizer.size)
            return params(limits[-1])

        page = await self._retried(table, ask, priority, asking, sizer)
        return page, limits[-1]

    async def once(self, table: str, params: Params, *, priority: Priority) -> Page | None:
        """One attempt, for a probe that only a refusal makes worth sending: a retriable error
        gives None (the stream's own requests retry it); any other error is raised."""
        try:
            return await self._client.get_page(table, params, label=self.alias, priority=priority)
        except RetriableError:
            return None

    async def document(self, path: str, params: Params, *, priority: Priority) -> Any:
        """A JSON document (the Aggregate API's count), one attempt: errors reach the caller,
        for whom it is a hint that may be missing."""
        client = self._client
        if not isinstance(client, DocumentSource):
            raise TypeError("this page source answers no JSON documents")
        return await client.get_json(path, params, requester=self.alias, priority=priority)

    def getter(self, asking: str) -> RetriedGetter:
        """This path as a plain page source (``get_page``), for code written against a client
        (the dictionary walk): each of its requests retried here."""
        return RetriedGetter(self, asking)

    async def _retried(
        self,
        table: str,
        ask: Callable[[], Params],
        priority: Priority,
        asking: str,
        sizer: PageSizer | None,
        *,
        shrinks: bool = False,
    ) -> Page:
        def retry_if(error: BaseException) -> bool:
            return is_retriable(error) and not (
                shrinks and isinstance(error, ExecutionTimeExceededError)
            )

        async for attempt in retrying(
            self._retry,
            self._stop,
            retry_if=retry_if,
            on_retry=functools.partial(self._retrying, asking, sizer),
        ):
            with attempt:
                page = await self._send(table, ask, priority, sizer)
                if sizer is not None:
                    sizer.success()
                if self._failures is not None:
                    self._failures.succeeded(FailureSource.SERVICENOW)
                return page
        raise StoppedError("stop requested")  # pragma: no cover - retrying raises first

    async def _send(
        self,
        table: str,
        ask: Callable[[], Params],
        priority: Priority,
        sizer: PageSizer | None,
    ) -> Page:
        """One request; with a sizer, a page too expensive is asked again at half the size."""
        while True:
            try:
                return await self._client.get_page(
                    table, ask(), label=self.alias, priority=priority
                )
            except ExecutionTimeExceededError as exc:
                if sizer is None or not sizer.shrink():
                    raise
                self._log.warning(
                    "page too expensive for the instance; halving the page size",
                    page_size=sizer.size,
                    error=str(exc),
                )
                metrics.RETRIES.labels(table=self.alias).inc()
                if self._failures is not None:
                    self._failures.failed(FailureSource.SERVICENOW, str(exc))

    def _retrying(
        self, asking: str, sizer: PageSizer | None, attempt: Attempt, delay: float
    ) -> None:
        error = attempt.error
        if sizer is not None:
            sizer.failure()
        if isinstance(error, RateLimitedError):
            metrics.THROTTLED_SECONDS.labels(table=self.alias).inc(delay)
        metrics.RETRIES.labels(table=self.alias).inc()
        if self._failures is not None:
            self._failures.failed(FailureSource.SERVICENOW, str(error))
        self._log.warning(
            "ServiceNow request failed; retrying",
            asking=asking,
            error=str(error),
            status=getattr(error, "status", None),
            attempt=attempt.number + 1,
            retry_in=round(delay, 2),
        )


class RetriedGetter:
    """``SnowRequests.getter``: ``get_page`` through the one retry loop."""

    def __init__(self, requests: SnowRequests, asking: str) -> None:
        self._requests = requests
        self._asking = asking

    async def get_page(
        self,
        table: str,
        params: Params,
        *,
        label: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page:
        """``label`` is the path's own (the stream's alias): whose requests these are."""
        del label
        # The dictionary walk halves a page too expensive for the instance itself.
        return await self._requests.get(
            table, params, priority=priority, asking=self._asking, shrinks=True
        )
