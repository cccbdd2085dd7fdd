"""The data producer: rows to Kafka records (SPEC §3), with acks=all and idempotence.

``send`` returns the broker acknowledgement as a future and never waits for it, so a page of
rows is handed to the producer at once and batched; the poller decides what an ack means for
offsets. Errors are classified here: retrying cannot cure a record that is too large or a topic
we may not write, so those become :class:`KafkaSinkError`; everything else keeps aiokafka's
``retriable`` verdict.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog
from aiokafka import AIOKafkaClient, AIOKafkaProducer
from aiokafka.errors import (
    InvalidTopicError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from snowsource.adapters.kafka import (
    KafkaConnection,
    admin_client,
    create_topic,
    existing_topics,
    is_retriable,
    stop_client,
)
from snowsource.core.errors import KafkaSinkError
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

log = structlog.get_logger(__name__)

_FATAL = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    InvalidTopicError,
)


def is_fatal_produce_error(exc: BaseException) -> bool:
    """True when retrying the record cannot succeed (SPEC §6); anything else is cured by an
    internal restart of the table after a backoff."""
    if isinstance(exc, _FATAL):
        return True
    return isinstance(exc, KafkaError) and not is_retriable(exc)


class RecordSink(AsyncResource):
    """One idempotent producer shared by every table of the process."""

    def __init__(
        self,
        conn: KafkaConnection,
        *,
        linger_ms: int = 5,
        max_request_size: int = 1048576,
        compression_type: str = "none",
        request_timeout_ms: int = 40000,
    ) -> None:
        self._conn = conn
        self._producer = AIOKafkaProducer(
            **conn.client_kwargs(),
            acks="all",
            enable_idempotence=True,
            linger_ms=linger_ms,
            max_request_size=max_request_size,
            compression_type=None if compression_type == "none" else compression_type,
            # Also how long a batch may keep failing with retriable errors before its records
            # fail; the poller then restarts the table from its committed offset.
            request_timeout_ms=request_timeout_ms,
        )
        self._started = False
        self._closed = False

    async def start(self) -> None:
        """Connect the producer."""
        # Set first: a start that fails half-way has opened connections that close() must stop.
        self._started = True
        await self._producer.start()

    async def close(self, deadline: Deadline | None = None) -> None:
        """Flush what is buffered and close within ``deadline``. Safe to call more than once."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closed = True
        await stop_client(
            self._producer, "the producer (unacknowledged records are dropped)", deadline
        )

    @property
    def broker_client(self) -> AIOKafkaClient:
        """The producer's own Kafka client: ``adapters.kafka_probe`` asks it whether Kafka is
        reachable, so readiness says what the producer sees."""
        return self._producer.client

    async def send(
        self,
        topic: str,
        key: bytes,
        value: bytes,
        headers: Sequence[tuple[str, bytes]],
    ) -> asyncio.Future[Any]:
        """Hand one record to the producer; the returned future resolves on the broker's ack."""
        try:
            future: asyncio.Future[Any] = await self._producer.send(
                topic, value, key=key, headers=list(headers)
            )
        except _FATAL as exc:
            raise KafkaSinkError(f"Kafka refused the record for topic {topic}: {exc!r}") from exc
        return future


async def ensure_topics(
    conn: KafkaConnection,
    topics: Iterable[str],
    *,
    create: bool,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
) -> dict[str, str]:
    """Create missing output topics. Returns ``topic -> problem`` for topics that cannot be used."""
    wanted = sorted(set(topics))
    problems: dict[str, str] = {}
    if not wanted:
        return problems
    async with admin_client(conn) as admin:
        found = await existing_topics(admin, wanted)
        for topic in wanted:
            if topic in found:
                continue
            if not create:
                problems[topic] = (
                    f"topic {topic!r} does not exist and topic.creation.enable is false: "
                    f"create it, or set topic.creation.enable: true"
                )
                continue
            try:
                await create_topic(
                    admin,
                    topic,
                    partitions=partitions,
                    replication_factor=replication_factor,
                    configs=configs,
                )
            except (UnknownTopicOrPartitionError, KafkaError) as exc:
                problems[topic] = f"could not create topic {topic!r}: {exc!r}"
    return problems
