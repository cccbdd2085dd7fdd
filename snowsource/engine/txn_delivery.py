"""Exactly-once delivery: one Kafka transaction per page, wrapping the page seam.

``TransactionalDelivery`` is a :class:`~snowsource.engine.delivery.TableDelivery`: the poller
hands it a page exactly as it hands one to ``PageDelivery``, and this module does the rest —
begin, the page's records (``PageDelivery.deliver_page`` on the table's transactional
producer), the offset record for the cursor after the page's last emitted row, commit. The
committer's offsets come back here too (:meth:`TransactionalDelivery.commit`): a page's offset
was committed with the page and is not written again; the ``stream`` rewrite is a transaction
of its own. So the in-memory committed offset moves only after Kafka committed it.

Failures:

* a record or transaction that fails, or a transaction that does not commit within its bound,
  is aborted; the page reports nothing acknowledged and the table restarts from its stored
  offset (the dedup rebuild is then required, see ``engine.resume``);
* a producer fenced by a newer one with the same ``transactional.id`` is a zombie: the table
  FAILs at once with :class:`TableFencedError`, naming the id and the connector's other live
  processes, and writes no offset any more.

Each generation first starts the producer (fencing any older owner of the table) and only then
re-reads the offsets topic, so what it resumes from and rebuilds its dedup cache from cannot be
moved by a zombie afterwards.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import structlog
from aiokafka.errors import KafkaError, TransactionalIdAuthorizationFailed

from snowsource.core.errors import TableFailedError
from snowsource.core.offsets_codec import SourceOffset, SourcePartition, encode_key, encode_value
from snowsource.core.outbound import Headers, PageAck, PageRecordLike, RecordFailure
from snowsource.core.page import PagePlan
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.engine.committer import OffsetCommits, OffsetWriter
from snowsource.engine.delivery import (
    DeliveryFactory,
    KeyValue,
    PageDelivery,
    RecordHeaders,
    TableDelivery,
)
from snowsource.engine.ports import KafkaErrors, Sink
from snowsource.runtime.aio import done_before
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.resource import AsyncResource
from snowsource.runtime.retrying import StoppedError, retrying

log = structlog.get_logger("snowsource.engine.txn_delivery")

#: How long an abort may take before the producer is discarded instead (a fresh producer's
#: start aborts the transaction on the broker anyway); once stop is requested, no longer than
#: what is left of its deadline.
ABORT_SECONDS = 5.0
#: How long a fenced table may spend naming the other members for its diagnostic (as above).
DESCRIBE_SECONDS = 5.0
#: A transaction is aborted by us this long before the broker would time it out, so the
#: broker's own timeout (which bumps the epoch and looks like fencing) never happens first.
TIMEOUT_MARGIN_SECONDS = 10.0


class TableFencedError(TableFailedError):
    """A newer producer with this table's transactional id took over: this one is a zombie."""


class TransactionFailedError(KafkaError):  # type: ignore[misc]
    """A page's transaction was aborted; the table restarts from its stored offset."""

    retriable = True


class TxnProducer(Sink, KafkaErrors, Protocol):
    """What a transactional delivery needs of its producer (``adapters.txn_producer``),
    whose errors it also classifies: retriable (:class:`KafkaErrors`) and fenced."""

    transactional_id: str
    transaction_timeout: float

    async def open(self, *, fresh: bool = False) -> None: ...

    async def begin(self) -> None: ...

    async def send_offset(self, key: bytes, value: bytes) -> asyncio.Future[object]: ...

    async def commit(self) -> None: ...

    async def abort(self, within: float) -> None: ...

    def age(self) -> float: ...

    def discard(self) -> None: ...

    def fenced(self, error: BaseException) -> bool:
        """True for Kafka's answer to a producer whose epoch a newer one bumped."""
        ...

    async def close(self, deadline: Deadline | None = None) -> None: ...


class OffsetsTopic(Protocol):
    """The offsets store as exactly-once uses it: re-read after fencing, told of commits."""

    connector: str

    async def load(self) -> None: ...

    def written_elsewhere(self, key: bytes, value: bytes | None, stamp_ms: int = -1) -> None: ...


#: Describes the connector's other live processes for a fencing diagnostic.
OthersDescriber = Callable[[], Awaitable[list[str]]]


def _order(offset: SourceOffset) -> tuple[str, str, bool]:
    # The stream rewrite repeats the last page's cursor with phase "stream": it comes after.
    return (offset.timestamp, offset.sys_id, offset.phase == "stream")


class TransactionalDelivery:
    """Delivers one stream's pages, each with its offset, in one transaction."""

    exactly_once = True

    def __init__(
        self,
        spec: TableSpec,
        producer: TxnProducer,
        stop: StopSignal,
        *,
        store: OffsetsTopic,
        retry: RetryPolicy,
        headers: Headers | None = None,
        key_value: KeyValue | None = None,
        record_headers: RecordHeaders | None = None,
        others: OthersDescriber | None = None,
    ) -> None:
        self._spec = spec
        self._producer = producer
        self._stop = stop
        self._store = store
        self._retry = retry
        self._others = others
        self._pages = PageDelivery(
            spec,
            producer,
            stop,
            headers=headers,
            key_value=key_value,
            record_headers=record_headers,
        )
        self._key = encode_key(store.connector, spec.partition)
        # Transactions of one producer never overlap: a page and a stream rewrite take turns.
        self._lock = asyncio.Lock()
        self._in_kafka: SourceOffset | None = None  # the last offset a transaction committed
        self._fenced: TableFencedError | None = None
        # A transaction outlived transaction.timeout.ms (the process stood still): whether a
        # newer owner fenced it cannot be told from the broker's answer, see _confirm_owner.
        self._stalled = False
        self._bound = max(producer.transaction_timeout - TIMEOUT_MARGIN_SECONDS, 1.0)
        self._log = log.bind(table=spec.alias, transactional_id=producer.transactional_id)

    # ---------------------------------------------------------------- the TableDelivery seam

    @property
    def unacknowledged(self) -> int:
        """Records of the page in flight that Kafka has not answered yet."""
        return self._pages.unacknowledged

    @property
    def in_flight(self) -> list[asyncio.Future[PageAck]]:
        """The page's acknowledgement while one is outstanding."""
        return self._pages.in_flight

    def forget(self) -> None:
        """A new generation starts from the stored offset."""
        self._pages.forget()
        self._in_kafka = None

    def offsets(self, writer: OffsetWriter) -> OffsetCommits:
        """The committer writes through the transactions, never beside them."""
        del writer
        return self

    def records(self, plan: PagePlan) -> list[PageRecordLike]:
        """The page's records, exactly as the at-least-once delivery sends them."""
        return self._pages.records(plan)

    async def begin_generation(self) -> None:
        """Start the producer (fencing any older owner of the table), then re-read the
        offsets topic: only now can nobody else move this table's offset."""
        if self._fenced is not None:
            raise self._fenced
        if self._stalled:
            await self._confirm_owner()
        try:
            # The producer's rule judges the offsets store's load too: one Kafka client's errors.
            async for attempt in retrying(
                self._retry,
                self._stop.event,
                retry_if=self._producer.retriable,
                on_retry=self._warn,
            ):
                with attempt:
                    await self._unless_stopped(self._open_and_load())
        except TransactionalIdAuthorizationFailed as exc:
            raise self._refused() from exc

    async def _open_and_load(self) -> None:
        # Always a new producer: only its start fences an older owner (even one that
        # fenced this process's previous producer while it sat idle, in group mode).
        await self._producer.open(fresh=True)
        await self._store.load()

    async def _unless_stopped(self, work: Coroutine[Any, Any, None]) -> None:
        """A producer start waits for the transaction coordinator as long as it takes: stop
        abandons it (the producer is then replaced at the next start)."""
        task = asyncio.ensure_future(work)
        if not await done_before(task, self._stop.event):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._producer.discard()
            raise StoppedError("stop requested while starting the transactional producer")
        task.result()

    async def deliver_page(self, plan: PagePlan) -> PageAck | None:
        """The page and its offset in one transaction; ``None`` when stop's deadline passed.

        Nothing of a failed transaction is acknowledged (``acked == 0``); the failure names
        the record that caused it, or the first one when the transaction itself failed.
        """
        if self._stop.revoked():
            return None  # group mode, after a stall: the table's new owner fenced this one
        transaction = asyncio.ensure_future(self._page_transaction(plan))
        try:
            finished = await self._stop.finish(transaction)
        except asyncio.CancelledError:
            # A sibling slice failed and the table's task group cancels this one: the
            # transaction must not outlive it with nobody to read how it ended.
            transaction.cancel()
            await asyncio.gather(transaction, return_exceptions=True)
            raise
        if not finished:
            # Stopping and out of time: the producer's close aborts what is still open.
            transaction.cancel()
            await asyncio.gather(transaction, return_exceptions=True)
            self._producer.discard()
            return None
        return transaction.result()

    async def commit(
        self, partition: SourcePartition, offset: SourceOffset, *, deadline: Deadline | None
    ) -> None:
        """The committer's write: a page's offset is in Kafka already; anything newer (the
        ``stream`` rewrite) is a transaction holding only the offset record."""
        if self._fenced is not None:
            raise self._fenced
        del partition  # always this stream's own
        limit = deadline or Deadline.never()
        # Not on the stop event: the drain's final write must still happen, within ``limit``.
        async for attempt in retrying(
            self._retry, None, limit, retry_if=self._producer.retriable, on_retry=self._warn
        ):
            with attempt:
                async with self._lock:
                    if self._in_kafka is not None and _order(offset) <= _order(self._in_kafka):
                        return
                    await self._offset_transaction(offset, limit)

    # ---------------------------------------------------------------- transactions

    async def _page_transaction(self, plan: PagePlan) -> PageAck | None:
        async with self._lock:
            # Asked only now, when the transactions before this one are committed.
            offset = self._ahead(
                plan.commit_offset() if plan.commit_offset else plan.emits[-1].offset
            )
            value = encode_value(offset) if offset is not None else None
            if self._fenced is not None:
                raise self._fenced
            try:
                async with asyncio.timeout(self._bound):
                    # A failed ``stream`` rewrite discarded the producer and this page came
                    # before its retry: start the replacement here too, as the retry would.
                    await self._reopen()
                    await self._producer.begin()
                    ack = await self._pages.deliver_page(plan)
                    if ack is None:  # stopping, out of time: the next start replaces it
                        self._producer.discard()
                        return None
                    if ack.failure is not None:
                        await self._failed(ack.failure.error)
                        return PageAck(records=ack.records, acked=0, failure=ack.failure)
                    if value is not None:
                        await (await self._producer.send_offset(self._key, value))
                    await self._producer.commit()
            except (KafkaError, TimeoutError, OSError) as exc:
                await self._failed(exc)
                return PageAck(
                    records=len(plan.emits),
                    acked=0,
                    failure=RecordFailure(0, self._aborted(exc), fatal=False),
                )
            if offset is not None and value is not None:
                self._committed(offset, value)
            return ack

    def _ahead(self, offset: SourceOffset | None) -> SourceOffset | None:
        """``offset`` when it is past what a transaction committed, else None (write none): a
        sliced backfill's prefix may not count an earlier committed page as acknowledged yet,
        and the offset must never move back."""
        done = self._in_kafka
        if offset is None or done is None or _order(offset) > _order(done):
            return offset
        return None

    async def _offset_transaction(self, offset: SourceOffset, limit: Deadline) -> None:
        value = encode_value(offset)
        assert value is not None
        try:
            async with limit.limit(self._bound):
                await self._reopen()
                await self._producer.begin()
                await (await self._producer.send_offset(self._key, value))
                await self._producer.commit()
        except (KafkaError, TimeoutError, OSError) as exc:
            await self._failed(exc)
            raise self._aborted(exc) from exc
        self._committed(offset, value)

    async def _reopen(self) -> None:
        """Start a producer again if a failure discarded it; after a stall, only once no other
        process may own the table (its start would fence that owner)."""
        if self._stalled:
            await self._confirm_owner()
        await self._producer.open()

    async def _confirm_owner(self) -> None:
        """After a transaction outlived ``transaction.timeout.ms``, fence again only when no
        other process of the connector runs.

        The broker bumps the epoch of a transaction it timed out, so a newer owner's fence and
        the broker's timeout give the same answer, and the age rule of :meth:`_failed` cannot
        tell them apart for a process that stood still (SIGSTOP, a paused VM) past the timeout.
        Starting a producer now would fence whoever took the table over meanwhile.
        """
        others = await self._describe_others()
        if not others:
            self._stalled = False  # nobody else can own it: the broker only timed us out
            return
        self._fenced = TableFencedError(
            f"{self._spec.describe}: this process stood still for longer than "
            f"transaction.timeout.ms inside a transaction of transactional.id "
            f"{self._producer.transactional_id!r} while other process(es) of the connector "
            f"ran ({', '.join(others)}); one of them may own the table now, so this process "
            f"stops the table instead of fencing it. Restart this table or this process"
        )
        self._log.error("table stopped after a stall: it may be owned elsewhere", others=others)
        raise self._fenced

    def _committed(self, offset: SourceOffset, value: bytes) -> None:
        self._in_kafka = offset
        self._store.written_elsewhere(self._key, value)

    async def _failed(self, error: BaseException) -> None:
        """Abort; a fence or a refusal of the transactional id fails the table instead."""
        # A transaction the broker timed out bumps the epoch too: only a young one was fenced.
        stalled = self._producer.age() >= self._producer.transaction_timeout
        fenced = self._producer.fenced(error) and not stalled
        self._stalled = self._stalled or stalled
        await self._producer.abort(self._stop.deadline.remaining(ABORT_SECONDS))
        if fenced:
            raise await self._fence(error)
        if isinstance(error, TransactionalIdAuthorizationFailed):
            raise self._refused() from error
        self._log.warning("transaction aborted", error=repr(error))

    def _refused(self) -> TableFailedError:
        return TableFailedError(
            f"{self._spec.describe}: Kafka refused transactional.id "
            f"{self._producer.transactional_id!r}: grant this principal Write and Describe "
            f"on that TransactionalId (or its prefix 'snowsource-') and IdempotentWrite on "
            f"the cluster, or set exactly.once: false"
        )

    def _aborted(self, error: BaseException) -> TransactionFailedError:
        return TransactionFailedError(
            f"the transaction of transactional.id {self._producer.transactional_id} was "
            f"aborted: {error!r}"
        )

    async def _fence(self, error: BaseException) -> TableFencedError:
        others = await self._describe_others()
        who = f"; other live process(es) of the connector: {', '.join(others)}" if others else ""
        self._fenced = TableFencedError(
            f"{self._spec.describe}: fenced: a newer producer with transactional.id "
            f"{self._producer.transactional_id!r} took the table over{who}. This process "
            f"stopped the table and writes no more offsets for it. Two processes own the same "
            f"table: give each process its own task.id (with the same tasks.max), then restart "
            f"this table or this process"
        )
        self._log.error(
            "table fenced by a newer producer",
            error=repr(error),
            other_members=others,
        )
        return self._fenced

    async def _describe_others(self) -> list[str]:
        if self._others is None:
            return []
        try:
            async with self._stop.deadline.limit(DESCRIBE_SECONDS):
                return await self._others()
        except Exception as exc:  # noqa: BLE001 - the fence is reported either way
            self._log.warning("could not describe the consumer group", error=repr(exc))
            return []

    def _warn(self, attempt: object, delay: float) -> None:
        self._log.warning(
            "transaction or producer start failed; retrying",
            error=repr(getattr(attempt, "error", None)),
            retry_in=round(delay, 2),
        )


class Deliveries(AsyncResource):
    """Builds every stream's delivery, and owns the transactional producers.

    With ``exactly.once: false`` every stream gets a :class:`PageDelivery` on the shared
    producer; with ``true`` each gets its own transactional producer, closed here (an open
    transaction aborted) within the shutdown deadline.
    """

    def __init__(
        self,
        make: Callable[[TableSpec], TxnProducer] | None,
        *,
        store: OffsetsTopic | None = None,
        retry: RetryPolicy | None = None,
        others: OthersDescriber | None = None,
    ) -> None:
        self._make = make
        self._store = store
        self._retry = retry
        self._others = others
        self._producers: dict[str, TxnProducer] = {}

    def factory(self, spec: TableSpec) -> DeliveryFactory:
        """The delivery of ``spec``'s stream (the same producer for every generation)."""
        if self._make is None:
            return PageDelivery
        producer = self._producers.get(spec.alias)
        if producer is None:
            producer = self._producers[spec.alias] = self._make(spec)
        assert self._store is not None
        assert self._retry is not None
        return functools.partial(
            _transactional,
            producer=producer,
            store=self._store,
            retry=self._retry,
            others=self._others,
        )

    async def close(self, deadline: Deadline | None = None) -> None:
        """Close every transactional producer within ``deadline``."""
        producers = list(self._producers.values())
        await asyncio.gather(*(p.close(deadline) for p in producers))


def _transactional(
    spec: TableSpec,
    sink: Sink,
    stop: StopSignal,
    *,
    producer: TxnProducer,
    store: OffsetsTopic,
    retry: RetryPolicy,
    others: OthersDescriber | None,
    headers: Headers | None = None,
    key_value: KeyValue | None = None,
    record_headers: RecordHeaders | None = None,
) -> TableDelivery:
    del sink  # the shared producer never carries an exactly-once table's records
    return TransactionalDelivery(
        spec,
        producer,
        stop,
        store=store,
        retry=retry,
        headers=headers,
        key_value=key_value,
        record_headers=record_headers,
        others=others,
    )
