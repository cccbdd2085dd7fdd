"""The keys live in a table's output topic, read whole for a key sweep (SPEC §14.3).

A compacted consumer keeps a key's last record: a value means the row exists downstream, a
tombstone that it was deleted. The sweep reads every partition from its start to the end it
had when the read began (``read_committed``, so an aborted transaction's records never count),
keeps the records of this table (headers ``snow.instance`` and ``snow.table``) and hands them to
:class:`~snowsource.core.reconcile.LiveKeysBuilder`, which turns them into the compact sorted
array the comparison walks.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition

from snowsource.adapters.kafka import (
    KafkaConnection,
    admin_client,
    close_fully,
    committed_reader,
    existing_topics,
    is_retriable,
    start_fully,
)
from snowsource.core.reconcile import LiveKeys, LiveKeysBuilder

_FETCH_RECORDS = 10000
_MAX_IDLE_POLLS = 5


class TopicKeys:
    """Reads the live keys of tables' output topics over one Kafka connection."""

    def __init__(self, conn: KafkaConnection) -> None:
        self._conn = conn

    def retriable(self, error: BaseException) -> bool:
        """Whether a retry may cure ``error`` (``engine.ports.KafkaErrors``): the one Kafka
        rule, :func:`~snowsource.adapters.kafka.is_retriable`."""
        return is_retriable(error)

    async def live_keys(self, topic: str, *, instance: str, table: str) -> LiveKeys:
        """:func:`read_live_keys` on this connection."""
        return await read_live_keys(self._conn, topic, instance=instance, table=table)


async def read_live_keys(
    conn: KafkaConnection, topic: str, *, instance: str, table: str
) -> LiveKeys:
    """The keys of ``table``'s records in ``topic`` whose last record has a value.

    A missing topic has no live key. Kafka errors are raised as aiokafka raises them (the
    caller retries what is retriable).
    """
    async with admin_client(conn) as admin:
        count = (await existing_topics(admin, [topic])).get(topic, 0)
    builder = LiveKeysBuilder()
    if count == 0:
        return builder.build()
    consumer = committed_reader(conn)
    try:
        await start_fully(consumer)
        tps = [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(tps)
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        for tp in tps:
            if end[tp] > begin[tp]:
                consumer.seek(tp, begin[tp])
                await _read_partition(
                    consumer, tp, end[tp], builder, instance.encode(), table.encode()
                )
    finally:
        await close_fully(consumer)
    return builder.build()


async def _read_partition(  # noqa: PLR0917 - one private helper of read_live_keys
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    stop: int,
    builder: LiveKeysBuilder,
    instance: bytes,
    table: bytes,
) -> None:
    idle = 0
    while True:
        position = await consumer.position(tp)
        if position >= stop:
            return
        batch = (await consumer.getmany(tp, timeout_ms=1000, max_records=_FETCH_RECORDS)).get(tp)
        if not batch:
            # Control records of transactions move the position without a record; a broker
            # that stops answering must not hang the sweep (it retries from the start).
            idle += 1
            if idle >= _MAX_IDLE_POLLS and await consumer.position(tp) == position:
                raise TimeoutError(f"reading {tp.topic}[{tp.partition}] stalled at {position}")
            continue
        idle = 0
        for record in batch:
            if record.offset >= stop:
                return
            if record.key is None or not _is_table(record.headers, instance, table):
                continue
            builder.add(record.key.decode("utf-8", "replace"), record.value is not None)


def _is_table(headers: tuple[tuple[str, bytes], ...], instance: bytes, table: bytes) -> bool:
    found_instance = found_table = False
    for name, value in headers:
        if name == "snow.table":
            found_table = value == table
        elif name == "snow.instance":
            found_instance = value == instance
    return found_instance and found_table
