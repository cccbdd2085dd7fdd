"""engine.snow_requests: the one request path of the engine, against a scripted page source.

What every ServiceNow request of the engine gets from it: retriable errors retried with a WARN
line naming what was asked, a 429's ``Retry-After`` obeyed and counted as throttled time, fatal
errors raised at once, the failure tracker's run ended by a success, stop obeyed, and a page too
expensive for the instance asked again at half the size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from structlog.testing import capture_logs

from snowsource.core.errors import (
    ExecutionTimeExceededError,
    RateLimitedError,
    RetriableError,
    TableError,
)
from snowsource.core.grants import Priority
from snowsource.core.retry import PageSizer, RetryPolicy
from snowsource.core.table_status import TableStatus
from snowsource.core.tableapi import Page
from snowsource.engine.failures import FailureTracker
from snowsource.engine.snow_requests import SnowRequests
from snowsource.observability import metrics
from snowsource.runtime.retrying import StoppedError
from tests.polling import poll_until

ALIAS = "snowreq"
FAST = RetryPolicy(0.001, 0.002)


@dataclass
class Scripted:
    """Answers each request with the next scripted error, then with a page."""

    errors: list[Exception] = field(default_factory=list)
    calls: list[tuple[str, dict[str, str], str | None, Priority]] = field(default_factory=list)

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page:
        self.calls.append((table, dict(params), label, priority))
        if self.errors:
            raise self.errors.pop(0)
        return Page(rows=[{"sys_id": "a"}], status=200, date=None, total_count=None, elapsed=0.0)


def _metric(name: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, {"table": ALIAS}) or 0.0


def _path(
    source: Scripted, *, stop: asyncio.Event | None = None
) -> tuple[SnowRequests, TableStatus]:
    status = TableStatus()
    requests = SnowRequests(
        source,
        alias=ALIAS,
        retry=FAST,
        stop=stop or asyncio.Event(),
        failures=FailureTracker(status, ALIAS),
    )
    return requests, status


async def test_retriable_errors_are_retried_each_with_a_warn_line_until_it_works() -> None:
    source = Scripted([RetriableError("HTTP 503: busy", status=503)] * 2)
    requests, status = _path(source)
    retries = _metric("snowsource_retries_total")
    with capture_logs() as logs:
        page = await requests.get(
            "incident", {"q": "1"}, priority=Priority.DERIVED, asking="a thing"
        )
    assert page.rows == [{"sys_id": "a"}]
    assert [(c[0], c[2], c[3]) for c in source.calls] == [("incident", ALIAS, Priority.DERIVED)] * 3
    warns = [line for line in logs if line["log_level"] == "warning"]
    assert [(w["event"], w["asking"], w["status"], w["attempt"]) for w in warns] == [
        ("ServiceNow request failed; retrying", "a thing", 503, 1),
        ("ServiceNow request failed; retrying", "a thing", 503, 2),
    ]
    assert _metric("snowsource_retries_total") == retries + 2
    assert (status.consecutive_failures, status.last_error) == (0, None), "the run ended"


async def test_a_failing_request_shows_in_the_status_while_it_is_retried() -> None:
    source = Scripted([RetriableError("HTTP 502: gateway", status=502)] * 1000)
    stop = asyncio.Event()
    requests, status = _path(source, stop=stop)
    task = asyncio.create_task(requests.get("incident", {}, priority=Priority.STREAM, asking="x"))
    await poll_until(lambda: status.consecutive_failures >= 3, timeout=5, interval=0.001)
    assert status.last_error == "HTTP 502: gateway"
    stop.set()
    with pytest.raises(StoppedError):
        await task


async def test_a_retry_after_is_waited_and_counted_as_throttled_time() -> None:
    source = Scripted([RateLimitedError("HTTP 429", retry_after=0.05)])
    requests, _ = _path(source)
    throttled = _metric("snowsource_throttled_seconds_total")
    loop = asyncio.get_running_loop()
    began = loop.time()
    await requests.get("incident", {}, priority=Priority.STREAM, asking="a page")
    assert loop.time() - began >= 0.05
    assert _metric("snowsource_throttled_seconds_total") == pytest.approx(throttled + 0.05)


async def test_a_fatal_error_is_raised_at_once() -> None:
    source = Scripted([TableError("HTTP 403: no", status=403)])
    requests, _ = _path(source)
    with pytest.raises(TableError):
        await requests.get("incident", {}, priority=Priority.STREAM, asking="a page")
    assert len(source.calls) == 1


async def test_a_page_too_expensive_is_asked_again_at_once_at_half_the_size() -> None:
    expensive = ExecutionTimeExceededError("maximum execution time exceeded", status=500)
    source = Scripted([expensive, expensive])
    requests, _ = _path(source)
    sizer = PageSizer(100)
    retries = _metric("snowsource_retries_total")
    page, limit = await requests.sized(
        "incident",
        lambda size: {"sysparm_limit": str(size)},
        sizer,
        priority=Priority.BACKFILL,
        asking="a page",
    )
    assert page.rows
    assert limit == sizer.size == 25
    assert [c[1]["sysparm_limit"] for c in source.calls] == ["100", "50", "25"]
    assert _metric("snowsource_retries_total") == retries + 2


async def test_at_the_smallest_page_an_expensive_page_is_retried_after_a_backoff() -> None:
    expensive = ExecutionTimeExceededError("maximum execution time exceeded", status=500)
    source = Scripted([expensive])
    requests, _ = _path(source)
    sizer = PageSizer(5)  # at its floor already
    with capture_logs() as logs:
        _, limit = await requests.sized(
            "incident",
            lambda size: {"sysparm_limit": str(size)},
            sizer,
            priority=Priority.STREAM,
            asking="a page",
        )
    assert limit == 5
    assert [line["event"] for line in logs] == ["ServiceNow request failed; retrying"]


async def test_stop_ends_the_retries() -> None:
    source = Scripted([RetriableError("HTTP 503", status=503)] * 1000)
    stop = asyncio.Event()
    requests, _ = _path(source, stop=stop)
    task = asyncio.create_task(requests.get("incident", {}, priority=Priority.STREAM, asking="x"))
    await poll_until(lambda: len(source.calls) >= 2, timeout=5, interval=0.001)
    stop.set()
    with pytest.raises(StoppedError):
        await task


async def test_once_tries_once_and_only_a_refusal_is_raised() -> None:
    source = Scripted([RetriableError("HTTP 503", status=503)])
    requests, _ = _path(source)
    assert await requests.once("incident", {}, priority=Priority.DERIVED) is None
    assert len(source.calls) == 1
    source.errors.append(TableError("HTTP 403", status=403))
    with pytest.raises(TableError):
        await requests.once("incident", {}, priority=Priority.DERIVED)


async def test_a_getter_retries_each_request_at_its_callers_priority() -> None:
    source = Scripted([RetriableError("HTTP 503", status=503)])
    requests, _ = _path(source)
    getter = requests.getter("the table's dictionary")
    with capture_logs() as logs:
        await getter.get_page("sys_dictionary", {}, label="ignored", priority=Priority.DERIVED)
    assert [(c[2], c[3]) for c in source.calls] == [(ALIAS, Priority.DERIVED)] * 2
    assert logs[0]["asking"] == "the table's dictionary"
