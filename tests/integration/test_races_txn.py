"""Issue 23 items 1 and 2: exactly-once windows a review suspected, on the real broker.

Each test drives the interleaving itself: a producer hook (a subclass of the real
``TransactionalProducer``) fails or holds one call at the point the review names.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from aiokafka.errors import KafkaConnectionError

from snowsource.adapters.kafka import KafkaConnection, admin_client, create_topic
from snowsource.adapters.txn_producer import TransactionalProducer
from snowsource.core.offsets_codec import SourceOffset
from snowsource.core.page import Emit, PagePlan
from snowsource.core.retry import RetryPolicy
from snowsource.engine.txn_delivery import TableFencedError, TransactionalDelivery
from snowsource.runtime.deadline import Deadline, StopSignal
from tests.conftest import TopicFactory
from tests.fakes import CONNECTOR, make_spec
from tests.integration.engine import read_topic


class RecordingStore:
    """The offsets store as a transactional delivery sees it."""

    connector = CONNECTOR

    def __init__(self) -> None:
        self.written: list[bytes | None] = []
        self.loads = 0

    async def load(self) -> None:
        self.loads += 1

    def written_elsewhere(self, key: bytes, value: bytes | None, stamp_ms: int = -1) -> None:
        self.written.append(value)


class HiccupProducer(TransactionalProducer):
    """The real producer; its next commit fails like a broker hiccup once ``hiccup`` is set,
    after waiting for ``release`` (so a test can queue work behind the failing call)."""

    hiccup = False
    failed: asyncio.Event
    release: asyncio.Event

    async def commit(self) -> None:
        if self.hiccup:
            self.hiccup = False
            self.failed.set()
            await self.release.wait()
            raise KafkaConnectionError("injected: the transaction coordinator went away")
        await super().commit()


def _plan(fingerprint: str, second: int, n: int = 3, phase: str = "backfill") -> PagePlan:
    emits = [
        Emit(
            (phase, fingerprint),
            f"2026-09-29 07:00:{second:02d}",
            f"{second:02d}{i:030x}",
            b'{"v":%d}' % i,
            (f"2026-09-29 07:00:{second:02d}", f"{second:02d}{i:030x}"),
        )
        for i in range(n)
    ]
    return PagePlan(phase=phase, fingerprint=fingerprint, emits=emits)


async def test_a_page_during_a_commit_retry_is_delivered_not_failed(
    kafka_bootstrap: str, topic_factory: TopicFactory, name_factory: object
) -> None:
    """Item 2: the ``stream`` rewrite's transaction fails (the producer is discarded) and,
    before its retry reopens the producer, the next page takes the lock. ``begin()`` on the
    discarded producer raised ``RuntimeError``, which the poller takes for a bug: FAILED."""
    topic = await topic_factory("races-eos", partitions=1)
    offsets = name_factory("races-eos-offsets")  # type: ignore[operator]
    conn = KafkaConnection(kafka_bootstrap)
    async with admin_client(conn) as admin:
        await create_topic(admin, offsets, partitions=1, replication_factor=1)
    spec = make_spec(topic=topic)
    fingerprint = spec.partition.query_fingerprint
    producer = HiccupProducer(conn, transactional_id=f"races-{topic}", offsets_topic=offsets)
    producer.failed, producer.release = asyncio.Event(), asyncio.Event()
    store = RecordingStore()
    delivery = TransactionalDelivery(
        spec, producer, StopSignal(), store=store, retry=RetryPolicy(0.01, 0.05)
    )
    try:
        await delivery.begin_generation()
        first = await delivery.deliver_page(_plan(fingerprint, 1))
        assert first is not None
        assert first.failure is None

        # Caught up after the backfill page: the committer rewrites its cursor as "stream".
        producer.hiccup = True
        rewrite = SourceOffset("2026-09-29 07:00:01", f"01{2:030x}", "stream", fingerprint)
        committing = asyncio.ensure_future(delivery.commit(spec.partition, rewrite, deadline=None))
        await producer.failed.wait()
        # The next page queues behind the failing rewrite, ahead of its retry.
        paging = asyncio.ensure_future(delivery.deliver_page(_plan(fingerprint, 2, phase="stream")))
        # Poll until the page waits for the lock: nothing to wait on for that but the lock.
        while not delivery._lock._waiters:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        producer.release.set()

        ack = await paging
        assert ack is not None
        assert ack.failure is None, ack.failure
        assert ack.acked == 3
        await committing  # the retry finds the page's newer offset committed: nothing to do
    finally:
        await producer.close(Deadline.after(10))
    records = await read_topic(kafka_bootstrap, topic, isolation_level="read_committed")
    assert [r.key for r in records] == [e.id.encode() for s in (1, 2) for e in _plan("", s).emits]


#: The transaction timeout the stall tests inject (the product's is 60 s). The delivery bounds a
#: transaction at this less 10 s (at least 1 s): 13 s leaves the page 3 s to reach its commit
#: on a loaded machine before the bound, not the stall, would end it.
STALL_TIMEOUT_MS = 13_000


class StallingProducer(TransactionalProducer):
    """The real producer; with ``stall`` set, its next commit first waits for ``rival`` (the
    newer owner has started) and then blocks the whole event loop past the transaction
    timeout, as SIGSTOP does to a process: every timer fires only after it wakes."""

    stall = False
    rival: asyncio.Event
    at_commit: asyncio.Event

    async def commit(self) -> None:
        if self.stall:
            self.stall = False
            self.at_commit.set()
            await self.rival.wait()
            time.sleep(self.transaction_timeout + 0.5)  # noqa: ASYNC251 - the stall itself
        await super().commit()


async def _eos_setup(
    kafka_bootstrap: str, topic_factory: TopicFactory, name_factory: object
) -> tuple[KafkaConnection, str, str]:
    topic = await topic_factory("races-stall", partitions=1)
    offsets = name_factory("races-stall-offsets")  # type: ignore[operator]
    conn = KafkaConnection(kafka_bootstrap)
    async with admin_client(conn) as admin:
        await create_topic(admin, offsets, partitions=1, replication_factor=1)
    return conn, topic, offsets


def _others(*names: str) -> Callable[[], Awaitable[list[str]]]:
    async def describe() -> list[str]:
        return list(names)

    return describe


@pytest.mark.slow
async def test_a_process_stalled_past_the_transaction_timeout_does_not_fence_the_new_owner(
    kafka_bootstrap: str, topic_factory: TopicFactory, name_factory: object
) -> None:
    """Item 1. The old owner stands still inside a transaction for longer than
    ``transaction.timeout.ms`` (13 s here, injected; 60 s in the product) while a newer owner
    fences it. On waking, its commit is refused like a broker timeout would be; it used to
    restart the table and fence the live owner, whose table then FAILED. Now it stops."""
    conn, topic, offsets = await _eos_setup(kafka_bootstrap, topic_factory, name_factory)
    spec = make_spec(topic=topic)
    fingerprint = spec.partition.query_fingerprint
    txn_id = f"races-{topic}"
    old = StallingProducer(
        conn,
        transactional_id=txn_id,
        offsets_topic=offsets,
        transaction_timeout_ms=STALL_TIMEOUT_MS,
    )
    old.rival, old.at_commit = asyncio.Event(), asyncio.Event()
    new = TransactionalProducer(
        conn,
        transactional_id=txn_id,
        offsets_topic=offsets,
        transaction_timeout_ms=STALL_TIMEOUT_MS,
    )
    retry = RetryPolicy(0.01, 0.05)
    stale = TransactionalDelivery(
        spec,
        old,
        StopSignal(),
        store=RecordingStore(),
        retry=retry,
        others=_others("group member on host-b (pid 2, started 2026-12-01 21:00:00 UTC)"),
    )
    live = TransactionalDelivery(
        spec, new, StopSignal(), store=RecordingStore(), retry=retry, others=_others("old")
    )
    try:
        await stale.begin_generation()
        old.stall = True
        stalled_page = asyncio.ensure_future(stale.deliver_page(_plan(fingerprint, 1)))
        await old.at_commit.wait()  # the page's records are acknowledged, the commit is next
        await live.begin_generation()  # the table moved: its new owner fences the old one
        old.rival.set()
        ack = await stalled_page
        assert ack is not None
        assert ack.acked == 0  # the stalled page's transaction was aborted
        # What the poller does next: an internal restart. It must not fence the live owner.
        with pytest.raises(TableFencedError, match="stood still for longer than"):
            await stale.begin_generation()
        live_ack = await live.deliver_page(_plan(fingerprint, 2))
        assert live_ack is not None
        assert live_ack.failure is None, live_ack.failure
    finally:
        await old.close(Deadline.after(10))
        await new.close(Deadline.after(10))
    records = await read_topic(kafka_bootstrap, topic, isolation_level="read_committed")
    assert [r.key for r in records] == [e.id.encode() for e in _plan("", 2).emits]


@pytest.mark.slow
async def test_a_stalled_process_alone_restarts_its_table(
    kafka_bootstrap: str, topic_factory: TopicFactory, name_factory: object
) -> None:
    """Item 1, the other side: with no other process running nobody can have taken the table,
    the broker only timed the transaction out, so the table restarts and delivers."""
    conn, topic, offsets = await _eos_setup(kafka_bootstrap, topic_factory, name_factory)
    spec = make_spec(topic=topic)
    fingerprint = spec.partition.query_fingerprint
    producer = StallingProducer(
        conn,
        transactional_id=f"races-{topic}",
        offsets_topic=offsets,
        transaction_timeout_ms=STALL_TIMEOUT_MS,
    )
    producer.rival, producer.at_commit = asyncio.Event(), asyncio.Event()
    producer.rival.set()
    delivery = TransactionalDelivery(
        spec,
        producer,
        StopSignal(),
        store=RecordingStore(),
        retry=RetryPolicy(0.01, 0.05),
        others=_others(),
    )
    try:
        await delivery.begin_generation()
        producer.stall = True
        ack = await delivery.deliver_page(_plan(fingerprint, 1))
        assert ack is not None
        assert ack.acked == 0
        await delivery.begin_generation()
        again = await delivery.deliver_page(_plan(fingerprint, 2))
        assert again is not None
        assert again.failure is None, again.failure
    finally:
        await producer.close(Deadline.after(10))
    records = await read_topic(kafka_bootstrap, topic, isolation_level="read_committed")
    # The stalled commit may still have reached the broker before its timeout sweep aborted
    # the transaction; the table's restart reloads the offsets, which say which it was.
    assert [r.key for r in records][-3:] == [e.id.encode() for e in _plan("", 2).emits]
