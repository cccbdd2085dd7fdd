"""The data producer: rows to Kafka records (SPEC §3), with acks=all and idempotence.

``send`` returns the broker acknowledgement as a future and never waits for it, so a page of
rows is handed to the producer at once and batched; the poller decides what an ack means for
offsets. Errors are classified here: retrying cannot cure a record that is too large or a topic
we may not write, so those become :class:`KafkaSinkError`; everything else keeps aiokafka's
``retriable`` verdict.

``send_page`` is the bulk path: a whole page becomes one record batch per partition (more when a
partition's share passes the batch limit), built with aiokafka's ``create_batch`` and handed over
with ``send_batch``, so the per-record cost is the hash and an append into the batch buffer —
no future, callback or accumulator round trip per row. The partition is the Java client's
(``core.partitioner``), so keys land where a Connect worker would put them. aiokafka queues at
most one batch per partition and the producer is idempotent with one request in flight per
broker, so batches of one partition are written in the order they were handed over. One
awaitable resolves when every batch of the page has been answered and says how long the
acknowledged prefix is: the caller commits up to there and no further.
"""

from __future__ import annotations

import asyncio
import time
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
)
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from snowsource.adapters.kafka import (
    KafkaConnection,
    admin_client,
    create_topics,
    existing_topics,
    is_retriable,
    stop_client,
)
from snowsource.core.errors import KafkaSinkError
from snowsource.core.outbound import Headers, PageAck, PageRecordLike, RecordFailure
from snowsource.core.partitioner import murmur2
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


# A record batch larger than the broker's message.max.bytes (1048588 by default) is refused as a
# whole, so page batches stay at 1 MiB even when max.request.size allows bigger records: a record
# larger than a batch still goes out, alone in its batch (aiokafka always takes a batch's first
# record).
_MAX_PAGE_BATCH_BYTES = 1048576


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
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
    ) -> None:
        """With ``transactional_id`` the producer is one table's transactional producer
        (``adapters.txn_producer``): pages are sent inside its transactions."""
        self._conn = conn
        self._max_request_size = max_request_size
        self._producer = AIOKafkaProducer(
            **conn.client_kwargs(),
            acks="all",
            enable_idempotence=True,
            linger_ms=linger_ms,
            max_request_size=max_request_size,
            # The batch limit for both paths: aiokafka's 16 KiB default means a produce request
            # per ~20 rows; a page's records of one partition fit one batch instead.
            max_batch_size=min(max_request_size, _MAX_PAGE_BATCH_BYTES),
            compression_type=None if compression_type == "none" else compression_type,
            # Also how long a batch may keep failing with retriable errors before its records
            # fail; the poller then restarts the table from its committed offset.
            request_timeout_ms=request_timeout_ms,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
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

    @property
    def kafka_producer(self) -> AIOKafkaProducer:
        """The aiokafka producer itself, for its transactions (``adapters.txn_producer``)."""
        return self._producer

    async def send(
        self,
        topic: str,
        key: bytes,
        value: bytes | None,
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

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        """Hand a page to Kafka in per-partition batches; the future resolves to its PageAck.

        Returns once every batch is queued (it waits only when a partition still has a batch
        queued, as ``send`` does), so the caller may fetch the next page while this one is
        acknowledged. ``headers`` go first on every record. A record over
        ``kafka.max.request.size`` is reported as a fatal failure at its index; nothing from
        it on is sent. Never raises for a Kafka error: hand-off and broker failures alike are
        reported in the :class:`PageAck`.
        """
        common: Headers = list(headers or ())
        return await self._send_now(topic, records, common)

    async def _send_now(
        self, topic: str, records: Sequence[PageRecordLike], common: Headers
    ) -> asyncio.Future[PageAck]:
        submitted: list[tuple[list[int], asyncio.Future[Any]]] = []
        failure: RecordFailure | None = None
        try:
            failure = await self._hand_over(topic, records, common, submitted)
        except asyncio.CancelledError:
            # What was queued is still produced; nobody waits for it now, so retrieve each
            # outcome (an unretrieved failure would be logged as a bug).
            for _, future in submitted:
                future.add_done_callback(_retrieve)
            raise
        return asyncio.ensure_future(_collect(len(records), submitted, failure))

    async def _hand_over(
        self,
        topic: str,
        records: Sequence[PageRecordLike],
        common: Headers,
        submitted: list[tuple[list[int], asyncio.Future[Any]]],
    ) -> RecordFailure | None:
        """Queue the page's batches into ``submitted``; the first record not queued, if any."""
        if not records:
            return None
        producer = self._producer
        limit = self._max_request_size
        estimate = DefaultRecordBatchBuilder.estimate_size_in_bytes
        # partition -> (open batch, page indices in it)
        open_batches: dict[int, tuple[Any, list[int]]] = {}
        try:
            partitions = sorted(await producer.partitions_for(topic))
            count = len(partitions)
            timestamp_ms = int(time.time() * 1000)
            for index, (key, value, own) in enumerate(records):
                record_headers = common + own if own else common
                size = estimate(key, value, record_headers)
                if size > limit:
                    error = MessageSizeTooLargeError(
                        f"record {index} of the page is {size} bytes, more than "
                        f"kafka.max.request.size ({limit}): raise kafka.max.request.size (and "
                        f"the topic's max.message.bytes) or exclude the large fields"
                    )
                    return await self._flush_open(topic, open_batches, submitted) or (
                        RecordFailure(index, error, fatal=True)
                    )
                partition = partitions[(murmur2(key) & 0x7FFFFFFF) % count]
                slot = open_batches.get(partition)
                if slot is None:
                    slot = open_batches[partition] = (producer.create_batch(), [])
                batch, indices = slot
                if (
                    batch.append(
                        timestamp=timestamp_ms, key=key, value=value, headers=record_headers
                    )
                    is None
                ):
                    # Full: queue it and start the partition's next batch with this record.
                    del open_batches[partition]
                    future = await producer.send_batch(batch, topic, partition=partition)
                    submitted.append((indices, future))
                    batch, indices = open_batches[partition] = (producer.create_batch(), [])
                    batch.append(
                        timestamp=timestamp_ms, key=key, value=value, headers=record_headers
                    )
                indices.append(index)
        except KafkaError as exc:
            return RecordFailure(
                _first_unqueued(len(records), submitted), exc, is_fatal_produce_error(exc)
            )
        return await self._flush_open(topic, open_batches, submitted)

    async def _flush_open(
        self,
        topic: str,
        open_batches: dict[int, tuple[Any, list[int]]],
        submitted: list[tuple[list[int], asyncio.Future[Any]]],
    ) -> RecordFailure | None:
        """Queue every open batch; a hand-off error becomes the failure of its first record."""
        while open_batches:
            partition, (batch, indices) = open_batches.popitem()
            # An open batch would also take records of a later ``send`` to the partition, and
            # its future would then cover records that are not this page's.
            batch.close()
            try:
                future = await self._producer.send_batch(batch, topic, partition=partition)
            except KafkaError as exc:
                unqueued = [indices, *(i for _, i in open_batches.values())]
                first = min(i[0] for i in unqueued)
                return RecordFailure(first, exc, is_fatal_produce_error(exc))
            submitted.append((indices, future))
        return None

    async def flush(self) -> None:
        """Wait until everything handed to the producer is acknowledged or failed."""
        await self._producer.flush()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _first_unqueued(count: int, submitted: list[tuple[list[int], asyncio.Future[Any]]]) -> int:
    queued = {i for indices, _ in submitted for i in indices}
    return next((i for i in range(count) if i not in queued), count)


async def _collect(
    count: int,
    submitted: list[tuple[list[int], asyncio.Future[Any]]],
    handover: RecordFailure | None,
) -> PageAck:
    """Wait for every queued batch and fold the answers into the page's acknowledged prefix."""
    outcomes = await asyncio.gather(*(f for _, f in submitted), return_exceptions=True)
    # The first record of the page that is not acknowledged, and why.
    first: RecordFailure | None = handover
    for (indices, _), outcome in zip(submitted, outcomes, strict=True):
        if isinstance(outcome, BaseException) and (first is None or indices[0] < first.index):
            first = RecordFailure(indices[0], outcome, is_fatal_produce_error(outcome))
    acked = count if first is None else first.index
    return PageAck(records=count, acked=acked, failure=first)


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
        missing = [topic for topic in wanted if topic not in found]
        if not missing:
            return problems
        if not create:
            for topic in missing:
                problems[topic] = (
                    f"topic {topic!r} does not exist and topic.creation.enable is false: "
                    f"create it, or set topic.creation.enable: true"
                )
            return problems
        try:
            outcome = await create_topics(
                admin,
                missing,
                partitions=partitions,
                replication_factor=replication_factor,
                configs=configs,
            )
        except KafkaError as exc:
            return {topic: f"could not create topic {topic!r}: {exc!r}" for topic in missing}
    for topic, result in outcome.items():
        if isinstance(result, KafkaError):
            problems[topic] = f"could not create topic {topic!r}: {result!r}"
    return problems
