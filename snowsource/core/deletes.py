"""The delete stream of a table (``deletes: audit``): its partition, rows and tombstones. Pure.

A table's deletes are read from ``sys_audit_delete`` with the query ``tablename=<name>`` and the
keyset cursor ``(sys_created_on, sys_id)``. The stream is an ordinary source partition of its own
(``table: sys_audit_delete``), so Kafka Connect and the offsets script see it like any other;
it only borrows the table's ``query.domain`` flag, because the same integration user reads both.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from snowsource.core.dictionary import raw
from snowsource.core.errors import TableFailedError
from snowsource.core.offsets_codec import SourcePartition, partition_for
from snowsource.core.query import normalise_query
from snowsource.core.table import TableSpec, derived_spec

AUDIT_TABLE: Final = "sys_audit_delete"
AUDIT_TIMESTAMP_FIELD: Final = "sys_created_on"
AUDIT_ID_FIELD: Final = "sys_id"
AUDIT_FIELDS: Final = ("sys_id", "sys_created_on", "tablename", "documentkey")
ALIAS_SUFFIX: Final = ".deletes"
OPERATION_HEADER: Final = "snow.operation"
#: On every tombstone: the sys_id of the audit row it came from. A tombstone's key is the
#: deleted row's documentkey and its value is null, so this header (with ``snow.timestamp``, the
#: audit row's sys_created_on) is what tells a restart which audit rows are already in Kafka.
AUDIT_ID_HEADER: Final = "snow.audit_id"
UPSERT: Final = b"upsert"
DELETE: Final = b"delete"
# What a 403 on the audit table means and how to fix it, for the delete stream's FAILED status.
ACCESS_HINT: Final = (
    "reading deletes needs read access to sys_audit_delete (a table-level read ACL on "
    "sys_audit_delete for the integration user, usually granted with the admin role)"
)


def audit_query(table: str) -> str:
    """The delete stream's base query: the audit rows of ``table``."""
    return f"tablename={table}"


def delete_alias(alias: str) -> str:
    """How the offsets script, REST status and metrics name a table's delete stream."""
    return alias + ALIAS_SUFFIX


def delete_partition(*, snow_url: str, table: str, query_domain: bool) -> SourcePartition:
    """The source partition of ``table``'s delete stream."""
    return partition_for(
        snow_url=snow_url,
        table=AUDIT_TABLE,
        query=audit_query(table),
        query_domain=query_domain,
        timestamp_field=AUDIT_TIMESTAMP_FIELD,
    )


def delete_stream_spec(table: TableSpec, *, snow_url: str) -> TableSpec:
    """The spec a keyset reader needs for ``table``'s delete stream.

    It pages ``sys_audit_delete`` like any table, with the table's topic, page size, pacing and
    start point; only the identity and the cursor fields differ. The Java connector never had a
    delete stream, so there is no legacy partition to adopt.
    """
    partition = delete_partition(
        snow_url=snow_url, table=table.name, query_domain=table.query_domain
    )
    return derived_spec(
        table,
        stream="deletes",
        alias=delete_alias(table.alias),
        partition=partition,
        fields=AUDIT_FIELDS,
        name=AUDIT_TABLE,
        normalised_query=normalise_query(audit_query(table.name)),
        timestamp_field=AUDIT_TIMESTAMP_FIELD,
        id_field=AUDIT_ID_FIELD,
    )


@dataclass(frozen=True)
class Tombstone:
    """What one audit row produces: a null-valued record keyed by the deleted row's id."""

    key: str
    timestamp: str
    audit_id: str


def tombstone(row: Mapping[str, Any], table: str) -> Tombstone:
    """The tombstone for one ``sys_audit_delete`` row of ``table``.

    A row of another table, or without ``documentkey``, contradicts the query that read it: the
    delete stream FAILs rather than deleting the wrong key downstream.
    """
    audit_id = raw(row, AUDIT_ID_FIELD)
    tablename = raw(row, "tablename")
    if tablename != table:
        raise TableFailedError(
            f"sys_audit_delete row {audit_id} is for table {tablename!r}, not {table!r}: the "
            "instance did not apply the tablename filter"
        )
    key = raw(row, "documentkey")
    if not key:
        raise TableFailedError(
            f"sys_audit_delete row {audit_id} has no documentkey: the integration user may "
            "lack read access to the documentkey field"
        )
    return Tombstone(key=key, timestamp=raw(row, AUDIT_TIMESTAMP_FIELD), audit_id=audit_id)


def cap_high_water(delete_hi: str, table_completed_hi: str | None) -> str | None:
    """The delete stream's HI for a sweep: never past the table's last completed sweep.

    Returns None while the table has not completed a sweep (the delete stream waits), so a
    tombstone is never followed by an older version of the row it deletes. Timestamps are
    ``YYYY-MM-DD HH:MM:SS`` strings, whose string order is time order.
    """
    if table_completed_hi is None:
        return None
    return min(delete_hi, table_completed_hi)


def superseded(stones: Sequence[Tombstone], current: Collection[str]) -> frozenset[str]:
    """Audit ids whose tombstone must not be sent: the deleted row exists again.

    ``current`` holds those of the tombstones' keys that are rows of the table now (an import
    coalescing on sys_id re-creates a row with the same id). The table has sent that version's
    upsert already or will send it: a tombstone sent now could land after it and delete a live
    row downstream, so the delete itself is left out and the row's last record stays an upsert.
    """
    return frozenset(stone.audit_id for stone in stones if stone.key in current)


class Rechecks:
    """The answers to the delete stream's "do these rows exist again?" requests, by audit row.

    Every sweep re-reads the audit rows of its overlap window. Asking the table about them each
    time would repeat the request (and, for a re-created row, its log line) on every sweep for
    the whole window; each audit row is asked about once instead, and its answer reused while
    it can be read again. The poller forgets the answers older than its next sweep's start;
    the stream forgets them all when a generation starts (a restart after a produce failure
    asks again rather than trust an answer from before what it must send again).
    """

    def __init__(self) -> None:
        self._answers: dict[str, tuple[str, bool]] = {}  # audit id -> (its ts, superseded)

    def __len__(self) -> int:
        return len(self._answers)

    def unasked(self, stones: Sequence[Tombstone]) -> list[Tombstone]:
        """The tombstones whose audit row was not asked about yet."""
        return [stone for stone in stones if stone.audit_id not in self._answers]

    def answered(self, stones: Sequence[Tombstone], skip: Collection[str]) -> None:
        """Remember the answer for ``stones``: those in ``skip`` exist again."""
        for stone in stones:
            self._answers[stone.audit_id] = (stone.timestamp, stone.audit_id in skip)

    def superseded(self, stones: Sequence[Tombstone]) -> frozenset[str]:
        """Audit ids of ``stones`` whose deleted row was found to exist again."""
        answers = self._answers
        return frozenset(
            stone.audit_id
            for stone in stones
            if stone.audit_id in answers and answers[stone.audit_id][1]
        )

    def evict_older_than(self, ts: str) -> None:
        """Forget audit rows created before ``ts``: no sweep reads them again."""
        self._answers = {k: v for k, v in self._answers.items() if v[0] >= ts}

    def clear(self) -> None:
        """Forget every answer."""
        self._answers.clear()
