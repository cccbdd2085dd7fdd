"""Key reconciliation (``deletes: reconcile``, SPEC §14.3): its partition, requests and key sets.

Pure. A sweep pages the table's sys_ids in sys_id order (``sysparm_fields=sys_id``, a keyset on
sys_id) and compares each page with the keys live in the table's compacted topic. The topic's
keys are read once per sweep into :class:`LiveKeys`: a sorted array of 16 bytes a key (a
sys_id is 32 hex digits), so a million live keys cost 16 MB however many versions the topic
holds. Keys that are not sys_ids (base-system rows such as ``global``) are kept aside as
strings; they are few, and the instance orders them by its database collation, not ours.

The sweep's progress is a source partition of its own, shaped like any other (SPEC §4): table
``<name>``, ``timestamp_field: "sys_id"`` (the sweep's cursor is the sys_id) and the table's own
query fingerprint; its offset's ``timestamp`` is when the sweep started (UTC), ``sys_id`` the
last key reconciled, and ``phase`` ``backfill`` while a sweep runs and ``stream`` once it ended.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from snowsource.core.offsets_codec import SourceOffset, SourcePartition, partition_for
from snowsource.core.query import split_groups
from snowsource.core.table import TableSpec, derived_spec
from snowsource.core.timestamps import format_ts, parse_ts

#: sys_ids per key page (SPEC §14.3) and per re-check request (a ``sys_idIN`` list of 200
#: sys_ids keeps the URL near 7 KB, below every proxy's limit). The keys lost by consecutive
#: pages share a re-check until 200 are waiting or 10 pages passed (the sweep's progress
#: waits for them: at most 100,000 keys are read again after a restart).
KEY_PAGE_SIZE: Final = 10000
RECHECK_BATCH: Final = 200
RECHECK_PAGES: Final = 10
KEY_BYTES: Final = 16
ALIAS_SUFFIX: Final = ".reconcile"
CURSOR_FIELD: Final = "sys_id"
SOURCE_HEADER: Final = "snow.delete.source"
SOURCE_RECONCILE: Final = b"reconcile"
SAMPLE_SIZE: Final = 10
_SYS_ID: Final = re.compile(r"[0-9a-f]{32}")
RUNNING: Final = "backfill"
ENDED: Final = "stream"


def reconcile_alias(alias: str) -> str:
    """How the offsets script, REST status and metrics name a table's key sweep."""
    return alias + ALIAS_SUFFIX


def reconcile_partition(table: TableSpec, *, snow_url: str) -> SourcePartition:
    """The source partition of ``table``'s key sweep: the table's name and query, cursor sys_id."""
    return partition_for(
        snow_url=snow_url,
        table=table.name,
        query=table.normalised_query,
        query_domain=table.query_domain,
        timestamp_field=CURSOR_FIELD,
    )


def reconcile_spec(table: TableSpec, *, snow_url: str) -> TableSpec:
    """The spec of ``table``'s key sweep: the table's own identity, its own partition."""
    partition = reconcile_partition(table, snow_url=snow_url)
    return derived_spec(
        table,
        stream="reconcile",
        alias=reconcile_alias(table.alias),
        partition=partition,
        fields=(CURSOR_FIELD,),
    )


# --------------------------------------------------------------------------------------------
# Requests


def key_query(normalised_base: str, after: str) -> str:
    """``sysparm_query`` of the keys after ``after`` (``""``: from the first) in sys_id order.

    Like the timestamp keyset (``cursor.page_query``) the condition is repeated in every ``^NQ``
    group of the base query, since a condition written once binds only to its own group.
    """
    if "^" in after:
        raise ValueError(f"a sys_id cannot contain '^': {after!r}")
    window = f"{CURSOR_FIELD}>{after}" if after else ""
    body = _in_every_group(normalised_base, window)
    return f"{body}^ORDERBY{CURSOR_FIELD}" if body else f"ORDERBY{CURSOR_FIELD}"


def recheck_query(normalised_base: str, keys: Sequence[str]) -> str:
    """``sysparm_query`` of those of ``keys`` that the table (with its query) still holds."""
    return _in_every_group(normalised_base, f"{CURSOR_FIELD}IN{','.join(keys)}")


def _in_every_group(normalised_base: str, condition: str) -> str:
    groups = split_groups(normalised_base)
    return "^NQ".join("^".join(part for part in (group, condition) if part) for group in groups)


def audited_query(table: str, keys: Sequence[str]) -> str:
    """``sys_audit_delete`` rows recording the deletion of any of ``keys`` from ``table``."""
    return f"tablename={table}^documentkeyIN{','.join(keys)}"


# --------------------------------------------------------------------------------------------
# Keys


def pack(key: str) -> bytes | None:
    """The 16 bytes of a sys_id (lowercase hex keeps its string order), None for other keys."""
    return bytes.fromhex(key) if _SYS_ID.fullmatch(key) else None


class LiveKeysBuilder:
    """Collects a topic's records (in produce order per partition) into :class:`LiveKeys`.

    A key's last record decides: a value makes it live, a tombstone removes it. Records are
    kept as 17 bytes (key and a live flag) in 256 buckets by the key's first byte, so turning
    them into the sorted array needs one small dictionary per bucket, not one for the topic.
    """

    def __init__(self) -> None:
        self._buckets = [bytearray() for _ in range(256)]
        self._others: dict[str, bool] = {}
        self.records = 0

    def add(self, key: str, live: bool) -> None:
        """One record of the table: its key and whether it has a value."""
        self.records += 1
        packed = pack(key)
        if packed is None:
            self._others[key] = live
            return
        bucket = self._buckets[packed[0]]
        bucket += packed
        bucket.append(1 if live else 0)

    def build(self) -> LiveKeys:
        """The live keys; the builder is empty afterwards."""
        out = bytearray()
        step = KEY_BYTES + 1
        for i, bucket in enumerate(self._buckets):
            last: dict[bytes, int] = {}
            view = memoryview(bucket)
            for at in range(0, len(bucket), step):
                last[bytes(view[at : at + KEY_BYTES])] = bucket[at + KEY_BYTES]
            view.release()
            self._buckets[i] = bytearray()
            for key in sorted(k for k, live in last.items() if live):
                out += key
        others = frozenset(k for k, live in self._others.items() if live)
        self._others = {}
        return LiveKeys(bytes(out), others)


class _Packed(Sequence[bytes]):
    """The sorted array as a sequence of 16-byte keys, for ``bisect``."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __len__(self) -> int:
        return len(self._data) // KEY_BYTES

    def __getitem__(self, index: int) -> bytes:  # type: ignore[override]
        at = index * KEY_BYTES
        return self._data[at : at + KEY_BYTES]


@dataclass(frozen=True)
class LiveKeys:
    """The keys live in a table's topic: sys_ids as a sorted 16-byte array, others aside."""

    packed: bytes
    others: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self.packed) // KEY_BYTES + len(self.others)

    @property
    def nbytes(self) -> int:
        """Bytes of the sorted array (16 a sys_id)."""
        return len(self.packed)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        packed = pack(key)
        if packed is None:
            return key in self.others
        keys = _Packed(self.packed)
        at = bisect.bisect_left(keys, packed)
        return at < len(keys) and keys[at] == packed

    def between(self, after: str, last: str | None) -> Iterator[str]:
        """The sys_ids in ``(after, last]`` in order (``last`` None: to the end)."""
        keys = _Packed(self.packed)
        lo = bisect.bisect_right(keys, pack(after) or b"") if after else 0
        hi = len(keys) if last is None else bisect.bisect_right(keys, _bound(last))
        for i in range(lo, hi):
            yield keys[i].hex()

    def first(self, n: int) -> list[str]:
        """Up to ``n`` keys, for samples."""
        out = [key for _, key in zip(range(n), self.between("", None), strict=False)]
        return out + sorted(self.others)[: n - len(out)]


def _bound(key: str) -> bytes:
    # Not a sys_id (a collation surprise): bound the range by its hex prefix.
    packed = pack(key)
    if packed is not None:
        return packed
    digits = re.match(r"[0-9a-f]*", key)
    prefix = digits.group() if digits else ""
    return bytes.fromhex((prefix + "f" * 32)[:32])


@dataclass(frozen=True)
class PageDiff:
    """One key page compared with the live keys: what each side lacks."""

    missing_in_instance: list[str]
    missing_in_kafka: list[str]


def compare_page(live: LiveKeys, after: str, page: Sequence[str], *, last_page: bool) -> PageDiff:
    """Compare a key page (``page``: the sys_ids after ``after``, in order) with ``live``.

    The page covers ``(after, page[-1]]``, or everything after ``after`` when it is the last;
    a live sys_id in that range that the page does not hold is missing in the instance. Keys
    that are not sys_ids are compared at the end of the sweep (:func:`missing_others`).
    """
    present = set(page)
    last = None if last_page or not page else page[-1]
    # Every sys_id of the page lies in the range, so the range's live keys answer both sides
    # (one walk of the array instead of a search per key).
    live_here = list(live.between(after, last))
    known = set(live_here)
    absent = [key for key in live_here if key not in present]
    unknown = [key for key in page if key not in known]
    return PageDiff(missing_in_instance=absent, missing_in_kafka=unknown)


def missing_others(live: LiveKeys, seen: Iterable[str]) -> list[str]:
    """Live keys that are not sys_ids and that the sweep never saw."""
    return sorted(live.others - set(seen))


def batches(keys: Sequence[str], size: int = RECHECK_BATCH) -> Iterator[Sequence[str]]:
    """``keys`` in slices of at most ``size``."""
    for at in range(0, len(keys), size):
        yield keys[at : at + size]


# --------------------------------------------------------------------------------------------
# Progress


@dataclass(frozen=True)
class SweepProgress:
    """Where the key sweep stands: started at ``started`` (UTC), reconciled up to ``after``."""

    started: datetime
    after: str = ""
    ended: bool = False

    def to_offset(self, fingerprint: str) -> SourceOffset:
        """The offset that stores this progress under the sweep's partition."""
        return SourceOffset(
            timestamp=format_ts(self.started),
            sys_id="" if self.ended else self.after,
            phase=ENDED if self.ended else RUNNING,
            fingerprint=fingerprint,
        )

    @classmethod
    def from_offset(cls, offset: SourceOffset) -> SweepProgress:
        """The progress a stored offset describes."""
        return cls(
            started=parse_ts(offset.timestamp), after=offset.sys_id, ended=offset.phase == ENDED
        )

    def due(self, interval_seconds: float) -> datetime:
        """When the next sweep starts: now for an unfinished one, else an interval after it."""
        if not self.ended:
            return self.started
        return self.started + timedelta(seconds=interval_seconds)


def fresh_sweep(now: datetime) -> SweepProgress:
    """A sweep starting ``now`` (whole seconds, UTC)."""
    return SweepProgress(started=now.astimezone(UTC).replace(microsecond=0))
