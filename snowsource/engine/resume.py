"""Where a table resumes: its stored offset, and what it already wrote to Kafka.

Read at every start, resume and internal restart. An offset stored under another spelling of
the table's key is rewritten canonically (and the old spelling tombstoned); a Java connector's
offset (legacy fingerprint) is adopted under the new partition. Both writes go through the
table's ``OffsetWriter``, so a transient Kafka error is retried instead of failing the table.
A refused offset is never moved, guessed at or deleted: the table FAILs naming how to reset it.

Then the dedup cache is rebuilt from the output topic (``rebuild_dedup``): the first sweep
re-reads the overlap window before the committed cursor, and every row of it that is already in
Kafka — including, in at-least-once mode, rows acknowledged after the last offset write — would
otherwise be produced a second time. A delete stream reads its own tombstones back from its
table's topic, identified as it emitted them: by the audit row's sys_id (``snow.audit_id``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from dataclasses import replace
from typing import Protocol

import structlog
from aiokafka.errors import KafkaError

from snowsource.core.cursor import Position, first_sweep_start
from snowsource.core.dedup import DedupCache, TailResult
from snowsource.core.errors import KafkaSinkError, OffsetError, TableFailedError
from snowsource.core.offsets_codec import SourceOffset, decode_value, encode_value, validate_offset
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.engine.committer import OffsetWriter
from snowsource.engine.ports import KafkaErrors, OffsetsStore
from snowsource.observability import metrics
from snowsource.runtime.aio import done_before
from snowsource.runtime.retrying import Attempt, StoppedError, retrying

#: The rebuild reads at most this many records per entry the cache can hold (a window holds
#: several versions of busy rows and the re-reads of earlier restarts), and never fewer than
#: ``MIN_SCAN``: the cap only guards against reading a whole topic.
SCAN_PER_ENTRY = 4
MIN_SCAN = 10_000


class OutputTail(KafkaErrors, Protocol):
    """Reads a table's records of the re-read window back from its output topic
    (``adapters.topic_tail.TopicTail``); says which of its errors a retry may cure."""

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
    ) -> TailResult: ...


#: An offset written within this long after its own row's record was produced was written by
#: the daemon that produced it (the commit follows the ack), not by an operator later.
OWN_COMMIT_WITHIN_MS = 30_000


def scan_cap(max_entries: int) -> int:
    """How many records a rebuild may read for a cache of ``max_entries``."""
    return max(SCAN_PER_ENTRY * max_entries, MIN_SCAN)


async def load_offset(
    spec: TableSpec,
    store: OffsetsStore,
    writer: OffsetWriter,
    *,
    stop: asyncio.Event,
    log: structlog.typing.FilteringBoundLogger,
) -> SourceOffset | None:
    """The table's committed offset, or None when it starts from ``start.timestamp``."""
    raw = store.get(spec.partition)
    if raw is None:
        foreign = store.foreign_spelling(spec.partition)
        if foreign is not None:
            # A refused offset is left exactly where it is: validate before moving it.
            validated(spec, foreign.value)
            log.warning(
                "offset stored under a non-canonical key spelling; rewriting it canonically",
                old_key=foreign.key.decode("utf-8", "replace"),
            )
            await writer.write(spec.partition, foreign.value, stop=stop)
            await writer.delete_raw(foreign.key, stop=stop)
            raw = foreign.value
    if raw is None and spec.legacy_partition != spec.partition:
        raw = await _adopt_legacy(spec, store, writer, stop=stop, log=log)
    if raw is None:
        log.info("no stored offset; starting from start.timestamp", start=spec.start_timestamp)
        return None
    offset = validated(spec, raw)
    log.info("resuming from stored offset", cursor_ts=offset.timestamp, cursor_id=offset.sys_id)
    return offset


def validated(spec: TableSpec, raw: bytes) -> SourceOffset:
    """The stored offset, or ``OffsetError`` naming the partition and how to reset it."""
    try:
        value = decode_value(raw)
    except OffsetError as exc:
        # decode_value knows nothing of the partition; the table's diagnostic must name it.
        raise OffsetError(
            f"unusable offset for {spec.describe}: {exc}. snowsource never guesses at or "
            f"reuses such an offset; reset it with `snowsource offsets delete {spec.alias}` "
            f"(the table replays from its start.timestamp) or `snowsource offsets set "
            f"{spec.alias} --timestamp 'YYYY-MM-DD HH:MM:SS' --sys-id SYS_ID`"
        ) from exc
    return validate_offset(
        value, spec.partition, id_field=spec.id_field, describe=spec.describe, alias=spec.alias
    )


async def _adopt_legacy(
    spec: TableSpec,
    store: OffsetsStore,
    writer: OffsetWriter,
    *,
    stop: asyncio.Event,
    log: structlog.typing.FilteringBoundLogger,
) -> bytes | None:
    legacy_raw = store.get(spec.legacy_partition)
    if legacy_raw is None:
        return None
    try:
        legacy = validate_offset(
            decode_value(legacy_raw),
            spec.legacy_partition,
            id_field=spec.id_field,
            describe=spec.describe,
        )
    except OffsetError as exc:
        log.warning("legacy offset found but not usable; ignoring it", reason=str(exc))
        return None
    adopted = replace(legacy, fingerprint=spec.partition.query_fingerprint)
    value = encode_value(adopted)
    assert value is not None
    await writer.write(spec.partition, value, stop=stop)
    log.info(
        "adopted the Java connector's offset (legacy fingerprint) under the new partition",
        legacy_fingerprint=spec.legacy_partition.query_fingerprint,
        cursor_ts=adopted.timestamp,
        cursor_id=adopted.sys_id,
    )
    return value


async def rebuild_dedup(
    spec: TableSpec,
    tail: OutputTail | None,
    committed: SourceOffset | None,
    cache: DedupCache,
    *,
    written_ms: int | None,
    moved_back: bool = False,
    stop: asyncio.Event,
    retry: RetryPolicy,
    required: bool,
    log: structlog.typing.FilteringBoundLogger,
) -> None:
    """Fill ``cache`` with what the table already emitted inside its re-read window.

    Records up to the committed cursor are always remembered. Records *after* it are in the
    topic for one of two reasons, and only the first may suppress anything: a crash between
    their acknowledgement and the next offset write, or an operator who moved the offset back
    (``offsets rewind/set``, PATCH) to have that range emitted again. They are told apart by
    ``written_ms``, when the committed offset was written, and ``moved_back``, whether it lies
    below a cursor stored earlier (the daemon's cursor never moves back): records produced
    after it, or an offset written right after its own row's record (the daemon's commit) that
    did not move back, mean a crash.

    Without a committed offset there is nothing to rebuild: the table starts from
    ``start.timestamp`` and has never written (a replay allowed with ``--allow-full-replay``
    re-emits, which is what was asked for). Transient Kafka errors are retried until ``stop``.
    A read Kafka refuses (no Read ACL on the output topic) is a WARN in at-least-once mode
    (the overlap window may come once more, as in release 0.1) and, when ``required``
    (exactly-once, whose promise depends on it), fails the table; so does, when ``required``,
    a rebuild the scan cap cut short.
    """
    if tail is None or committed is None or cache.max_entries == 0:
        return
    cursor = Position(committed.timestamp, committed.sys_id)
    since = first_sweep_start(cursor, spec.overlap_seconds, spec.start_timestamp).ts
    began = time.monotonic()
    result = await _read_back(
        spec, tail, since, cache.max_entries, stop=stop, retry=retry, required=required, log=log
    )
    if result is None:
        return
    if required and not result.complete:
        raise _incomplete(spec, result, cache.max_entries)
    beyond = not moved_back and _beyond_cursor_is_emitted(
        result, cursor, written_ms, sliced=spec.backfill_slices > 1
    )
    before = cache.evictions_by_cap
    skipped = _remember(result, cache, cursor, written_ms=written_ms, beyond=beyond)
    fields = {
        "topic": spec.topic,
        "since": since,
        "records": len(result.records),
        "ids": len(cache),
        "rewound": skipped,
        "scanned": result.scanned,
        "complete": result.complete,
        "duration_s": round(time.monotonic() - began, 3),
    }
    _log_rebuilt(spec, cache, cache.evictions_by_cap - before, fields, log)


async def _read_back(
    spec: TableSpec,
    tail: OutputTail,
    since: str,
    max_entries: int,
    *,
    stop: asyncio.Event,
    retry: RetryPolicy,
    required: bool,
    log: structlog.typing.FilteringBoundLogger,
) -> TailResult | None:
    """The table's records of the re-read window, retried until ``stop``; None when Kafka
    refuses the read and the table may go on without (at least once)."""
    # Earlier restarts re-read one overlap before their own cursor: a record that old may sit
    # after records of the window, so the backward walk may only stop below this floor.
    slack_floor = Position(since, "").minus(spec.overlap_seconds).ts
    # A delete stream's tombstones are on its table's topic, under the table's name.
    base = spec.base if spec.stream == "deletes" else None
    table = base.name if base is not None else spec.partition.table

    def warn(attempt: Attempt, delay: float) -> None:
        log.warning(
            "reading the output topic back failed; retrying",
            topic=spec.topic,
            error=repr(attempt.error),
            retry_in=round(delay, 2),
        )

    try:
        async for attempt in retrying(retry, stop, retry_if=tail.retriable, on_retry=warn):
            with attempt:
                return await _unless_stopped(
                    tail.read_window(
                        spec.topic,
                        instance=spec.partition.instance,
                        table=table,
                        since=since,
                        slack_floor=slack_floor,
                        max_scanned=scan_cap(max_entries),
                        deletes=base is not None,
                        unordered_backfill=spec.backfill_slices > 1,
                    ),
                    stop,
                )
    except KafkaError as exc:
        if required:
            raise KafkaSinkError(
                f"{spec.describe}: reading its output topic {spec.topic!r} back failed: {exc!r}; "
                f"exactly.once needs to read what the table already wrote: grant this "
                f"principal Read (and Describe) on topic {spec.topic!r}"
            ) from exc
        log.warning(
            "could not read the output topic back; rows of the re-read window may be emitted "
            "once more (grant Read and Describe on the topic to avoid it)",
            topic=spec.topic,
            error=repr(exc),
        )
    return None


def _incomplete(spec: TableSpec, result: TailResult, max_entries: int) -> TableFailedError:
    # Exactly-once promises no second copy: a partial cache would break it silently.
    return TableFailedError(
        f"{spec.describe}: its dedup cache could not be rebuilt: the tail of output topic "
        f"{spec.topic!r} holds more than {result.scanned} records to read back (the cap is "
        f"{SCAN_PER_ENTRY} per dedup.max.entries, {max_entries}), so exactly.once could emit "
        f"rows of the re-read window twice. Raise dedup.max.entries, or give the table a "
        f"topic of its own"
    )


def _remember(
    result: TailResult,
    cache: DedupCache,
    cursor: Position,
    *,
    written_ms: int | None,
    beyond: bool,
) -> int:
    """Put the records that may suppress a row in ``cache``: those up to the cursor, and those
    after it that a crash left (``beyond``, or produced after the offset was written). The
    number of records left out (a rewound range, to be emitted again)."""
    skipped = 0
    for record in result.records:
        produced_after = written_ms is not None and record.produced_ms >= written_ms
        if beyond or produced_after or Position(record.ts, record.id) <= cursor:
            cache.remember(record.id, record.ts, record.digest)
        else:
            skipped += 1
    return skipped


def _log_rebuilt(
    spec: TableSpec,
    cache: DedupCache,
    evicted: int,
    fields: dict[str, object],
    log: structlog.typing.FilteringBoundLogger,
) -> None:
    if not evicted:
        log.info("dedup cache rebuilt from the output topic", **fields)
        return
    metrics.DEDUP_EVICTIONS.labels(table=spec.alias).inc(evicted)
    log.warning(
        "dedup cache rebuilt from the output topic, but the re-read window holds more ids "
        "than dedup.max.entries: the oldest may be emitted once more (raise "
        "dedup.max.entries)",
        evicted=evicted,
        max_entries=cache.max_entries,
        **fields,
    )


def _beyond_cursor_is_emitted(
    result: TailResult, cursor: Position, written_ms: int | None, *, sliced: bool = False
) -> bool:
    """True when the committed offset was written by the daemon right after producing its own
    row (so every record after the cursor is a crash's leftover, not a rewound range).

    A sliced backfill commits its prefix when an acknowledgement moves it, and that ack may be
    of another range's page: then any record of the window produced just before the write
    shows the daemon wrote it (an operator's change has no such record: the daemon was
    stopped, and ``moved_back`` tells a rewind apart).
    """
    if written_ms is None or not cursor.id:
        return False
    for record in result.records:
        if sliced or (record.id == cursor.id and record.ts == cursor.ts):
            if 0 <= written_ms - record.produced_ms <= OWN_COMMIT_WITHIN_MS:
                return True
            if not sliced:
                return False
    return False


async def _unless_stopped(work: Awaitable[TailResult], stop: asyncio.Event) -> TailResult:
    """``work``'s result; abandoned (cancelled, its clients closed) when stop is requested."""
    task = asyncio.ensure_future(work)
    if not await done_before(task, stop):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise StoppedError("stop requested while reading the output topic back")
    return task.result()
