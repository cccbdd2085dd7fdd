"""Rebuilding the dedup cache at every generation start (window, cap, errors, internal restart).

The output topic is played by a fake that answers from what the fake sink was sent, so these
tests control what "already in Kafka" means; reading a real topic is tested in
``tests/integration/test_topic_tail.py`` and ``test_restart_dedup.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError
from pydantic import SecretStr

from snowsource.adapters.kafka import is_retriable
from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.core.clock import InstanceClock
from snowsource.core.dedup import DedupCache, EmittedRecord, TailResult, digest
from snowsource.core.errors import KafkaSinkError, TableFailedError
from snowsource.core.offsets_codec import SourceOffset
from snowsource.core.retry import RetryPolicy
from snowsource.core.table_status import TableState
from snowsource.emulator import Emulator, serve
from snowsource.engine.poller import Poller
from snowsource.engine.resume import MIN_SCAN, rebuild_dedup, scan_cap
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.retrying import StoppedError
from tests.fakes import FakeSink, FakeStore, make_spec
from tests.polling import poll_until

T0 = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)
LOG = structlog.get_logger("test")


@dataclass
class Call:
    topic: str
    kwargs: dict[str, Any]


@dataclass
class FakeTail:
    """The output topic as the fake sink received it; ``errors`` are raised first, in order."""

    sink: FakeSink | None = None
    records: list[EmittedRecord] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    hang: bool = False
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    complete: bool = True  # False: the scan cap stopped a partition before the window

    def retriable(self, error: BaseException) -> bool:
        return is_retriable(error)  # the adapter's own rule

    async def read_window(
        self,
        topic: str,
        *,
        instance: str,
        table: str,
        since: str,
        slack_floor: str,
        max_scanned: int,
        deletes: bool = False,
        unordered_backfill: bool = False,
    ) -> TailResult:
        del (
            unordered_backfill
        )  # what the real tail does with it: tests/integration/test_topic_tail.py
        self.calls.append(
            Call(
                topic,
                {
                    "instance": instance,
                    "table": table,
                    "since": since,
                    "slack_floor": slack_floor,
                    "max_scanned": max_scanned,
                    "deletes": deletes,
                },
            )
        )
        self.entered.set()
        if self.hang:
            await asyncio.Event().wait()
        if self.errors:
            raise self.errors.pop(0)
        found = list(self.records)
        for sent in self.sink.sent if self.sink else []:
            ts = sent.headers["snow.timestamp"].decode()
            if (
                sent.topic == topic
                and sent.future.done()
                and sent.headers["snow.table"] == table.encode()
                and ts >= since
            ):
                found.append(EmittedRecord(sent.key.decode(), ts, digest(sent.value)))
        return TailResult(found, len(found), self.complete)


def _offset(ts: str, sys_id: str = "") -> SourceOffset:
    spec = make_spec()
    return SourceOffset(ts, sys_id, "stream", spec.partition.query_fingerprint)


async def _rebuild(
    tail: FakeTail,
    committed: SourceOffset | None,
    cache: DedupCache,
    *,
    required: bool = False,
    stop: asyncio.Event | None = None,
    written_ms: int | None = None,
    moved_back: bool = False,
    **spec: Any,
) -> None:
    await rebuild_dedup(
        make_spec(**spec),
        tail,
        committed,
        cache,
        written_ms=written_ms,
        moved_back=moved_back,
        stop=stop or asyncio.Event(),
        retry=RetryPolicy(0.001, 0.002),
        required=required,
        log=LOG,
    )


async def test_the_window_is_the_first_sweeps_start_and_the_floor_one_overlap_below() -> None:
    tail = FakeTail(records=[EmittedRecord("a" * 32, "2026-09-29 07:00:00", b"d" * 16)])
    cache = DedupCache(1000)
    await _rebuild(tail, _offset("2026-09-29 07:00:30", "b" * 32), cache, overlap_seconds=20)
    (call,) = tail.calls
    assert call.kwargs["since"] == "2026-09-29 07:00:10"
    assert call.kwargs["slack_floor"] == "2026-09-29 06:59:50"
    assert call.kwargs["table"] == "incident"
    assert call.kwargs["max_scanned"] == MIN_SCAN
    assert not cache.should_emit("a" * 32, "2026-09-29 07:00:00", b"d" * 16)


async def test_overlap_zero_reads_from_the_committed_second_itself() -> None:
    tail = FakeTail()
    await _rebuild(tail, _offset("2026-09-29 07:00:30", "b" * 32), DedupCache(5), overlap_seconds=0)
    assert tail.calls[0].kwargs["since"] == "2026-09-29 07:00:30"
    assert tail.calls[0].kwargs["slack_floor"] == "2026-09-29 07:00:30"


def test_the_scan_cap_follows_the_cache_size() -> None:
    assert scan_cap(200_000) == 800_000
    assert scan_cap(10) == MIN_SCAN


async def test_no_committed_offset_or_no_cache_reads_nothing() -> None:
    tail = FakeTail()
    await _rebuild(tail, None, DedupCache(10))
    await _rebuild(tail, _offset("2026-09-29 07:00:30"), DedupCache(0))
    assert tail.calls == []


async def test_later_records_of_an_id_win_and_a_cap_evicts_the_oldest() -> None:
    ts = "2026-09-29 07:00:0"
    records = [EmittedRecord(f"id{i}", f"{ts}{i}", bytes([i]) * 16) for i in range(5)]
    records.append(EmittedRecord("id0", f"{ts}5", b"n" * 16))  # a newer version of id0
    cache = DedupCache(3)
    await _rebuild(FakeTail(records=records), _offset(f"{ts}9"), cache, overlap_seconds=30)
    assert len(cache) == 3
    assert not cache.should_emit("id0", f"{ts}5", b"n" * 16)
    assert cache.should_emit("id0", f"{ts}0", bytes([0]) * 16)
    assert not cache.contains("id1")  # the oldest went first
    assert cache.evictions_by_cap == 3


def _record(id_: str, second: int, produced_ms: int) -> EmittedRecord:
    return EmittedRecord(id_, f"2026-09-29 07:00:{second:02d}", id_.encode() * 16, produced_ms)


async def test_a_rewound_range_is_not_remembered_but_a_crashs_leftovers_are() -> None:
    below = _record("a", 10, 1_000)
    own = _record("b", 20, 1_000)  # the row the committed offset points at
    after = _record("c", 25, 1_005)  # same page, acknowledged after the offset write
    later = _record("d", 26, 45_000)  # produced after the offset was written
    tail = FakeTail(records=[below, own, after, later])
    committed = _offset(own.ts, "b")

    def rebuilt() -> set[str]:
        return {r.id for r in tail.records if cache.contains(r.id)}

    # The daemon's own commit, 4 ms after producing its row: everything is already in Kafka.
    cache = DedupCache(10)
    await _rebuild(tail, committed, cache, overlap_seconds=30, written_ms=1_004)
    assert rebuilt() == {"a", "b", "c", "d"}
    # The same offset written an hour later (offsets set): the range after it is re-emitted,
    # except what a daemon produced after that write.
    cache = DedupCache(10)
    await _rebuild(tail, committed, cache, overlap_seconds=30, written_ms=3_601_000)
    assert rebuilt() == {"a", "b"}
    cache = DedupCache(10)
    await _rebuild(tail, committed, cache, overlap_seconds=30, written_ms=40_000)
    assert rebuilt() == {"a", "b", "d"}
    # Set back to that row right after the run (PATCH, then resume): the stored cursor moved
    # back, so the range after it is emitted again however soon.
    cache = DedupCache(10)
    await _rebuild(tail, committed, cache, overlap_seconds=30, written_ms=1_010, moved_back=True)
    assert rebuilt() == {"a", "b", "d"}
    # A rewind (empty id) points at no row: only what lies below it is remembered.
    cache = DedupCache(10)
    await _rebuild(tail, _offset(own.ts), cache, overlap_seconds=30, written_ms=3_601_000)
    assert rebuilt() == {"a"}


async def test_transient_errors_are_retried() -> None:
    tail = FakeTail(errors=[KafkaConnectionError("down"), KafkaConnectionError("down")])
    tail.records.append(EmittedRecord("x", "2026-09-29 07:00:30", b"1" * 16))
    cache = DedupCache(10)
    await _rebuild(tail, _offset("2026-09-29 07:00:31"), cache)
    assert len(tail.calls) == 3
    assert cache.contains("x")


async def test_a_refused_read_warns_at_least_once_and_fails_exactly_once() -> None:
    committed = _offset("2026-09-29 07:00:30")
    cache = DedupCache(10)
    with structlog.testing.capture_logs() as logs:
        await _rebuild(FakeTail(errors=[TopicAuthorizationFailedError()]), committed, cache)
    assert len(cache) == 0
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert "Read" in warning["event"]
    assert warning["topic"] == make_spec().topic
    with pytest.raises(KafkaSinkError, match="grant this principal Read"):
        await _rebuild(
            FakeTail(errors=[TopicAuthorizationFailedError()]), committed, cache, required=True
        )


async def test_a_rebuild_cut_short_by_the_scan_cap_fails_only_exactly_once() -> None:
    """Issue 23 item 3: a partial cache was a WARN even where exactly-once depends on it."""
    committed = _offset("2026-09-29 07:00:30")
    record = EmittedRecord("x", "2026-09-29 07:00:20", b"1" * 16)
    cache = DedupCache(10)
    await _rebuild(FakeTail(records=[record], complete=False), committed, cache)
    assert cache.contains("x")  # at least once: what was read still suppresses repeats
    with pytest.raises(TableFailedError, match=r"Raise dedup\.max\.entries"):
        await _rebuild(
            FakeTail(records=[record], complete=False), committed, DedupCache(10), required=True
        )
    await _rebuild(FakeTail(records=[record]), committed, DedupCache(10), required=True)


async def test_stop_abandons_a_rebuild_that_hangs() -> None:
    stop = asyncio.Event()
    tail = FakeTail(hang=True)
    task = asyncio.create_task(
        _rebuild(tail, _offset("2026-09-29 07:00:30"), DedupCache(5), stop=stop)
    )
    await tail.entered.wait()
    stop.set()
    with pytest.raises(StoppedError):
        await asyncio.wait_for(task, 2)


# ----------------------------------------------------------------- in the poller


@pytest.fixture
async def emu_client() -> AsyncIterator[tuple[Emulator, ServiceNowClient, str]]:
    emu = Emulator(seed=3, now=T0)
    emu.clock.follow_wall_clock(True)
    async with (
        serve(emu) as url,
        ServiceNowClient(url, BasicAuth("admin", SecretStr("admin"))) as client,
    ):
        yield emu, client, url


async def test_an_internal_restart_rebuilds_the_cache_and_re_emits_nothing(
    emu_client: tuple[Emulator, ServiceNowClient, str],
) -> None:
    emu, client, url = emu_client
    base = emu.clock.now() - timedelta(minutes=5)
    for second in range(4):
        emu.burst("incident", 5, at=base + timedelta(seconds=second))
    sink, store = FakeSink(), FakeStore()
    tail = FakeTail(sink=sink)
    spec = make_spec("incident", snow_url=url, overlap_seconds=10)
    stop = StopSignal()
    poller = Poller(
        spec,
        client=client,
        sink=sink,
        store=store,
        clock=InstanceClock(),
        retry=RetryPolicy(0.01, 0.05),
        stop=stop,
        tail=tail,
    )
    task = asyncio.create_task(poller.run())
    status = poller.status
    await poll_until(lambda: status.caught_up and store.get(spec.partition) is not None)
    assert tail.calls == []  # the first start had no committed offset
    assert len(sink.sent) == 20

    # A retriable produce failure: the generation ends and the next one starts afresh.
    pages = sink.pages
    sink.refuse = KafkaConnectionError("broker gone")
    new = emu.insert("incident", {"short_description": "after"})
    await poll_until(lambda: sink.pages > pages)
    sink.refuse = None
    await poll_until(lambda: any(r.key == new["sys_id"].encode() for r in sink.sent))
    await poll_until(lambda: status.caught_up)
    assert tail.calls, "the restarted generation did not rebuild its cache"
    stop.request(Deadline.after(5))
    await asyncio.wait_for(task, 7)
    assert status.state == TableState.STOPPED
    # The overlap window (every burst) was re-read and suppressed: only the new row is new.
    assert [r.key for r in sink.sent[20:]] == [new["sys_id"].encode()]
    assert status.rows_suppressed >= 20
