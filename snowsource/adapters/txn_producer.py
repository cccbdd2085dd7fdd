"""One table's transactional producer (``exactly.once: true``), Kafka Connect's KIP-618 shape.

Every owned stream has its own producer whose ``transactional.id`` follows the table
(``core.txn_id``). A page is one transaction: its records (the same per-partition batches as the
shared producer, through ``RecordSink.send_page``) and the offset record for the cursor after
it, to the offsets topic, committed together. aiokafka adds each partition to the transaction
when a batch for it is queued (``send_batch`` included), so the bulk page path costs nothing
extra inside a transaction.

Starting a producer (InitProducerId) fences every older producer with the same id and aborts
its open transaction: that is how a zombie process that still believes it owns a table is
stopped. After any failure the producer is discarded and the next :meth:`open` starts a fresh
one, so no transaction state (epochs, sequence numbers, a half-finished commit) outlives the
generation that saw it fail.

A fenced aiokafka producer fails its own futures and logs "Future exception was never
retrieved" for those nobody waits on; :func:`_retrieve_leftovers` takes them when the
producer's sender dies, so our logs and tests stay clean.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

from snowsource.adapters.kafka import KafkaConnection, is_retriable
from snowsource.adapters.sink import RecordSink
from snowsource.core.outbound import Headers, PageAck, PageRecordLike
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

log = structlog.get_logger(__name__)

#: The broker aborts a transaction left open longer than this (``transaction.timeout.ms``). A
#: page's transaction takes milliseconds to seconds; a minute leaves room for a slow broker
#: while bounding how long a crashed process's open transaction holds back read_committed
#: consumers (LSO) when no restart aborts it sooner.
TRANSACTION_TIMEOUT_MS = 60_000


def is_fenced(exc: BaseException | None) -> bool:
    """True for Kafka's answer to a producer whose epoch was bumped by a newer one."""
    return isinstance(exc, ProducerFenced | InvalidProducerEpoch)


class TransactionalProducer(AsyncResource):
    """A table's transactional producer, started lazily and replaced after a failure."""

    def __init__(
        self,
        conn: KafkaConnection,
        *,
        transactional_id: str,
        offsets_topic: str,
        linger_ms: int = 5,
        max_request_size: int = 1048576,
        compression_type: str = "none",
        transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS,
    ) -> None:
        self.transactional_id = transactional_id
        self.offsets_topic = offsets_topic
        self.transaction_timeout = transaction_timeout_ms / 1000
        self._conn = conn
        self._options: dict[str, Any] = {
            "linger_ms": linger_ms,
            "max_request_size": max_request_size,
            "compression_type": compression_type,
        }
        self._sink: RecordSink | None = None
        self._broken = False
        self._closed = False
        # When the open transaction began (monotonic), None outside a transaction.
        self.began: float | None = None

    def retriable(self, error: BaseException) -> bool:
        """Whether a retry may cure ``error`` (``engine.ports.KafkaErrors``): the one Kafka
        rule, :func:`~snowsource.adapters.kafka.is_retriable`."""
        return is_retriable(error)

    def fenced(self, error: BaseException) -> bool:
        """Whether ``error`` says a newer producer with this id fenced this one
        (:func:`is_fenced`)."""
        return is_fenced(error)

    @property
    def ready(self) -> bool:
        """A started producer that has not failed and has no transaction left open (by a
        generation that stopped or was cancelled in the middle of one)."""
        if self._sink is None or self._broken or self.began is not None:
            return False
        sender = self._sink.kafka_producer._sender.sender_task
        return sender is None or not sender.done()

    async def open(self, *, fresh: bool = False) -> None:
        """Start a producer unless a healthy one runs (``fresh``: start one in any case).

        The start (InitProducerId) fences every older producer with this id, in this process or
        another, and the broker aborts their open transaction before it answers. A producer
        fenced while idle cannot know it (it sent nothing since): a generation therefore always
        starts a fresh one.
        """
        if self._closed:
            raise RuntimeError(f"producer {self.transactional_id} is closed")
        if self.ready and not fresh:
            return
        self.began = None
        await self._discard(Deadline.after(5))
        sink = RecordSink(
            self._conn,
            transactional_id=self.transactional_id,
            transaction_timeout_ms=int(self.transaction_timeout * 1000),
            **self._options,
        )
        self._sink = sink
        self._broken = False
        try:
            await sink.start()
        except BaseException:
            self._broken = True
            raise
        sender = sink.kafka_producer._sender.sender_task
        sender.add_done_callback(lambda _task: _retrieve_leftovers(sink.kafka_producer))
        log.debug("transactional producer started", transactional_id=self.transactional_id)

    def _producer(self, *, broken_too: bool = False) -> AIOKafkaProducer:
        if self._sink is None or (self._broken and not broken_too):
            raise RuntimeError(f"producer {self.transactional_id} is not open")
        producer = self._sink.kafka_producer
        sender = producer._sender.sender_task
        if sender is not None and sender.done() and not sender.cancelled():
            # The sender died (fenced, or refused): aiokafka's state machine would only assert.
            self._broken = True
            error = sender.exception()
            raise error if error is not None else RuntimeError("the producer's sender ended")
        return producer

    async def begin(self) -> None:
        """Begin a transaction."""
        await self._producer().begin_transaction()
        self.began = time.monotonic()

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        """The page's batches, inside the open transaction (``RecordSink.send_page``)."""
        self._producer()
        assert self._sink is not None
        return await self._sink.send_page(topic, records, headers=headers)

    async def send_offset(self, key: bytes, value: bytes) -> asyncio.Future[Any]:
        """The offset record, inside the open transaction; partitioned by murmur2 over the key
        like a Connect worker's."""
        future: asyncio.Future[Any] = await self._producer().send(
            self.offsets_topic, value, key=key
        )
        return future

    async def commit(self) -> None:
        """Commit the open transaction (aiokafka flushes its batches first)."""
        await self._producer().commit_transaction()
        self.began = None

    async def abort(self, within: float) -> None:
        """Abort the open transaction within ``within`` seconds; on failure (or none open) the
        producer is discarded, and the broker aborts it when the next producer starts."""
        self.began = None
        try:
            producer = self._producer(broken_too=True)
            # An abortable error was set on the transaction's waiter, which the abort replaces.
            _retrieve_leftovers(producer)
            if producer._txn_manager.state.name in ("IN_TRANSACTION", "ABORTABLE_ERROR"):
                async with asyncio.timeout(within):
                    await producer.abort_transaction()
        except Exception as exc:  # noqa: BLE001 - an abort that fails leaves a fresh start
            log.debug("abort failed", transactional_id=self.transactional_id, error=repr(exc))
        # Whatever happened, the next transaction starts on a fresh producer (a new epoch).
        self._broken = True

    def age(self) -> float:
        """How long the open transaction has been open (0 outside one)."""
        return 0.0 if self.began is None else time.monotonic() - self.began

    def discard(self) -> None:
        """Never use this producer again; the next :meth:`open` starts a fresh one."""
        self._broken = True

    async def _discard(self, deadline: Deadline) -> None:
        sink, self._sink = self._sink, None
        if sink is not None:
            await sink.close(deadline)

    async def close(self, deadline: Deadline | None = None) -> None:
        """Abort an open transaction and stop, within ``deadline``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        deadline = deadline or Deadline.never()
        if self.began is not None:
            await self.abort(deadline.remaining(10))
        await self._discard(deadline)


def _retrieve_leftovers(producer: AIOKafkaProducer) -> None:
    """Take the exceptions aiokafka leaves on futures nobody awaits once its sender died
    (the transaction's waiter, the drain waiters of batches it never sent)."""
    futures: list[asyncio.Future[Any]] = []
    manager = producer._txn_manager
    if manager is not None and manager._transaction_waiter is not None:
        futures.append(manager._transaction_waiter)
    accumulator = producer._message_accumulator
    for batches in accumulator._batches.values():
        futures.extend(batch._drain_waiter for batch in batches)
    futures.extend(batch._drain_waiter for batch in accumulator._pending_batches)
    for future in futures:
        if future.done() and not future.cancelled():
            future.exception()
