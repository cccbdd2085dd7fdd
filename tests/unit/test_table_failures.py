"""Retried errors are visible in a table's status until what failed works again.

The tracker's rules on their own, then the poller against the in-process emulator (its fault
injection) and the in-memory fakes of the project's own sink and offsets store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka.errors import KafkaConnectionError

from snowsource.core.table_status import TableState, TableStatus
from snowsource.engine import failures
from snowsource.engine.failures import FailureSource, FailureTracker, failing_seconds
from snowsource.observability import metrics
from snowsource.observability.redact import register_secret
from snowsource.runtime.deadline import StopSignal
from tests.polling import poll_until
from tests.unit.test_poller import Running, World
from tests.unit.test_poller import world as world  # noqa: PLC0414 - the fixture, re-exported

T0 = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def gauge(alias: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "snowsource_table_consecutive_failures", {"table": alias}
    )


def failing(status: TableStatus) -> tuple[int, datetime | None, str | None]:
    return status.consecutive_failures, status.failing_since, status.last_error


def test_a_run_counts_until_the_same_source_succeeds() -> None:
    status, clock = TableStatus(), Clock()
    tracker = FailureTracker(status, "t-run", now=clock)
    assert gauge("t-run") == 0
    tracker.failed(FailureSource.SERVICENOW, "GET x: cannot connect to h:1 (Connection refused)")
    clock.now = T0 + timedelta(seconds=5)
    tracker.failed(FailureSource.SERVICENOW, "GET x: HTTP 503")
    assert status.consecutive_failures == 2
    assert status.failing_since == T0
    assert status.last_error == "GET x: HTTP 503"
    assert gauge("t-run") == 2
    assert failing_seconds(status, T0 + timedelta(seconds=30)) == 30

    tracker.succeeded(FailureSource.KAFKA)  # another source working says nothing of this one
    assert status.consecutive_failures == 2
    tracker.succeeded(FailureSource.SERVICENOW)
    assert failing(status) == (0, None, None)
    assert failing_seconds(status) is None
    assert gauge("t-run") == 0


def test_runs_of_different_sources_add_up_and_end_separately() -> None:
    status, clock = TableStatus(), Clock()
    tracker = FailureTracker(status, "t-two", now=clock)
    tracker.failed(FailureSource.OFFSETS, "offsets topic write failed")
    clock.now = T0 + timedelta(seconds=10)
    tracker.failed(FailureSource.KAFKA, "produce failed")
    assert status.consecutive_failures == 2
    assert status.failing_since == T0  # the oldest run still going
    assert status.last_error == "produce failed"  # the newest error
    tracker.succeeded(FailureSource.KAFKA)
    assert status.consecutive_failures == 1
    assert status.failing_since == T0
    assert status.last_error == "offsets topic write failed"


def test_a_fatal_error_counts_once_more_and_freezes_the_status() -> None:
    status, clock = TableStatus(), Clock()
    tracker = FailureTracker(status, "t-fatal", now=clock)
    tracker.failed(FailureSource.SERVICENOW, "HTTP 503")
    clock.now = T0 + timedelta(seconds=3)
    tracker.fatal("HTTP 403: the user may not read incident")
    assert status.consecutive_failures == 2
    assert status.failing_since == T0
    assert status.last_error == "HTTP 403: the user may not read incident"
    tracker.succeeded(FailureSource.SERVICENOW)
    tracker.failed(FailureSource.KAFKA, "late")
    assert status.consecutive_failures == 2
    assert status.last_error == "HTTP 403: the user may not read incident"

    fresh = TableStatus()
    FailureTracker(fresh, "t-fatal2", now=clock).fatal("topic missing")
    assert (fresh.consecutive_failures, fresh.failing_since) == (1, clock.now)


def test_errors_are_redacted_before_they_are_shown() -> None:
    secret = "Tracker-Secret-71c2"
    register_secret(secret)
    status = TableStatus()
    tracker = FailureTracker(status, "t-redact")
    tracker.failed(FailureSource.SERVICENOW, f"HTTP 500: the server echoed {secret}")
    assert status.last_error is not None
    assert secret not in status.last_error
    assert "the server echoed" in status.last_error
    tracker.fatal(f"refused: {secret}")
    assert secret not in (status.last_error or "")


# ------------------------------------------------------------------ the poller


@pytest.fixture
async def quick(world: World) -> AsyncIterator[World]:
    world.emu.seed(tables=("incident",), rows=5)
    yield world
    world.emu.faults.clear()


async def test_an_instance_answering_503_shows_in_the_status_and_clears(quick: World) -> None:
    quick.emu.faults.add(status=503, times=None, table="incident")
    running = Running(quick.poller(quick.spec(), StopSignal()))
    status = running.poller.status
    # The very first request (the instance-clock probe) fails: STARTING, but not silent.
    await poll_until(lambda: status.consecutive_failures >= 3)
    assert status.state == TableState.STARTING
    assert "503" in (status.last_error or "")
    assert status.failing_since is not None
    began = status.failing_since
    await poll_until(lambda: status.consecutive_failures >= 4)
    assert status.failing_since == began  # one run: it began at the first failure

    quick.emu.faults.clear()
    await poll_until(lambda: status.caught_up)
    assert failing(status) == (0, None, None)
    assert gauge("incident") == 0
    await running.finish()


async def test_produce_failures_count_across_internal_restarts_until_a_page_is_acked(
    quick: World,
) -> None:
    running = Running(quick.poller(quick.spec(), StopSignal()))
    status = running.poller.status
    await poll_until(lambda: status.caught_up)
    quick.sink.refuse = KafkaConnectionError("broker gone")
    quick.emu.insert("incident", {"short_description": "during the outage"})
    # Each failure restarts the table, whose page reads succeed: the count still grows.
    await poll_until(lambda: status.consecutive_failures >= 3)
    assert "broker gone" in (status.last_error or "")
    assert "producing to topic snow.incident failed" in (status.last_error or "")
    assert status.state == TableState.RUNNING
    assert (gauge("incident") or 0) >= 3

    quick.sink.refuse = None
    await poll_until(lambda: status.consecutive_failures == 0)
    assert status.failing_since is None
    assert status.last_error is None
    await running.finish()


async def test_offset_write_failures_show_while_records_still_go_out(quick: World) -> None:
    failing = True

    def on_write(key: bytes, value: bytes | None) -> None:
        if failing:
            raise KafkaConnectionError("offsets topic unreachable")

    quick.store.on_write = on_write
    running = Running(quick.poller(quick.spec(), StopSignal()))
    status = running.poller.status
    await poll_until(lambda: status.consecutive_failures >= 2)
    assert "offsets topic" in (status.last_error or "")
    assert len(quick.sink.sent) == 5  # produce works; only the offset cannot be written
    failing = False
    await poll_until(lambda: status.consecutive_failures == 0 and status.committed is not None)
    assert status.last_error is None
    await running.finish()


@pytest.mark.parametrize("slices", [1, 4])
async def test_records_kafka_does_not_acknowledge_count_until_they_are(
    quick: World, monkeypatch: pytest.MonkeyPatch, slices: int
) -> None:
    monkeypatch.setattr(failures, "ACKS_OVERDUE_SECONDS", 0.05)
    quick.sink.auto_ack = False
    running = Running(quick.poller(quick.spec(backfill_slices=slices), StopSignal()))
    status = running.poller.status
    # aiokafka keeps records waiting while no broker answers: the wait itself is the failure
    # (a sliced backfill's pages too: one page of a range, of up to 5 records).
    await poll_until(lambda: status.consecutive_failures >= 2)
    waiting = " record(s) for topic snow.incident" if slices > 1 else " 5 record(s) for topic"
    assert "Kafka has not acknowledged a page of" in (status.last_error or "")
    assert waiting in (status.last_error or "")
    assert status.state == TableState.RUNNING
    quick.sink.auto_ack = True  # the broker is back: the waiting page and every later one
    quick.sink.ack_all()
    await poll_until(lambda: status.caught_up)
    assert failing(status) == (0, None, None)
    await running.finish()
