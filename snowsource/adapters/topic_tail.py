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

import time
from dataclasses import dataclass, field

import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from snowsource.adapters.kafka import (
    KafkaConnection,
    admin_client,
    close_fully,
    committed_reader,
    existing_topics,
    high_watermarks,
    is_retriable,
    start_fully,
)
from snowsource.core.dedup import EmittedRecord, TailResult, digest
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
#: How long a partition's position may stand still before the read counts as stalled. Longer
#: than a killed process's open transaction can hold the last stable offset back (the
#: transaction timeout, 60 s, plus the broker's 10 s sweep for timed-out transactions).
STALL_SECONDS = 90.0


class TailStalledError(KafkaError):  # type: ignore[misc]
    """A partition's read stood still: the broker stopped answering. Retried by the caller."""

    retriable = True


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

    def retriable(self, error: BaseException) -> bool:
        """Whether a retry may cure ``error`` (``engine.ports.KafkaErrors``): the one Kafka
        rule, :func:`~snowsource.adapters.kafka.is_retriable`."""
        return is_retriable(error)

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
    stall_seconds: float = STALL_SECONDS,
    unordered_backfill: bool = False,
) -> TailResult:
    """This table's records in ``topic`` with ``snow.timestamp >= since``, read_committed.

    ``slack_floor`` (at most ``since``) is where the backward walk may stop: once a partition
    shows a record of this table older than it, nothing of the window lies before. Tombstones
    (null values) are returned too, with an empty digest, so deleted ids are remembered as such.
    With ``deletes`` (``table`` is then the base table) only the tombstones are returned, each
    as its delete stream emitted it: id = the audit row's sys_id, digest of the record key.

    Every partition is read up to its high watermark, not the last stable offset: another
    producer's open transaction must not hide this table's records committed after it began.
    A partition whose position stands still for ``stall_seconds`` raises
    :class:`TailStalledError` (retriable) instead of returning a partial window.

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
    tps = [TopicPartition(topic, p) for p in range(count)]
    walks, scanned, complete = await _walk_partitions(
        conn, tps, window, first_step, stall_seconds, max_scanned
    )
    found = [record for walk in walks for chunk in reversed(walk.chunks) for record in chunk]
    if not complete:
        log.warning(
            "output topic tail too long to rebuild the dedup cache completely; rows of the "
            "re-read window may be emitted once more",
            topic=topic,
            scanned=scanned,
        )
    return TailResult(found, scanned, complete)


async def _walk_partitions(  # noqa: PLR0917 - one private helper of read_window
    conn: KafkaConnection,
    tps: list[TopicPartition],
    window: _Window,
    first_step: int,
    stall_seconds: float,
    max_scanned: int,
) -> tuple[list[_Walk], int, bool]:
    """Walk every partition back from its high watermark: the walks, the records scanned, and
    whether the window was read completely (``max_scanned`` not reached)."""
    end = await high_watermarks(conn, tps)
    consumer = committed_reader(conn)
    try:
        await start_fully(consumer)
        consumer.assign(tps)
        begin = await consumer.beginning_offsets(tps)
        walks = [_Walk(tp, begin[tp], end[tp], first_step) for tp in tps]
        reader = _RangeReader(consumer, window, stall_seconds)
        scanned, complete = await _walk_back(reader, walks, max_scanned)
    finally:
        await close_fully(consumer)
    return walks, scanned, complete


@dataclass
class _Walk:
    """One partition's backward walk: the chunks read so far, newest first."""

    tp: TopicPartition
    begin: int
    stop_at: int
    step: int
    chunks: list[list[EmittedRecord]] = field(default_factory=list)
    done: bool = False


async def _walk_back(
    reader: _RangeReader, walks: list[_Walk], max_scanned: int
) -> tuple[int, bool]:
    """Step every partition back in rounds, each step at most an equal share of the budget
    left, so a partition with a long tail (another writer's traffic) cannot starve the others
    of the scan budget. Returns records scanned and whether every walk reached its end."""
    scanned = 0
    for walk in walks:
        walk.done = walk.stop_at <= walk.begin
    while active := [walk for walk in walks if not walk.done]:
        share = (max_scanned - scanned) // len(active)
        if share <= 0:
            return scanned, False
        for walk in active:
            start = max(walk.begin, walk.stop_at - min(walk.step, share))
            chunk, older_seen, count = await reader.read(walk.tp, start, walk.stop_at)
            scanned += count
            walk.chunks.append(chunk)
            walk.stop_at = start
            walk.step *= 4
            walk.done = older_seen or start <= walk.begin
    return scanned, True


class _RangeReader:
    """Reads offset ranges of the topic's partitions, keeping the window's records."""

    def __init__(self, consumer: AIOKafkaConsumer, window: _Window, stall_seconds: float) -> None:
        self._consumer = consumer
        self._window = window
        self._stall_seconds = stall_seconds

    async def read(
        self, tp: TopicPartition, start: int, stop: int
    ) -> tuple[list[EmittedRecord], bool, int]:
        """Records of the table in ``[start, stop)`` of ``tp`` within the window, whether one
        older than the window's slack floor was seen, and how many records were read."""
        consumer = self._consumer
        consumer.seek(tp, start)
        chunk: list[EmittedRecord] = []
        older_seen = False
        count = 0
        last, moved = start, time.monotonic()
        while (position := await consumer.position(tp)) < stop:
            if position != last:
                last, moved = position, time.monotonic()
            elif time.monotonic() - moved > self._stall_seconds:
                # Never a silent gap: the caller retries (a restart waits, it does not guess).
                raise TailStalledError(
                    f"reading {tp.topic}[{tp.partition}] back stood still at offset {position} "
                    f"(reading up to {stop}) for {self._stall_seconds:g}s"
                )
            # Aborted or control records only: the position still moves, records or not.
            batch = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
            for record in batch.get(tp, []):
                if record.offset >= stop:
                    return chunk, older_seen, count
                count += 1
                ts = self._match(record)
                if ts is None:
                    continue
                older_seen = older_seen or (
                    ts < self._window.slack_floor and self._ends_walk(record)
                )

                if ts >= self._window.since:
                    emitted = _emitted(record, ts=ts, window=self._window)
                    if emitted is not None:
                        chunk.append(emitted)
        return chunk, older_seen, count

    def _ends_walk(self, record: ConsumerRecord[bytes, bytes]) -> bool:
        """Whether a record older than the slack floor ends the backward walk: one of this
        stream's own, and not from a sliced backfill (its ranges are written side by side, so
        only its stream-phase records say where the window starts)."""
        if self._window.unordered_backfill and _header(record.headers, PHASE_HEADER) == b"backfill":
            return False
        return self._own(record)

    def _own(self, record: ConsumerRecord[bytes, bytes]) -> bool:
        """Whether the record follows this stream's cursor. A table's topic also holds its
        delete stream's tombstones, stamped with their audit rows' times (years old while that
        stream catches up): one of them says nothing about where the table's window starts."""
        return self._window.deletes or _header(record.headers, OPERATION_HEADER) != DELETE

    def _match(self, record: ConsumerRecord[bytes, bytes]) -> str | None:
        """The record's ``snow.timestamp`` when it is one of the window's table, else None."""
        window, headers = self._window, record.headers
        if (
            record.key is None
            or _header(headers, TABLE_HEADER) != window.table
            or _header(headers, INSTANCE_HEADER) != window.instance
        ):
            return None
        if window.deletes and (
            record.value is not None or _header(headers, OPERATION_HEADER) != DELETE
        ):
            return None
        return _header(headers, TIMESTAMP_HEADER).decode("utf-8", "replace")


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
