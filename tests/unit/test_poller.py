"""The poller's own logic against in-memory fakes of its sink and offsets store.

ServiceNow is the in-package emulator served in-process; Kafka is replaced by the fakes of
``tests.fakes`` (the project's own ports), so these tests control exactly when acks arrive and
when an offset write fails. Kafka behaviour itself is tested in ``tests/integration``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from aiokafka.errors import KafkaConnectionError
from pydantic import SecretStr

from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.core.clock import InstanceClock
from snowsource.core.offsets_codec import SourceOffset, decode_value, encode_key, encode_value
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState
from snowsource.emulator import Emulator, serve
from snowsource.engine.poller import Poller
from snowsource.runtime.deadline import Deadline, StopSignal
from tests.fakes import CONNECTOR, FakeSink, FakeStore, make_spec
from tests.polling import poll_until

T0 = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)


@dataclass
class World:
    emu: Emulator
    client: ServiceNowClient
    sink: FakeSink
    store: FakeStore
    url: str

    def spec(self, **overrides: Any) -> TableSpec:
        return make_spec("incident", snow_url=self.url, **overrides)

    def poller(self, spec: TableSpec, stop: StopSignal) -> Poller:
        return Poller(
            spec,
            client=self.client,
            sink=self.sink,
            store=self.store,
            clock=InstanceClock(),
            retry=RetryPolicy(0.01, 0.05),
            stop=stop,
        )


@pytest.fixture
async def world() -> AsyncIterator[World]:
    emu = Emulator(seed=5, now=T0)
    emu.clock.follow_wall_clock(True)
    async with (
        serve(emu) as url,
        ServiceNowClient(url, BasicAuth("admin", SecretStr("admin"))) as client,
    ):
        yield World(emu, client, FakeSink(), FakeStore(), url)


class Running:
    """A poller task with its stop signal."""

    def __init__(self, poller: Poller) -> None:
        self.poller = poller
        self.stop = poller._stop
        self.task = asyncio.create_task(poller.run(), name="test-poller")

    async def finish(self, seconds: float = 5) -> float:
        began = time.monotonic()
        self.stop.request(Deadline.after(seconds))
        await asyncio.wait_for(self.task, seconds + 2)
        return time.monotonic() - began


def committed(store: FakeStore, spec: TableSpec) -> dict[str, Any] | None:
    raw = store.get(spec.partition)
    if raw is None:
        return None
    value = decode_value(raw)
    assert isinstance(value, dict)
    return value


def committer_task() -> asyncio.Task[Any]:
    return next(t for t in asyncio.all_tasks() if t.get_name() == "committer:incident")


async def test_offsets_are_written_only_after_acks_with_one_page_unacknowledged(
    world: World,
) -> None:
    world.emu.seed(tables=("incident",), rows=60)
    world.sink.auto_ack = False
    spec = world.spec(batch_size=20)
    running = Running(world.poller(spec, StopSignal()))
    await poll_until(lambda: len(world.sink.sent) >= 20)
    # The first page is sent and unacknowledged: nothing may be committed yet, and the poller
    # does not hand the next page to the producer before this one is acknowledged.
    assert world.store.writes == []
    assert len(world.sink.sent) == 20
    last_of_page = world.sink.sent[-1]
    world.sink.ack_all()
    await poll_until(lambda: committed(world.store, spec) is not None)
    offset = committed(world.store, spec)
    assert offset is not None
    assert offset["sys_id"] == last_of_page.key.decode()
    while not running.poller.status.caught_up:
        world.sink.ack_all()
        await asyncio.sleep(0.01)
    assert world.sink.max_unacked <= 20
    assert len({r.key for r in world.sink.sent}) == 60
    await running.finish()
    assert running.poller.status.state == TableState.STOPPED


async def test_a_committer_that_dies_fails_its_quiet_table_within_a_second(world: World) -> None:
    world.emu.seed(tables=("incident",), rows=5)
    spec = world.spec()
    running = Running(world.poller(spec, StopSignal()))
    await poll_until(lambda: running.poller.status.caught_up)
    died_at: list[float] = []

    def broken(key: bytes, value: bytes | None) -> None:
        died_at.append(time.monotonic())
        raise RuntimeError("offsets store bug")

    world.store.on_write = broken
    world.emu.insert("incident", {"short_description": "one more"})
    await poll_until(lambda: bool(died_at))
    # The table goes quiet after this row: only the committer's death can end it.
    began = time.monotonic()
    await poll_until(lambda: running.poller.status.state == TableState.FAILED, timeout=5)
    waited = time.monotonic() - began
    assert waited < 1.0
    assert "offsets store bug" in (running.poller.status.last_error or "")
    await asyncio.wait_for(running.task, 2)


async def test_a_cancelled_committer_never_ends_the_poller_silently(world: World) -> None:
    world.emu.seed(tables=("incident",), rows=5)
    running = Running(world.poller(world.spec(), StopSignal()))
    await poll_until(lambda: running.poller.status.caught_up)
    committer_task().cancel()
    began = time.monotonic()
    await poll_until(lambda: running.poller.status.state == TableState.FAILED, timeout=5)
    waited = time.monotonic() - began
    assert waited < 1.0
    assert "committer was cancelled" in (running.poller.status.last_error or "")
    await asyncio.wait_for(running.task, 2)


async def test_a_transient_kafka_error_while_migrating_an_offset_is_retried(world: World) -> None:
    rows = [world.emu.insert("incident", {"short_description": f"r{i}"}) for i in range(3)]
    spec = world.spec()
    first = sorted(rows, key=lambda r: (r["sys_updated_on"], r["sys_id"]))[0]
    stored = SourceOffset(
        timestamp=first["sys_updated_on"],
        sys_id=first["sys_id"],
        phase="backfill",
        fingerprint=spec.partition.query_fingerprint,
    )
    # The same partition under another key spelling (keys in reverse order).
    foreign = orjson.dumps([CONNECTOR, dict(reversed(list(spec.partition.as_dict().items())))])
    assert foreign != encode_key(CONNECTOR, spec.partition)
    value = encode_value(stored)
    assert value is not None
    world.store.data[foreign] = value
    failures = [KafkaConnectionError("broker restarting"), KafkaConnectionError("still")]

    def flaky(key: bytes, value: bytes | None) -> None:
        if failures:
            raise failures.pop(0)

    world.store.on_write = flaky
    running = Running(world.poller(spec, StopSignal()))
    await poll_until(lambda: running.poller.status.caught_up)
    assert running.poller.status.state == TableState.RUNNING
    assert failures == []
    assert foreign not in world.store.data, "the foreign spelling is tombstoned"
    resumed = committed(world.store, spec)
    assert resumed is not None
    # Resumed after the migrated offset: the first row is not emitted again (overlap 0).
    assert first["sys_id"].encode() not in {r.key for r in world.sink.sent}
    await running.finish()


async def test_stop_with_acks_that_never_come_ends_at_the_deadline(world: World) -> None:
    world.emu.seed(tables=("incident",), rows=30)
    world.sink.auto_ack = False
    running = Running(world.poller(world.spec(batch_size=10), StopSignal()))
    await poll_until(lambda: len(world.sink.unacked) == 10)
    took = await running.finish(seconds=0.3)
    assert took < 1.5
    status = running.poller.status
    assert status.state == TableState.STOPPED
    assert status.unfinished is not None
    assert "10 record(s) unacknowledged" in status.unfinished
    assert world.store.writes == []


async def test_offset_writes_that_keep_failing_end_at_the_stop_deadline(world: World) -> None:
    world.emu.seed(tables=("incident",), rows=10)
    spec = world.spec()
    world.store.on_write = lambda key, value: (_ for _ in ()).throw(
        KafkaConnectionError("offsets topic unreachable")
    )
    running = Running(world.poller(spec, StopSignal()))
    await poll_until(lambda: len(world.sink.sent) == 10)
    took = await running.finish(seconds=0.5)
    assert took < 2
    assert running.poller.status.unfinished is not None
    assert committed(world.store, spec) is None


async def test_an_internal_restart_resets_the_table_status(world: World) -> None:
    world.emu.seed(tables=("incident",), rows=5)
    spec = world.spec()
    running = Running(world.poller(spec, StopSignal()))
    status = running.poller.status
    await poll_until(lambda: status.caught_up and status.lag_seconds is not None)
    world.emu.latency_ms = 300  # the restarted generation's first page takes a while

    world.sink.refuse = KafkaConnectionError("broker gone")
    world.emu.insert("incident", {"short_description": "after"})
    await poll_until(lambda: status.last_error is not None and "broker gone" in status.last_error)
    await poll_until(lambda: status.state == TableState.RUNNING and not status.caught_up)
    assert status.lag_seconds is None
    await running.finish()


async def test_a_final_offset_write_out_of_time_stops_the_table_and_is_reported(
    world: World,
) -> None:
    world.emu.seed(tables=("incident",), rows=10)
    world.sink.auto_ack = False
    spec = world.spec()
    world.store.on_write = lambda key, value: (_ for _ in ()).throw(
        KafkaConnectionError("offsets topic unreachable")
    )
    running = Running(world.poller(spec, StopSignal()))
    await poll_until(lambda: len(world.sink.unacked) == 10)
    # The acks arrive only after stop was requested: the final write gets the stop's deadline.
    running.stop.request(Deadline.after(0.5))
    world.sink.ack_all()
    await asyncio.wait_for(running.task, 3)
    status = running.poller.status
    assert status.state == TableState.STOPPED, status.last_error
    assert status.unfinished is not None
    # Which of the two the report names depends on whether the deadline passed during a
    # retry's backoff or while an attempt was outstanding; either way nothing was committed.
    assert (
        "offset write failed" in status.unfinished
        or "offsets topic write still pending" in status.unfinished
    )
    assert committed(world.store, spec) is None
