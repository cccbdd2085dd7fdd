"""What crosses the engine's ports on the way to Kafka: a page of records, Kafka's answer,
and the ``snow.*`` headers every record carries (SPEC §3). Plain values, no I/O.

The engine hands a page of ``(key, value, headers)`` records to its sink and gets back one
:class:`PageAck`: how long the acknowledged prefix is and why the record after it was not
acknowledged. The header names live here once, for the streams that write them and the topic
tail that reads them back after a restart.
"""

from __future__ import annotations

import dataclasses
from typing import Final, NamedTuple

from snowsource.core.offsets_codec import SourcePartition

Headers = list[tuple[str, bytes]]

INSTANCE_HEADER: Final = "snow.instance"
TABLE_HEADER: Final = "snow.table"
TIMESTAMP_HEADER: Final = "snow.timestamp"
PHASE_HEADER: Final = "snow.phase"

# Built once: every record of a page carries one of these.
_PHASE_HEADERS: Final = {p: (PHASE_HEADER, p.encode()) for p in ("backfill", "stream")}


def source_headers(partition: SourcePartition, *, table: str | None = None) -> Headers:
    """The headers saying which instance and table a record is from (``table``: another name
    than the partition's, as a delete stream's records name the table, not the audit table)."""
    return [
        (INSTANCE_HEADER, partition.instance.encode()),
        (TABLE_HEADER, (table or partition.table).encode()),
    ]


def phase_header(phase: str) -> tuple[str, bytes]:
    """The ``snow.phase`` header of a page read in ``phase``."""
    return _PHASE_HEADERS.get(phase) or (PHASE_HEADER, phase.encode())


def timestamp_header(ts: str) -> tuple[str, bytes]:
    """The ``snow.timestamp`` header: the row's cursor timestamp."""
    return (TIMESTAMP_HEADER, ts.encode())


class PageRecord(NamedTuple):
    """One record of a page: key, value (``None`` is a tombstone) and its own headers.

    The headers shared by the whole page are passed once beside the page and go first;
    ``headers`` holds only what differs per record.
    """

    key: bytes
    value: bytes | None
    headers: Headers


# What a sink takes: a PageRecord or a plain ``(key, value, headers)`` tuple.
PageRecordLike = tuple[bytes, bytes | None, Headers]


@dataclasses.dataclass(frozen=True, slots=True)
class RecordFailure:
    """Why the record at ``index`` of a page was not acknowledged.

    ``fatal`` means retrying cannot help (record too large, topic not writable; SPEC §6): the
    table FAILs naming that record. Otherwise the table restarts from its committed offset.
    """

    index: int
    error: BaseException
    fatal: bool


@dataclasses.dataclass(frozen=True, slots=True)
class PageAck:
    """The outcome of one page: records ``0 .. acked-1`` are all acknowledged by Kafka.

    ``failure`` names the first record that was not (``index == acked``), or is ``None`` when
    the whole page was acknowledged. Later records may have been acknowledged too; only the
    contiguous prefix may be committed.
    """

    records: int
    acked: int
    failure: RecordFailure | None

    @property
    def complete(self) -> bool:
        """True when every record of the page was acknowledged."""
        return self.acked == self.records
