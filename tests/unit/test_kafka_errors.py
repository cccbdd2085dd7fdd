"""The one Kafka error rule (retriable, fatal, fenced) and who applies it.

The rule lives in the adapters (``adapters.kafka.is_retriable``: aiokafka's ``retriable`` flag
plus its client-side timeout; ``adapters.txn_producer.is_fenced``). The engine never imports
it: each Kafka port answers for its own errors (``engine.ports.KafkaErrors``), so these tests
pin the rule, check that every adapter the engine sees answers with it, and that the engine
asks the port rather than a rule of its own.
"""

from __future__ import annotations

import aiokafka.errors as kafka
import pytest

from snowsource.adapters.kafka import KafkaConnection, is_retriable
from snowsource.adapters.offset_store import OffsetStore
from snowsource.adapters.topic_keys import TopicKeys
from snowsource.adapters.topic_tail import TailStalledError, TopicTail
from snowsource.adapters.txn_producer import TransactionalProducer, is_fenced
from snowsource.core.retry import RetryPolicy
from snowsource.engine.committer import OffsetWriter
from snowsource.engine.ports import KafkaErrors, OffsetsStore
from snowsource.engine.reconcile import LiveKeySource
from snowsource.engine.resume import OutputTail
from snowsource.engine.txn_delivery import TransactionFailedError, TxnProducer
from tests.fakes import FakeStore, make_spec

RETRIABLE = "retriable"
FATAL = "fatal"
FENCED = "fenced"

# Each error and what the rule makes of it: retried after a backoff, fatal at once, or (for a
# transactional producer) fenced by a newer one. Fenced errors are not retriable either.
CASES: list[tuple[BaseException, str]] = [
    (kafka.KafkaConnectionError(), RETRIABLE),
    (kafka.KafkaTimeoutError(), RETRIABLE),  # the client's own timeout: a broker unreachable
    (TimeoutError(), RETRIABLE),
    (kafka.RequestTimedOutError(), RETRIABLE),
    (kafka.NotLeaderForPartitionError(), RETRIABLE),
    (kafka.NodeNotReadyError(), RETRIABLE),
    (kafka.UnknownTopicOrPartitionError(), RETRIABLE),
    (kafka.GroupCoordinatorNotAvailableError(), RETRIABLE),
    (kafka.NotEnoughReplicasError(), RETRIABLE),
    (TransactionFailedError("aborted"), RETRIABLE),  # the engine's own, flagged retriable
    (TailStalledError("stalled"), RETRIABLE),
    (kafka.TopicAuthorizationFailedError(), FATAL),
    (kafka.MessageSizeTooLargeError(), FATAL),
    (kafka.TransactionalIdAuthorizationFailed(), FATAL),
    (kafka.OutOfOrderSequenceNumber(), FATAL),
    (kafka.KafkaError(), FATAL),
    (ValueError("a bug"), FATAL),
    (OSError("not Kafka's"), FATAL),
    (ConnectionResetError(), FATAL),
    (kafka.ProducerFenced(), FENCED),
    (kafka.InvalidProducerEpoch(), FENCED),
]
IDS = [f"{type(error).__name__}-{kind}" for error, kind in CASES]
CONN = KafkaConnection("127.0.0.1:1")


def _ports() -> list[KafkaErrors]:
    # Typed as the engine's ports: mypy checks each adapter satisfies the one it stands for.
    store: OffsetsStore = OffsetStore(CONN, topic="offsets", connector="c")
    tail: OutputTail = TopicTail(CONN)
    keys: LiveKeySource = TopicKeys(CONN)
    producer: TxnProducer = _producer()
    return [store, tail, keys, producer]


def _producer() -> TransactionalProducer:
    return TransactionalProducer(CONN, transactional_id="snowsource-t", offsets_topic="offsets")


@pytest.mark.parametrize(("error", "kind"), CASES, ids=IDS)
def test_the_rule_classifies_each_kafka_error(error: BaseException, kind: str) -> None:
    assert is_retriable(error) is (kind == RETRIABLE)
    assert is_fenced(error) is (kind == FENCED)


def test_no_error_is_no_fence() -> None:
    assert not is_fenced(None)


@pytest.mark.parametrize(("error", "kind"), CASES, ids=IDS)
def test_every_kafka_port_answers_with_the_one_rule(error: BaseException, kind: str) -> None:
    for port in _ports():
        assert port.retriable(error) is (kind == RETRIABLE), type(port).__name__
    assert _producer().fenced(error) is (kind == FENCED)


class _JudgingStore(FakeStore):
    """A store whose own rule calls every error ``verdict``; its first write raises ``error``."""

    def __init__(self, error: BaseException, verdict: bool) -> None:
        super().__init__(on_write=self._fail_once)
        self.error: BaseException | None = error
        self.verdict = verdict
        self.judged: list[BaseException] = []

    def _fail_once(self, key: bytes, value: bytes | None) -> None:
        del key, value
        error, self.error = self.error, None
        if error is not None:
            raise error

    def retriable(self, error: BaseException) -> bool:
        self.judged.append(error)
        return self.verdict


async def test_the_offset_writer_retries_what_its_store_calls_retriable() -> None:
    # ValueError is fatal by the Kafka rule: only the store's own answer makes it retried.
    error = ValueError("the store's own transient error")
    store = _JudgingStore(error, verdict=True)
    writer = OffsetWriter(store, RetryPolicy(0.001, 0.001), table="incident")
    await writer.write(make_spec().partition, b"{}")
    assert store.judged == [error]
    assert len(store.writes) == 1


async def test_the_offset_writer_gives_up_on_what_its_store_calls_fatal() -> None:
    # A connection error is retriable by the Kafka rule: the store's answer overrides it.
    error = kafka.KafkaConnectionError()
    store = _JudgingStore(error, verdict=False)
    writer = OffsetWriter(store, RetryPolicy(0.001, 0.001), table="incident")
    with pytest.raises(kafka.KafkaConnectionError):
        await writer.write(make_spec().partition, b"{}")
    assert store.judged == [error]
    assert store.writes == []
