"""Shared fixtures: the real local Kafka broker and uniquely named topics.

The broker comes from ``SNOWSOURCE_TEST_KAFKA`` (a bootstrap address) when set; otherwise the
project's own ``scripts/kafka.sh`` starts it (idempotent, and quick once its jars are cached).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import hypothesis
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.kafka_support import REPO, LocalBroker, unique
from tests.registry_support import LocalRegistry, session_registry

TopicFactory = Callable[..., Awaitable[str]]

# Property tests run beside brokers and daemons on a loaded 2-core CI machine: a wall-clock
# deadline per example (hypothesis's default 200 ms) or its too-slow health check would fail a
# correct test there. The per-test timeout still catches a real hang.
hypothesis.settings.register_profile(
    "snowsource",
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.load_profile("snowsource")

#: The fixtures that reach the real broker: a test using any of them, however indirectly, is
#: marked ``kafka`` (``make test-unit`` deselects those and needs no broker).
BROKER_FIXTURES = frozenset({"kafka_bootstrap", "kafka_cluster"})
#: Likewise the fixture that starts the real Schema Registry: its tests are marked ``registry``.
REGISTRY_FIXTURES = frozenset({"schema_registry"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the broker ``kafka`` (the registry: ``registry``), from the
    fixtures it really uses; a test on the three-broker cluster also ``cluster`` (run by
    ``make test-cluster`` only)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if BROKER_FIXTURES & used:
            item.add_marker(pytest.mark.kafka)
        if REGISTRY_FIXTURES & used:
            item.add_marker(pytest.mark.registry)
        if "kafka_cluster" in used:
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


@pytest.fixture(scope="session")
def schema_registry() -> LocalRegistry:
    """The real Schema Registry of the session, started by ``scripts/registry.sh`` (idempotent:
    CI starts it first; a fresh clone's ``make test`` gets it here). Left running, like the
    broker."""
    registry = session_registry()
    registry.start()
    return registry


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
