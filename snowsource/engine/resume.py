"""Where a table resumes: its stored offset, validated, moved to the canonical key if needed.

Read at every start, resume and internal restart. An offset stored under another spelling of
the table's key is rewritten canonically (and the old spelling tombstoned); a Java connector's
offset (legacy fingerprint) is adopted under the new partition. Both writes go through the
table's ``OffsetWriter``, so a transient Kafka error is retried instead of failing the table.
A refused offset is never moved, guessed at or deleted: the table FAILs naming how to reset it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import structlog

from snowsource.core.errors import OffsetError
from snowsource.core.offsets_codec import SourceOffset, decode_value, encode_value, validate_offset
from snowsource.core.table import TableSpec
from snowsource.engine.committer import OffsetWriter
from snowsource.engine.ports import OffsetsStore


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
