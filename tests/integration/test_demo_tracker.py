"""The demo's read-back counts every record of every table, whenever its topic appears."""

from __future__ import annotations

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from snowsource.demo.progress import TableView
from snowsource.demo.tracker import KafkaTracker
from tests.kafka_support import unique


async def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(count):
            await producer.send_and_wait(topic, b"v", key=f"k{i}".encode())
    finally:
        await producer.stop()


async def test_a_topic_created_later_does_not_reset_the_others(
    kafka_bootstrap: str, kafka_admin: AIOKafkaAdminClient
) -> None:
    first, second = unique("demo-a"), unique("demo-b")
    await kafka_admin.create_topics([NewTopic(first, 2, 1)])
    views = [TableView("a", first, ""), TableView("b", second, "")]
    try:
        async with KafkaTracker(kafka_bootstrap, views) as tracker:
            await _produce(kafka_bootstrap, first, 30)
            # The second table's topic appears while the first one's records are not read yet.
            await kafka_admin.create_topics([NewTopic(second, 1, 1)])
            await _produce(kafka_bootstrap, second, 5)
            await tracker.drain(within=20)
        assert (views[0].rows, views[1].rows) == (30, 5)
    finally:
        await kafka_admin.delete_topics([first, second])
