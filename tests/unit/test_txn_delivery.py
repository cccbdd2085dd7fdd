"""The transactional delivery's branches against a fake producer: commit, abort, fenced.

What Kafka itself does with transactions (read_committed, fencing between processes) is tested
on the real broker in ``tests/integration/test_exactly_once*.py``; here the point is what the
delivery does with each answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from aiokafka.errors import (
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)

from snowsource.adapters.kafka import is_retriable
from snowsource.adapters.txn_producer import is_fenced
from snowsource.core.errors import TableFailedError
from snowsource.core.offsets_codec import SourcePartition, encode_key, encode_value
from snowsource.core.outbound import Headers, PageAck, PageRecordLike, RecordFailure
from snowsource.core.page import Emit, PagePlan
from snowsource.core.retry import RetryPolicy
from snowsource.core.txn_id import transactional_id
from snowsource.engine.committer import OffsetWriter
from snowsource.engine.txn_delivery import (
    TableFencedError,
    TransactionalDelivery,
    TransactionFailedError,
)
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.retrying import StoppedError
from tests.fakes import CONNECTOR, make_spec

FINGERPRINT = make_spec().partition.query_fingerprint


def test_the_transactional_id_is_the_offsets_key_hashed() -> None:
    # sha256 of the contract's first key vector, computed with sha256sum over its bytes.
    partition = SourcePartition(
        instance="acme.service-now.com",
        timestamp_field="sys_updated_on",
        query_fingerprint="sha256:580b9177efcc5fd9166d599005c4bc14d889aec38b4fbd0679db629ad5bcfcc1",
        table="incident",
    )
    assert encode_key("servicenow-source", partition) == (
        b'["servicenow-source",{"instance":"acme.service-now.com",'
        b'"timestamp_field":"sys_updated_on","query_fingerprint":'
        b'"sha256:580b9177efcc5fd9166d599005c4bc14d889aec38b4fbd0679db629ad5bcfcc1",'
        b'"table":"incident"}]'
    )
    assert (
        transactional_id("servicenow-source", partition)
        == "snowsource-servicenow-source-7842cab4513023eeb126"
    )


def test_the_id_follows_the_table_not_the_alias() -> None:
    one = make_spec("incident").partition
    other = make_spec("tickets", name="incident").partition
    assert transactional_id("c", one) == transactional_id("c", other)
    assert transactional_id("c", one) != transactional_id("d", one)
    assert transactional_id("c", one) != transactional_id("c", make_spec("problem").partition)


@dataclass
class FakeProducer:
    """Records each call; ``fail`` maps a step to the error it raises (or the page fails)."""

    transactional_id: str = "snowsource-fake-0123456789abcdef0123"
    transaction_timeout: float = 60.0
    calls: list[tuple[str, Any]] = field(default_factory=list)
    fail: dict[str, BaseException] = field(default_factory=dict)
    page_failure: RecordFailure | None = None
    opened: int = 0
    discarded: bool = False
    age_seconds: float = 0.0
    hold_commit: asyncio.Event | None = None

    async def open(self, *, fresh: bool = False) -> None:
        if not fresh and not self.discarded:
            return  # a healthy producer is kept, as the real one does
        self.opened += 1
        self.discarded = False
        self.calls.append(("open", None))

    async def begin(self) -> None:
        self._step("begin", None)

    async def send_page(
        self, topic: str, records: Any, *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        page: list[PageRecordLike] = list(records)
        self._step("page", [key for key, _value, _headers in page])
        future: asyncio.Future[PageAck] = asyncio.get_running_loop().create_future()
        failure = self.page_failure
        acked = len(page) if failure is None else failure.index
        future.set_result(PageAck(records=len(page), acked=acked, failure=failure))
        return future

    async def send_offset(self, key: bytes, value: bytes) -> asyncio.Future[object]:
        self._step("offset", (key, value))
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def commit(self) -> None:
        if self.hold_commit is not None:
            await self.hold_commit.wait()
        self._step("commit", None)

    async def abort(self, within: float) -> None:
        self.calls.append(("abort", None))
        self.discarded = True

    def age(self) -> float:
        return self.age_seconds

    def retriable(self, error: BaseException) -> bool:
        return is_retriable(error)  # the adapter's own rules

    def fenced(self, error: BaseException) -> bool:
        return is_fenced(error)

    async def close(self, deadline: Deadline | None = None) -> None:
        self.calls.append(("close", None))

    def discard(self) -> None:
        self.discarded = True

    def _step(self, name: str, detail: Any) -> None:
        self.calls.append((name, detail))
        error = self.fail.get(name)
        if error is not None:
            raise error

    @property
    def steps(self) -> list[str]:
        return [name for name, _ in self.calls]


@dataclass
class FakeStore:
    connector: str = CONNECTOR
    loads: int = 0
    written: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    order: list[str] | None = None

    async def load(self) -> None:
        self.loads += 1
        if self.order is not None:
            self.order.append("load")

    def written_elsewhere(self, key: bytes, value: bytes | None, stamp_ms: int = -1) -> None:
        self.written.append((key, value))


def _plan(n: int = 3, phase: str = "backfill") -> PagePlan:
    emits = [
        Emit(
            (phase, FINGERPRINT),
            f"2026-09-29 07:00:0{i}",
            f"{i:032x}",
            b'{"v":%d}' % i,
            (f"2026-09-29 07:00:0{i}", f"{i:032x}"),
        )
        for i in range(n)
    ]
    return PagePlan(phase=phase, fingerprint=FINGERPRINT, emits=emits)


async def _members() -> list[str]:
    return ["task 1 on elsewhere (pid 42, started 2026-12-01 12:00:00 UTC)"]


def _delivery(
    producer: FakeProducer, store: FakeStore | None = None, stop: StopSignal | None = None
) -> tuple[TransactionalDelivery, FakeStore]:
    store = store or FakeStore()
    delivery = TransactionalDelivery(
        make_spec(),
        producer,
        stop or StopSignal(),
        store=store,
        retry=RetryPolicy(0.001, 0.001),
        others=_members,
    )
    return delivery, store


KEY = encode_key(CONNECTOR, make_spec().partition)


async def test_a_page_and_its_offset_commit_in_one_transaction() -> None:
    producer = FakeProducer()
    delivery, store = _delivery(producer)
    plan = _plan()
    ack = await delivery.deliver_page(plan)
    assert ack is not None
    assert ack.complete
    assert producer.steps == ["begin", "page", "offset", "commit"]
    value = encode_value(plan.emits[-1].offset)
    assert producer.calls[2] == ("offset", (KEY, value))
    # The store learns of the offset only once the transaction committed.
    assert store.written == [(KEY, value)]


async def test_the_committers_write_of_a_page_offset_is_not_repeated() -> None:
    producer = FakeProducer()
    delivery, store = _delivery(producer)
    plan = _plan()
    await delivery.deliver_page(plan)
    offsets = delivery.offsets(_unused_writer())
    await offsets.commit(make_spec().partition, plan.emits[-1].offset, deadline=None)
    await offsets.commit(make_spec().partition, plan.emits[0].offset, deadline=None)
    assert producer.steps == ["begin", "page", "offset", "commit"]
    assert len(store.written) == 1


async def test_a_transaction_writes_no_offset_below_one_committed_before() -> None:
    # A sliced backfill asks each transaction for the prefix, which may not count an earlier
    # committed page as acknowledged yet; a failed transaction must not count at all.
    producer = FakeProducer()
    delivery, store = _delivery(producer)
    first, second, third = _plan(), _plan(), _plan()
    high, low = first.emits[-1].offset, first.emits[0].offset
    first.commit_offset = lambda: high
    second.commit_offset = lambda: low
    await delivery.deliver_page(first)
    producer.calls.clear()
    ack = await delivery.deliver_page(second)
    assert ack is not None
    assert ack.complete
    assert producer.steps == ["begin", "page", "commit"]  # the page, and no offset record
    assert store.written == [(KEY, encode_value(high))]
    # An aborted transaction's offset is no floor: a lower one still commits after it.
    producer.page_failure = RecordFailure(1, NotLeaderForPartitionError(), fatal=False)
    failed = _plan()
    failed.commit_offset = lambda: replace(high, timestamp="2026-09-29 08:00:00")
    assert (await delivery.deliver_page(failed)).acked == 0  # type: ignore[union-attr]
    producer.page_failure = None
    higher = replace(high, timestamp="2026-09-29 07:30:00")
    third.commit_offset = lambda: higher
    await delivery.deliver_page(third)
    assert store.written[-1] == (KEY, encode_value(higher))


async def test_the_stream_rewrite_is_a_transaction_of_its_own() -> None:
    producer = FakeProducer()
    delivery, store = _delivery(producer)
    plan = _plan()
    await delivery.deliver_page(plan)
    streamed = replace(plan.emits[-1].offset, phase="stream")
    await delivery.commit(make_spec().partition, streamed, deadline=None)
    assert producer.steps[4:] == ["begin", "offset", "commit"]
    assert producer.calls[-2] == ("offset", (KEY, encode_value(streamed)))
    assert store.written[-1] == (KEY, encode_value(streamed))


async def test_a_page_after_a_failed_rewrite_starts_the_discarded_producer_again() -> None:
    """Issue 23 item 2 (the interleaving itself is driven on the broker in test_races_txn)."""
    producer = FakeProducer()
    delivery, _store = _delivery(producer)
    plan = _plan()
    await delivery.deliver_page(plan)
    producer.fail["commit"] = KafkaTimeoutError()
    with pytest.raises(TransactionFailedError):
        # One attempt of the rewrite, without the retry around it.
        await delivery._offset_transaction(
            replace(plan.emits[-1].offset, phase="stream"), Deadline.never()
        )
    del producer.fail["commit"]
    ack = await delivery.deliver_page(_plan(phase="stream"))
    assert ack is not None
    assert ack.failure is None
    assert producer.steps[-5:] == ["open", "begin", "page", "offset", "commit"]


async def test_a_failed_record_aborts_the_page_and_nothing_is_acknowledged() -> None:
    producer = FakeProducer(
        page_failure=RecordFailure(1, NotLeaderForPartitionError(), fatal=False)
    )
    delivery, store = _delivery(producer)
    ack = await delivery.deliver_page(_plan())
    assert ack is not None
    assert (ack.acked, ack.records) == (0, 3)
    assert ack.failure is not None
    assert ack.failure.index == 1
    assert not ack.failure.fatal
    assert producer.steps == ["begin", "page", "abort"]
    assert producer.discarded
    assert store.written == []


async def test_a_record_kafka_refuses_fails_the_page_naming_that_record() -> None:
    producer = FakeProducer(page_failure=RecordFailure(2, MessageSizeTooLargeError(), fatal=True))
    delivery, _ = _delivery(producer)
    ack = await delivery.deliver_page(_plan())
    assert ack is not None
    assert ack.acked == 0
    assert ack.failure is not None
    assert (ack.failure.index, ack.failure.fatal) == (2, True)
    assert "offset" not in producer.steps


@pytest.mark.parametrize("step", ["begin", "offset", "commit"])
async def test_a_failed_transaction_is_aborted_and_restarts_the_table(step: str) -> None:
    producer = FakeProducer(fail={step: KafkaTimeoutError()})
    delivery, store = _delivery(producer)
    ack = await delivery.deliver_page(_plan())
    assert ack is not None
    assert ack.acked == 0
    assert ack.failure is not None
    assert isinstance(ack.failure.error, TransactionFailedError)
    assert ack.failure.error.retriable
    assert not ack.failure.fatal
    assert producer.transactional_id in str(ack.failure.error)
    assert producer.steps[-1] == "abort"
    assert "commit" not in producer.steps[:-1] or step == "commit"
    assert store.written == []


async def test_a_transaction_that_does_not_commit_in_time_is_aborted() -> None:
    producer = FakeProducer(transaction_timeout=11.0, hold_commit=asyncio.Event())
    delivery, store = _delivery(producer)
    # The delivery's own bound is the broker's timeout minus a margin: one second here.
    ack = await asyncio.wait_for(delivery.deliver_page(_plan()), 5)
    assert ack is not None
    assert ack.acked == 0
    assert ack.failure is not None
    assert isinstance(ack.failure.error, TransactionFailedError)
    assert producer.steps[-1] == "abort"
    assert store.written == []


@pytest.mark.parametrize("step", ["page", "commit"])
async def test_a_fenced_producer_fails_the_table_and_writes_no_offset_any_more(step: str) -> None:
    if step == "page":
        producer = FakeProducer(page_failure=RecordFailure(0, ProducerFenced(), fatal=True))
    else:
        producer = FakeProducer(fail={"commit": ProducerFenced()})
    delivery, store = _delivery(producer)
    with pytest.raises(TableFencedError) as raised:
        await delivery.deliver_page(_plan())
    message = str(raised.value)
    assert "fenced" in message
    assert producer.transactional_id in message
    assert "pid 42" in message  # the other live process, as the group describes it
    assert isinstance(raised.value, TableFailedError)
    before = list(producer.calls)
    with pytest.raises(TableFencedError):
        await delivery.commit(make_spec().partition, _plan().emits[-1].offset, deadline=None)
    with pytest.raises(TableFencedError):
        await delivery.begin_generation()
    assert producer.calls == before
    assert store.written == []


async def test_a_transaction_the_broker_timed_out_is_not_taken_for_a_fence() -> None:
    producer = FakeProducer(fail={"commit": ProducerFenced()}, age_seconds=61.0)
    delivery, _ = _delivery(producer)
    ack = await delivery.deliver_page(_plan())
    assert ack is not None
    assert ack.failure is not None
    assert isinstance(ack.failure.error, TransactionFailedError)


@dataclass
class JudgingProducer(FakeProducer):
    """A producer with rules of its own: a timeout is a fence, a ``ValueError`` transient."""

    def retriable(self, error: BaseException) -> bool:
        return isinstance(error, ValueError)

    def fenced(self, error: BaseException) -> bool:
        return isinstance(error, KafkaTimeoutError)


async def test_the_delivery_takes_its_producer_s_word_for_a_fence() -> None:
    # A timeout is no fence by the Kafka rule: only the producer's own answer makes it one.
    producer = JudgingProducer(fail={"commit": KafkaTimeoutError()})
    delivery, store = _delivery(producer)
    with pytest.raises(TableFencedError):
        await delivery.deliver_page(_plan())
    assert store.written == []


async def test_a_generation_start_retries_what_its_producer_calls_retriable() -> None:
    # A ValueError is fatal by the Kafka rule: only the producer's own answer retries it.
    producer = JudgingProducer()
    failures = [ValueError("transient, says this producer")]

    async def open_(*, fresh: bool = False) -> None:
        if failures:
            raise failures.pop()

    producer.open = open_  # type: ignore[method-assign]
    delivery, store = _delivery(producer)
    await delivery.begin_generation()
    assert (failures, store.loads) == ([], 1)
    ordinary = FakeProducer()
    ordinary.open = open_  # type: ignore[method-assign]
    plain, _ = _delivery(ordinary)
    failures.append(ValueError("fatal by the Kafka rule"))
    with pytest.raises(ValueError, match="fatal by the Kafka rule"):
        await plain.begin_generation()


async def test_a_refused_transactional_id_fails_the_table_naming_the_acl() -> None:
    producer = FakeProducer(fail={"begin": TransactionalIdAuthorizationFailed()})
    delivery, _ = _delivery(producer)
    with pytest.raises(TableFailedError) as raised:
        await delivery.deliver_page(_plan())
    assert "TransactionalId" in str(raised.value)
    assert producer.transactional_id in str(raised.value)
    assert not isinstance(raised.value, TableFencedError)


async def test_a_generation_fences_first_then_reads_the_offsets() -> None:
    order: list[str] = []
    producer = FakeProducer()
    store = FakeStore(order=order)

    async def open_(*, fresh: bool = False) -> None:
        order.append("open" if fresh else "open (reused)")

    producer.open = open_  # type: ignore[method-assign]
    delivery, _ = _delivery(producer, store)
    await delivery.begin_generation()
    assert order == ["open", "load"]


async def test_past_the_stop_deadline_the_page_is_abandoned_and_the_producer_discarded() -> None:
    producer = FakeProducer(hold_commit=asyncio.Event())
    stop = StopSignal()
    delivery, store = _delivery(producer, stop=stop)
    stop.request(Deadline.after(0.05))
    assert await delivery.deliver_page(_plan()) is None
    assert producer.discarded
    assert store.written == []


def _unused_writer() -> OffsetWriter:
    class Refusing:
        async def write(self, *args: object) -> None:
            raise AssertionError("exactly-once never writes beside its transactions")

    return OffsetWriter(Refusing(), RetryPolicy(0.001, 0.001), table="incident")  # type: ignore[arg-type]


async def test_a_refused_transactional_id_at_producer_start_fails_the_table() -> None:
    producer = FakeProducer()

    async def refuse(*, fresh: bool = False) -> None:
        raise TransactionalIdAuthorizationFailed()

    producer.open = refuse  # type: ignore[method-assign]
    delivery, store = _delivery(producer)
    with pytest.raises(TableFailedError) as raised:
        await delivery.begin_generation()
    assert "IdempotentWrite" in str(raised.value)
    assert store.loads == 0


async def test_stop_abandons_a_producer_start_that_waits_for_the_coordinator() -> None:
    producer = FakeProducer()
    started = asyncio.Event()

    async def hang(*, fresh: bool = False) -> None:
        started.set()
        await asyncio.Event().wait()  # no transaction coordinator answers

    producer.open = hang  # type: ignore[method-assign]
    stop = StopSignal()
    delivery, store = _delivery(producer, stop=stop)
    starting = asyncio.create_task(delivery.begin_generation())
    await started.wait()
    stop.request(Deadline.after(1))
    with pytest.raises(StoppedError):
        await asyncio.wait_for(starting, 5)
    assert producer.discarded
    assert store.loads == 0
