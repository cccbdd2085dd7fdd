"""Kafka connection settings and the admin operations snowsource needs (topics, configs).

The only module that turns our configuration into aiokafka keyword arguments, so data producer,
offsets store, admin client and group membership all connect the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError, for_code
from aiokafka.helpers import create_ssl_context

from snowsource.core.errors import SnowsourceError
from snowsource.core.retry import RetryPolicy
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.retrying import Attempt, DeadlineExceededError, retrying

log = structlog.get_logger(__name__)

#: How long closing a Kafka client may take before we give up on it (outages must not hang
#: shutdown).
CLOSE_TIMEOUT_SECONDS = 10.0


def is_retriable(exc: BaseException) -> bool:
    """True when the same request may succeed later (after a backoff): aiokafka's ``retriable``
    flag, plus its client-side timeout, which is how an unreachable broker shows up."""
    if isinstance(exc, KafkaTimeoutError | TimeoutError):
        return True
    return isinstance(exc, KafkaError) and bool(exc.retriable)


async def stop_client(client: Any, what: str, deadline: Deadline | None) -> None:
    """``client.stop()`` within ``deadline`` (and ``CLOSE_TIMEOUT_SECONDS``): during an outage
    aiokafka would otherwise wait for its request timeout."""
    try:
        async with (deadline or Deadline.never()).limit(CLOSE_TIMEOUT_SECONDS):
            await client.stop()
    except TimeoutError:
        log.warning(f"{what} did not close in time; abandoning it")


class KafkaUnavailableError(SnowsourceError):
    """Kafka could not be reached within the start-up timeout (exit 1)."""


class TopicConfigError(SnowsourceError):
    """A topic exists with settings snowsource cannot use (e.g. offsets topic not compacted)."""


@dataclass(frozen=True)
class KafkaConnection:
    """How to reach the cluster; secrets are plain strings only inside this object."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    client_id: str = "snowsource"

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments shared by every aiokafka client we create."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
            "client_id": self.client_id,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            kwargs["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
            )
        if self.security_protocol.startswith("SASL"):
            kwargs["sasl_mechanism"] = self.sasl_mechanism or "PLAIN"
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs


@contextlib.asynccontextmanager
async def admin_client(conn: KafkaConnection) -> AsyncIterator[AIOKafkaAdminClient]:
    """An admin client that is always closed."""
    admin = AIOKafkaAdminClient(**conn.client_kwargs())
    try:
        await admin.start()
        yield admin
    finally:
        await admin.close()


# Start-up probing: quick at first, then every few seconds (full jitter) until the timeout.
_STARTUP_RETRY = RetryPolicy(0.25, 5.0)


async def wait_for_kafka(conn: KafkaConnection, within: float) -> None:
    """Return once the cluster answers a metadata request; raise after ``within`` seconds."""
    deadline = Deadline.after(within)

    def warn(attempt: Attempt, delay: float) -> None:
        log.warning(
            "kafka not reachable yet, retrying", error=repr(attempt.error), retry_in=round(delay, 2)
        )

    try:
        async for attempt in retrying(
            _STARTUP_RETRY,
            None,
            deadline,
            retry_if=lambda exc: isinstance(exc, KafkaError | OSError | TimeoutError),
            on_retry=warn,
        ):
            with attempt:
                async with deadline.limit(), admin_client(conn) as admin:
                    await admin.describe_cluster()
    except DeadlineExceededError as exc:
        raise KafkaUnavailableError(
            f"Kafka at {conn.bootstrap_servers} could not be reached within {within:g}s "
            f"(kafka.startup.timeout.seconds): {exc.__cause__!r}"
        ) from None


def _check_error(code: int, what: str) -> None:
    if code:
        raise for_code(code)(what)


async def describe_topic_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    """The effective configuration of one topic."""
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    for response in responses:
        for resource in response.resources:
            error_code, _message, _type, name, entries = resource[:5]
            if name != topic:
                continue
            _check_error(error_code, f"describe configs of {topic}")
            return {entry[0]: entry[1] for entry in entries}
    raise TopicConfigError(f"no configuration returned for topic {topic}")


async def broker_defaults(admin: AIOKafkaAdminClient) -> tuple[int, int]:
    """The broker's ``num.partitions`` and ``default.replication.factor``.

    aiokafka speaks CreateTopics v3 at most, which cannot ask for "broker default" (-1), so we
    resolve the defaults ourselves.
    """
    cluster = await admin.describe_cluster()
    brokers = cluster.get("brokers") or []
    node_id = str(brokers[0]["node_id"]) if brokers else "1"
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node_id)])
    values: dict[str, str] = {}
    for response in responses:
        for resource in response.resources:
            values.update({entry[0]: entry[1] for entry in resource[4]})
    return int(values.get("num.partitions", "1")), int(
        values.get("default.replication.factor", "1")
    )


async def existing_topics(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, int]:
    """Partition counts of those of ``topics`` that exist."""
    found: dict[str, int] = {}
    for entry in await admin.describe_topics(topics):
        if entry["error_code"] == 0:
            found[entry["topic"]] = len(entry["partitions"])
    return found


async def create_topic(
    admin: AIOKafkaAdminClient,
    name: str,
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
) -> bool:
    """Create a topic (``-1`` = broker default). False when it already existed."""
    if partitions == -1 or replication_factor == -1:
        default_partitions, default_rf = await broker_defaults(admin)
        partitions = default_partitions if partitions == -1 else partitions
        replication_factor = default_rf if replication_factor == -1 else replication_factor
    response = await admin.create_topics(
        [NewTopic(name, partitions, replication_factor, topic_configs=dict(configs or {}))]
    )
    for topic_name, error_code, *_rest in response.topic_errors:
        if topic_name != name or error_code == 0:
            continue
        if for_code(error_code) is TopicAlreadyExistsError:
            return False
        _check_error(error_code, f"create topic {name}")
    log.info("created topic", topic=name, partitions=partitions, replication=replication_factor)
    return True
