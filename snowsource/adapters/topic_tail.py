"""Read what a table already put in its output topic, so a restart re-emits nothing (§13.4).

After a restart, a resume or an internal restart the first sweep re-reads the overlap window
before the committed cursor. Every row in that window that already reached Kafka would be
produced again if the dedup cache started empty, and in at-least-once mode so would the records
acknowledged after the last offset write. This module rebuilds the cache from the topic itself:
the records of *this* table (headers ``snow.instance`` and ``snow.table``) whose
``snow.timestamp`` lies in the re-read window.

Only the tail of each partition is read. Within a partition a table's records appear in the
order they were produced, which follows the cursor up to the overlap re-reads of earlier
restarts, so walking backwards from the end in growing steps and stopping once a record of this
table is older than the window by more than one further overlap (slack for those re-reads) finds
every record of the window without touching the rest of the topic. A hard cap on scanned
records keeps a pathological topic (another writer's traffic, a rewind) from turning the
rebuild into a full read: past it the rebuild stops early and says so — at worst a duplicate,
never a loss, because the cache only ever suppresses exact repeats.

A delete stream shares its table's topic and headers, so it reads the same records and keeps
only the tombstones (``snow.operation: delete``). Its dedup cache is keyed like its rows — by
the audit row's sys_id, carried in the ``snow.audit_id`` header, with the digest of the deleted
row's key — because the record key alone (the documentkey) is not what the stream reads again.
A tombstone written before that header existed cannot be matched and is skipped: it may be
emitted once more, never lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from snowsource.adapters.kafka import KafkaConnection, admin_client, existing_topics
from snowsource.core.dedup import digest
from snowsource.core.deletes import AUDIT_ID_HEADER, DELETE, OPERATION_HEADER
from snowsource.core.outbound import (
    INSTANCE_HEADER,
    PHASE_HEADER,
    TABLE_HEADER,
    TIMESTAMP_HEADER,
)

log = structlog.get_logger(__name__)

#: Records fetched per partition in the first backward step; each further step is 4x larger.
FIRST_STEP = 2000
_MAX_IDLE_POLLS = 5


@dataclass(frozen=True)
class EmittedRecord:
    """One record of the table found in its topic: what the dedup cache remembers."""

    id: str
    ts: str
    digest: bytes
    produced_ms: int = 0  # the record's Kafka timestamp: when it was produced


@dataclass
class TailResult:
    """Records of the window in produce order per partition, and what reading them cost."""

    records: list[EmittedRecord]
    scanned: int
    complete: bool  # False when the scan cap stopped a partition before the window's start


@dataclass(frozen=True)
class _Window:
    """Which records belong to the table and the window."""

    instance: bytes
    table: bytes
    since: str
    slack_floor: str
    deletes: bool = False  # a delete stream's window: its tombstones, by audit row
    # Backfill records of a sliced backfill are not in cursor order (SPEC §14.2): their age
    # says nothing about what lies before them, so they never end the backward walk.
    unordered_backfill: bool = False


class TopicTail:
    """The output topics' tails, as the engine's dedup-cache rebuild reads them."""

    def __init__(self, conn: KafkaConnection) -> None:
        self._conn = conn

    async def read_window(
        self,
        topic: str,
        *,
        instance: str,
        table: str,
        since: str,
        slack_floor: str,
        max_scanned: int,
        deletes: bool = False,
        unordered_backfill: bool = False,
    ) -> TailResult:
        """:func:`read_window` on this connection."""
        return await read_window(
            self._conn,
            topic,
            instance=instance,
            table=table,
            since=since,
            slack_floor=slack_floor,
            max_scanned=max_scanned,
            deletes=deletes,
            unordered_backfill=unordered_backfill,
        )


def _header(headers: tuple[tuple[str, bytes], ...] | list[tuple[str, bytes]], name: str) -> bytes:
    for key, value in headers:
        if key == name:
            return value
    return b""


async def read_window(
    conn: KafkaConnection,
    topic: str,
    *,
    instance: str,
    table: str,
    since: str,
    slack_floor: str,
    max_scanned: int,
    first_step: int = FIRST_STEP,
    deletes: bool = False,
    unordered_backfill: bool = False,
) -> TailResult:
    """This table's records in ``topic`` with ``snow.timestamp >= since``, read_committed.

    ``slack_floor`` (at most ``since``) is where the backward walk may stop: once a partition
    shows a record of this table older than it, nothing of the window lies before. Tombstones
    (null values) are returned too, with an empty digest, so deleted ids are remembered as such.
    With ``deletes`` (``table`` is then the base table) only the tombstones are returned, each
    as its delete stream emitted it: id = the audit row's sys_id, digest of the record key.
    With ``unordered_backfill`` only ``stream``-phase records end the walk (``max_scanned``
    still bounds it): a sliced backfill produces its ranges side by side.
    """
    window = _Window(
        instance.encode(), table.encode(), since, slack_floor, deletes, unordered_backfill
    )
    async with admin_client(conn) as admin:
        count = (await existing_topics(admin, [topic])).get(topic, 0)
    if count == 0:
        return TailResult([], 0, True)
    consumer = AIOKafkaConsumer(
        **conn.client_kwargs(),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    found: list[EmittedRecord] = []
    scanned = 0
    complete = True
    try:
        tps = [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(tps)
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        for tp in tps:
            records, read, whole = await _walk_back(
                consumer,
                tp,
                (begin[tp], end[tp]),
                window,
                budget=max_scanned - scanned,
                step=first_step,
            )
            found.extend(records)
            scanned += read
            complete = complete and whole
    finally:
        await consumer.stop()
    if not complete:
        log.warning(
            "output topic tail too long to rebuild the dedup cache completely; rows of the "
            "re-read window may be emitted once more",
            topic=topic,
            scanned=scanned,
        )
    return TailResult(found, scanned, complete)


async def _walk_back(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    bounds: tuple[int, int],
    window: _Window,
    *,
    budget: int,
    step: int,
) -> tuple[list[EmittedRecord], int, bool]:
    """One partition read backwards from its end in growing steps, until a record older than
    the window shows nothing of it lies before: its records in order, how many were read, and
    whether the walk ended before ``budget`` records did."""
    begin, stop_at = bounds
    chunks: list[list[EmittedRecord]] = []
    scanned = 0
    while stop_at > begin:
        if budget - scanned <= 0:
            return [r for chunk in reversed(chunks) for r in chunk], scanned, False
        start = max(begin, stop_at - min(step, budget - scanned))
        chunk, older_seen, count = await _read_range(consumer, tp, start, stop_at, window)
        scanned += count
        chunks.append(chunk)
        if older_seen:
            break
        stop_at = start
        step *= 4
    return [r for chunk in reversed(chunks) for r in chunk], scanned, True


async def _read_range(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    start: int,
    stop: int,
    window: _Window,
) -> tuple[list[EmittedRecord], bool, int]:
    """Records of the table in ``[start, stop)`` of ``tp`` within the window, whether one older
    than the window's slack floor was seen, and how many records were read."""
    consumer.seek(tp, start)
    chunk: list[EmittedRecord] = []
    older_seen = False
    count = 0
    idle = 0
    while True:
        position = await consumer.position(tp)
        if position >= stop:
            break
        batch = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
        if not batch.get(tp):
            # Aborted or control records only: the position still moves; a broker that stops
            # answering must not hang a restart (a duplicate is the worst outcome).
            idle += 1
            if idle >= _MAX_IDLE_POLLS and await consumer.position(tp) == position:
                break
            continue
        idle = 0
        for record in batch.get(tp, []):
            if record.offset >= stop:
                return chunk, older_seen, count
            count += 1
            headers = record.headers
            if (
                record.key is None
                or _header(headers, TABLE_HEADER) != window.table
                or _header(headers, INSTANCE_HEADER) != window.instance
            ):
                continue
            if window.deletes and (
                record.value is not None or _header(headers, OPERATION_HEADER) != DELETE
            ):
                continue
            ts = _header(headers, TIMESTAMP_HEADER).decode("utf-8", "replace")
            if ts < window.slack_floor and not (
                window.unordered_backfill and _header(headers, PHASE_HEADER) == b"backfill"
            ):
                older_seen = True
            if ts >= window.since:
                emitted = _emitted(record, ts=ts, window=window)
                if emitted is not None:
                    chunk.append(emitted)
    return chunk, older_seen, count


def _emitted(
    record: ConsumerRecord[bytes, bytes], *, ts: str, window: _Window
) -> EmittedRecord | None:
    """What the stream's dedup cache remembered when it emitted this record, if known."""
    key, value, produced_ms = record.key, record.value, record.timestamp
    if not window.deletes:
        return EmittedRecord(
            id=key.decode("utf-8", "replace"),
            ts=ts,
            digest=digest(value) if value is not None else b"",
            produced_ms=produced_ms,
        )
    audit_id = _header(record.headers, AUDIT_ID_HEADER)
    if not audit_id:
        return None
    # The delete stream's row value is the deleted row's key (TombstoneShaper), sent as the key.
    return EmittedRecord(
        id=audit_id.decode("utf-8", "replace"), ts=ts, digest=digest(key), produced_ms=produced_ms
    )
