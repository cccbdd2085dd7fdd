"""Shared fixtures: the real local Kafka broker and uniquely named topics.

The broker comes from ``SNOWSOURCE_TEST_KAFKA`` (a bootstrap address) when set; otherwise the
project's own ``scripts/kafka.sh`` starts it (idempotent, and quick once its jars are cached).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.kafka_support import REPO, LocalBroker, unique

TopicFactory = Callable[..., Awaitable[str]]

#: The fixtures that reach the real broker: a test using any of them, however indirectly, is
#: marked ``kafka`` (``make test-unit`` deselects those and needs no broker).
BROKER_FIXTURES = frozenset({"kafka_bootstrap", "kafka_cluster"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the broker ``kafka``, from the fixtures it really uses; a test
    on the three-broker cluster also ``cluster`` (run by ``make test-cluster`` only)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if BROKER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.kafka)
        if "kafka_cluster" in fixtures:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a real Kafka broker for the whole session."""
    configured = os.environ.get("SNOWSOURCE_TEST_KAFKA")
    if configured:
        yield configured
        return
    port = int(os.environ.get("KAFKA_PORT", "9092"))
    broker = LocalBroker(port=port, data_dir=REPO / ".kafka" / str(port))
    broker.start()
    yield broker.bootstrap


@pytest.fixture
async def kafka_admin(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@pytest.fixture
async def topic_factory(kafka_admin: AIOKafkaAdminClient) -> AsyncIterator[TopicFactory]:
    """Create uniquely named topics; they are deleted at teardown."""
    created: list[str] = []

    async def make(
        prefix: str = "t", *, partitions: int = 1, configs: dict[str, str] | None = None
    ) -> str:
        name = unique(prefix)
        await kafka_admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs or {})]
        )
        created.append(name)
        return name

    yield make
    if created:
        await kafka_admin.delete_topics(created)


@pytest.fixture
def name_factory() -> Callable[[str], str]:
    """Unique names for topics the code under test creates itself."""
    return unique
