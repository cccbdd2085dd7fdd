"""Rebuilding a table's dedup cache from its output topic (restarts without duplicates)."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import AIOKafkaProducer

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.topic_tail import read_window
from snowsource.core.dedup import EmittedRecord, digest
from tests.conftest import TopicFactory

INSTANCE = "acme.service-now.com"


def _headers(table: str, ts: str, instance: str = INSTANCE) -> list[tuple[str, bytes]]:
    return [
        ("snow.instance", instance.encode()),
        ("snow.table", table.encode()),
        ("snow.timestamp", ts.encode()),
        ("snow.phase", b"backfill"),
    ]


def _ts(second: int) -> str:
    return f"2026-09-29 07:{second // 60:02d}:{second % 60:02d}"


async def _produce(
    bootstrap: str, topic: str, rows: Sequence[tuple[str, str, bytes | None, str]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, key=key.encode(), headers=_headers(table, ts))
            for key, ts, value, table in rows
        ]
        for future in futures:
            await future
    finally:
        await producer.stop()


async def test_window_of_one_table_among_others(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("tail", partitions=3)
    rows: list[tuple[str, str, bytes | None, str]] = []
    for second in range(600):
        rows.append((f"inc{second % 50}", _ts(second), f"v{second}".encode(), "incident"))
        rows.append((f"chg{second % 7}", _ts(second), b"other", "change_request"))
    # An overlap re-read after an earlier restart: older rows again after newer ones.
    rows.extend((f"inc{s % 50}", _ts(s), f"v{s}".encode(), "incident") for s in range(590, 600))
    rows.append(("inc7", _ts(599), None, "incident"))  # a tombstone inside the window
    await _produce(kafka_bootstrap, topic, rows)

    since = _ts(580)
    result = await read_window(
        KafkaConnection(kafka_bootstrap),
        topic,
        instance=INSTANCE,
        table="incident",
        since=since,
        slack_floor=_ts(570),
        max_scanned=1_000_000,
        first_step=50,
    )

    assert result.complete
    expected = [
        EmittedRecord(key, ts, digest(value) if value is not None else b"")
        for key, ts, value, table in rows
        if table == "incident" and ts >= since
    ]
    # Order is kept within each Kafka partition; across partitions any interleaving is fine.
    found = [EmittedRecord(r.id, r.ts, r.digest) for r in result.records]
    assert sorted(found, key=repr) == sorted(expected, key=repr)
    assert all(r.produced_ms > 0 for r in result.records)
    # Only the tail was read, never the whole topic.
    assert result.scanned < len(rows) // 2


async def test_other_instance_and_empty_topic(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("tail", partitions=2)
    conn = KafkaConnection(kafka_bootstrap)
    empty = await read_window(
        conn,
        topic,
        instance=INSTANCE,
        table="incident",
        since=_ts(0),
        slack_floor=_ts(0),
        max_scanned=100,
    )
    assert empty.records == []
    assert empty.complete

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            topic, b"x", key=b"a", headers=_headers("incident", _ts(5), "other.service-now.com")
        )
        await producer.send_and_wait(topic, b"y", key=b"b", headers=_headers("incident", _ts(5)))
    finally:
        await producer.stop()
    found = await read_window(
        conn,
        topic,
        instance=INSTANCE,
        table="incident",
        since=_ts(0),
        slack_floor=_ts(0),
        max_scanned=100,
    )
    assert [r.id for r in found.records] == ["b"]


async def test_aborted_transactions_are_not_remembered(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("tail", partitions=1)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"tx-{topic}", acks="all"
    )
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(topic, b"kept", key=b"a", headers=_headers("incident", _ts(10)))
        await producer.begin_transaction()
        await producer.send(topic, b"gone", key=b"b", headers=_headers("incident", _ts(11)))
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"kept", key=b"c", headers=_headers("incident", _ts(12)))
    finally:
        await producer.stop()
    found = await read_window(
        KafkaConnection(kafka_bootstrap),
        topic,
        instance=INSTANCE,
        table="incident",
        since=_ts(0),
        slack_floor=_ts(0),
        max_scanned=100,
    )
    assert [r.id for r in found.records] == ["a", "c"]


async def test_scan_cap_stops_early_and_says_so(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("tail", partitions=1)
    rows = [(f"k{i}", _ts(300), b"v", "incident") for i in range(9000)]
    await _produce(kafka_bootstrap, topic, rows)
    found = await read_window(
        KafkaConnection(kafka_bootstrap),
        topic,
        instance=INSTANCE,
        table="incident",
        since=_ts(0),
        slack_floor=_ts(0),
        max_scanned=2500,
    )
    assert not found.complete
    assert 2500 <= found.scanned < 9000
    # What was read is the newest part of the window.
    assert found.records[-1].id == "k8999"


async def test_a_delete_streams_window_is_its_tombstones_by_audit_row(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("tail", partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()

    async def send(key: bytes, value: bytes | None, ts: str, *extra: tuple[str, bytes]) -> None:
        headers = [*_headers("incident", ts), *extra]
        await producer.send_and_wait(topic, value, key=key, headers=headers)

    delete = ("snow.operation", b"delete")
    try:
        await send(b"row-a", b"{}", _ts(10), ("snow.operation", b"upsert"))
        await send(b"row-a", None, _ts(20), delete, ("snow.audit_id", b"audit-1"))
        await send(b"row-b", None, _ts(21), delete, ("snow.audit_id", b"audit-2"))
        # Written before tombstones named their audit row: nothing to match it by.
        await send(b"row-c", None, _ts(22), delete)
        # Too old for the window.
        await send(b"row-d", None, _ts(1), delete, ("snow.audit_id", b"audit-0"))
    finally:
        await producer.stop()

    found = await read_window(
        KafkaConnection(kafka_bootstrap),
        topic,
        instance=INSTANCE,
        table="incident",
        since=_ts(5),
        slack_floor=_ts(0),
        max_scanned=100,
        deletes=True,
    )
    # Keyed and digested the way the delete stream's page decision remembers them.
    assert sorted((r.id, r.ts, r.digest) for r in found.records) == [
        ("audit-1", _ts(20), digest(b"row-a")),
        ("audit-2", _ts(21), digest(b"row-b")),
    ]
    table = await read_window(
        KafkaConnection(kafka_bootstrap),
        topic,
        instance=INSTANCE,
        table="incident",
        since=_ts(5),
        slack_floor=_ts(0),
        max_scanned=100,
    )
    # The table's own stream still sees its deleted ids as deleted (empty digest).
    assert ("row-a", b"") in {(r.id, r.digest) for r in table.records}
