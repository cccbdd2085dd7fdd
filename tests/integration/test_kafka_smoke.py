"""The local broker is a real Kafka: compacted topics, acks=all produce, read back."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from snowsource.adapters.kafka import describe_topic_configs
from tests.conftest import TopicFactory
from tests.polling import poll_until


async def test_compacted_topic_round_trip(
    kafka_bootstrap: str, kafka_admin: AIOKafkaAdminClient, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("smoke", partitions=3, configs={"cleanup.policy": "compact"})

    # A new topic's configuration becomes visible a moment after CreateTopics answers.
    entries: dict[str, str] = {}

    async def described() -> bool:
        nonlocal entries
        try:
            entries = await describe_topic_configs(kafka_admin, topic)
        except KafkaError:
            return False
        return "cleanup.policy" in entries

    await poll_until(described, timeout=30)
    assert entries["cleanup.policy"] == "compact"

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        sent = [
            await producer.send_and_wait(topic, f"v{i}".encode(), key=b"k%d" % (i % 4))
            for i in range(20)
        ]
    finally:
        await producer.stop()
    assert all(md.offset >= 0 for md in sent)

    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        seen: dict[bytes, bytes] = {}
        while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                for rec in records:
                    assert rec.key is not None
                    assert rec.value is not None
                    seen[rec.key] = rec.value
    finally:
        await consumer.stop()
    assert seen == {b"k0": b"v16", b"k1": b"v17", b"k2": b"v18", b"k3": b"v19"}
