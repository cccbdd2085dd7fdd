"""Issue 23 items 3 and 4: the dedup rebuild and the offsets load against a real broker.

Item 3: one scan budget walked partition after partition let an early partition with a long
tail of other writers' traffic use it all, so a later partition's window was never read.
Item 4: a ``read_committed`` consumer's end offsets are the last stable offset, so another
producer's open transaction (another table's, the delete stream's on the same topic, a killed
process's until the broker times it out) hid this table's records committed after it began: the
rebuild or the offsets load came back complete-looking and stale. Both readers now read up to the
high watermark and wait while such a transaction is open.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.offset_store import OffsetStore
from snowsource.adapters.topic_tail import TailStalledError, read_window
from tests.conftest import TopicFactory

INSTANCE = "acme.service-now.com"
OLD = "2026-09-29 06:00:00"
NEW = "2026-09-29 07:00:00"


def _headers(table: str, ts: str) -> list[tuple[str, bytes]]:
    return [
        ("snow.instance", INSTANCE.encode()),
        ("snow.table", table.encode()),
        ("snow.timestamp", ts.encode()),
    ]


@pytest.fixture
async def producer(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    client = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await client.start()
    yield client
    await client.stop()


async def _send(
    producer: AIOKafkaProducer, topic: str, partition: int, key: str, *table_ts: str
) -> None:
    table, ts = table_ts
    await producer.send(
        topic, b"v", key=key.encode(), partition=partition, headers=_headers(table, ts)
    )


@pytest.fixture
async def open_transaction(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    """A transactional producer; whatever it leaves open is aborted at teardown."""
    client = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"races-{id(object())}", acks="all"
    )
    await client.start()
    yield client
    await client.stop()


async def test_a_long_partition_does_not_starve_the_others_of_the_scan_budget(
    kafka_bootstrap: str, topic_factory: TopicFactory, producer: AIOKafkaProducer
) -> None:
    topic = await topic_factory("races-tail", partitions=2)
    # Partition 0: an old record of the table, then 9000 of another table, then the window.
    await _send(producer, topic, 0, "p0-old", "incident", OLD)
    for i in range(9000):
        await _send(producer, topic, 0, f"chg{i}", "change_request", NEW)
    await _send(producer, topic, 0, "p0-new", "incident", NEW)
    # Partition 1: an old record, then 50 rows of the window.
    await _send(producer, topic, 1, "p1-old", "incident", OLD)
    for i in range(50):
        await _send(producer, topic, 1, f"p1-{i}", "incident", NEW)
    await producer.flush()

    result = await read_window(
        KafkaConnection(kafka_bootstrap),
        topic,
        instance=INSTANCE,
        table="incident",
        since=NEW,
        slack_floor=NEW,
        max_scanned=7000,
        first_step=1000,
    )
    # Walked partition after partition, 0 used the whole budget and 1 was never read. In
    # rounds, 1 takes the little it needs and 0 the rest; 0 alone is cut short, and says so.
    assert {r.id for r in result.records} == {"p0-new", *(f"p1-{i}" for i in range(50))}
    assert not result.complete
    assert result.scanned <= 7000


async def test_old_tombstones_at_the_tail_do_not_end_the_tables_walk_early(
    kafka_bootstrap: str, topic_factory: TopicFactory, producer: AIOKafkaProducer
) -> None:
    """Item 6. A delete stream catching up after the table's backfill writes tombstones stamped
    with old audit times after the table's newest records. Taken for the table's own records,
    the first of them ended the backward walk before the table's window was read."""
    topic = await topic_factory("races-stones", partitions=1)
    for i in range(200):
        await _send(producer, topic, 0, f"before-{i}", "incident", OLD)
    for i in range(30):
        await _send(producer, topic, 0, f"row-{i}", "incident", NEW)
    for i in range(30):
        # headers of a delete stream's tombstone: the base table, operation delete, old time
        stone = [*_headers("incident", OLD), ("snow.operation", b"delete")]
        await producer.send(topic, None, key=f"gone-{i}".encode(), partition=0, headers=stone)
    await producer.flush()
    result = await read_window(
        KafkaConnection(kafka_bootstrap),
        topic,
        instance=INSTANCE,
        table="incident",
        since=NEW,
        slack_floor=NEW,
        max_scanned=1000,
        first_step=10,
    )
    assert [r.id for r in result.records] == [f"row-{i}" for i in range(30)]
    assert result.scanned < 261  # it still stops at the table's own older records


async def test_the_rebuild_sees_records_committed_after_another_producers_open_transaction(
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    producer: AIOKafkaProducer,
    open_transaction: AIOKafkaProducer,
) -> None:
    topic = await topic_factory("races-lso", partitions=1)
    await _send(producer, topic, 0, "before", "incident", NEW)
    await producer.flush()
    # The delete stream's (or a killed process's) transaction, still open.
    await open_transaction.begin_transaction()
    await (await open_transaction.send(topic, b"t", key=b"x", headers=_headers("other", NEW)))
    # The table's own records, acknowledged after that transaction began.
    await _send(producer, topic, 0, "after", "incident", NEW)
    await producer.flush()
    conn = KafkaConnection(kafka_bootstrap)

    def read(stall_seconds: float) -> asyncio.Task[object]:
        return asyncio.ensure_future(
            read_window(
                conn,
                topic,
                instance=INSTANCE,
                table="incident",
                since=NEW,
                slack_floor=NEW,
                max_scanned=1000,
                stall_seconds=stall_seconds,
            )
        )

    # Before: end offsets were the last stable offset and "after" was silently missing.
    with pytest.raises(TailStalledError, match="stood still"):
        await read(1.5)
    waiting = read(60)
    await open_transaction.commit_transaction()
    result = await waiting
    assert [r.id for r in result.records] == ["before", "after"]  # type: ignore[attr-defined]


async def test_the_offsets_load_sees_an_offset_written_after_another_open_transaction(
    kafka_bootstrap: str, name_factory: object, open_transaction: AIOKafkaProducer
) -> None:
    conn = KafkaConnection(kafka_bootstrap)
    topic = name_factory("races-offsets")  # type: ignore[operator]
    writer = OffsetStore(conn, topic=topic, connector="races", partitions=1)
    await writer.start()
    try:
        await writer.write_raw(b"table-key", b"old")
        await open_transaction.begin_transaction()
        await (await open_transaction.send(topic, b"other", key=b"other-key"))
        await writer.write_raw(b"table-key", b"new")

        reader = OffsetStore(conn, topic=topic, connector="races", partitions=1)
        loading = asyncio.ensure_future(reader.start())
        # Read to the last stable offset, the load ended at once with the old value.
        done, _ = await asyncio.wait({loading}, timeout=2)
        assert not done, f"the load did not wait for the open transaction: {reader._data}"
        # A written_elsewhere during the load (a transaction of this process) is kept, and a
        # second load starting meanwhile must not forget it for the first.
        reader.written_elsewhere(b"mine", b"in-memory")
        second = asyncio.ensure_future(reader.load())
        await open_transaction.commit_transaction()
        await asyncio.gather(loading, second)
        assert reader._data[b"table-key"] == b"new"
        assert reader._data[b"other-key"] == b"other"
        assert reader._data[b"mine"] == b"in-memory"
        await reader.close()
    finally:
        await writer.close()
