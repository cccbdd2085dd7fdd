"""The batch produce path on the real broker: partitions, order, headers, and failures by index."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import ConsumerRecord

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.sink import RecordSink
from snowsource.core.outbound import PageRecord
from snowsource.core.partitioner import partition_for_key
from tests.conftest import TopicFactory

pytestmark = pytest.mark.kafka

COMMON = [("snow.instance", b"acme.service-now.com"), ("snow.table", b"incident")]


def _page(start: int, count: int, *, size: int = 200) -> list[PageRecord]:
    return [
        PageRecord(
            f"{n:032x}".encode(),
            b'{"n":%d,"pad":"%s"}' % (n, b"x" * size),
            [("snow.timestamp", b"2026-09-29 07:00:%02d" % (n % 60))],
        )
        for n in range(start, start + count)
    ]


def _n(record: ConsumerRecord[bytes, bytes]) -> int:
    assert record.value is not None
    return int(record.value.split(b",")[0].removeprefix(b'{"n":'))


async def _read_all(
    bootstrap: str, topic: str, partitions: int
) -> list[ConsumerRecord[bytes, bytes]]:
    consumer: AIOKafkaConsumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[ConsumerRecord[bytes, bytes]] = []
        while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                out.extend(records)
        return out
    finally:
        await consumer.stop()


SinkFactory = Callable[..., Awaitable[RecordSink]]


@pytest.fixture
async def sink_factory(kafka_bootstrap: str) -> AsyncIterator[SinkFactory]:
    """Started sinks on the test broker; closed at teardown."""
    sinks: list[RecordSink] = []

    async def make(*, max_request_size: int = 1048576) -> RecordSink:
        sink = RecordSink(KafkaConnection(kafka_bootstrap), max_request_size=max_request_size)
        sinks.append(sink)
        await sink.start()
        return sink

    yield make
    for sink in sinks:
        await sink.close()


async def test_pages_land_on_the_java_partition_in_order(
    kafka_bootstrap: str, topic_factory: TopicFactory, sink_factory: SinkFactory
) -> None:
    topic = await topic_factory("pages", partitions=5)
    # A small request size forces several batches per partition and page.
    sink = await sink_factory(max_request_size=20_000)
    before_ms = int(time.time() * 1000)
    first = await sink.send_page(topic, _page(0, 1500), headers=COMMON)
    second = await sink.send_page(topic, _page(1500, 1500), headers=COMMON)  # pipelined
    acks = [await first, await second]
    assert [(a.records, a.acked, a.failure, a.complete) for a in acks] == [
        (1500, 1500, None, True)
    ] * 2

    records = await _read_all(kafka_bootstrap, topic, 5)
    assert sorted(_n(r) for r in records) == list(range(3000))
    partitioner = DefaultPartitioner()
    by_partition: dict[int, list[int]] = {}
    for record in records:
        assert record.key is not None
        assert record.partition == partition_for_key(record.key, 5)
        assert record.partition == partitioner(record.key, list(range(5)), list(range(5)))
        by_partition.setdefault(record.partition, []).append(_n(record))
        n = _n(record)
        assert list(record.headers) == [
            *COMMON,
            ("snow.timestamp", b"2026-09-29 07:00:%02d" % (n % 60)),
        ]
        assert before_ms <= record.timestamp <= int(time.time() * 1000)
    assert len(by_partition) == 5
    for numbers in by_partition.values():
        assert numbers == sorted(numbers)  # offsets follow the page order, across both pages


async def test_a_record_over_max_request_size_is_fatal_at_its_index(
    kafka_bootstrap: str, topic_factory: TopicFactory, sink_factory: SinkFactory
) -> None:
    topic = await topic_factory("pages", partitions=3)
    sink = await sink_factory(max_request_size=50_000)
    page = _page(0, 40)
    page[25] = PageRecord(page[25].key, b"y" * 60_000, page[25].headers)
    ack = await (await sink.send_page(topic, page, headers=COMMON))
    assert (ack.records, ack.acked, ack.complete) == (40, 25, False)
    assert ack.failure is not None
    assert ack.failure.index == 25
    assert ack.failure.fatal
    assert isinstance(ack.failure.error, MessageSizeTooLargeError)
    assert "kafka.max.request.size" in str(ack.failure.error)
    # Everything before it reached Kafka; nothing from it on was sent.
    assert sorted(_n(r) for r in await _read_all(kafka_bootstrap, topic, 3)) == list(range(25))


async def test_a_batch_the_broker_refuses_fails_from_its_first_record(
    kafka_bootstrap: str, topic_factory: TopicFactory, sink_factory: SinkFactory
) -> None:
    # The topic takes batches of at most 4000 bytes; the page's batch is larger, so the broker
    # refuses it as a whole and none of its records is acknowledged.
    topic = await topic_factory("pages", partitions=1, configs={"max.message.bytes": "4000"})
    sink = await sink_factory()
    ack = await (await sink.send_page(topic, _page(0, 100), headers=COMMON))
    assert (ack.acked, ack.complete) == (0, False)
    assert ack.failure is not None
    assert ack.failure.index == 0
    assert ack.failure.fatal, ack.failure.error
    assert await _read_all(kafka_bootstrap, topic, 1) == []


async def test_an_empty_page_is_acknowledged_at_once(
    topic_factory: TopicFactory, sink_factory: SinkFactory
) -> None:
    topic = await topic_factory("pages")
    sink = await sink_factory()
    ack = await (await sink.send_page(topic, []))
    assert (ack.records, ack.acked, ack.failure) == (0, 0, None)
