"""The per-table dedup cache: what was emitted for each id (SPEC §5 Dedup).

Pure, memory-only, no I/O. Overlap re-reads return rows the table already emitted; the cache
suppresses a row whose record value is byte-identical to the last one emitted for its id, and
lets everything else through — so an update inside the same second is never lost, even on
views without ``sys_mod_count``. It only ever suppresses exact repeats: forgetting an entry
(eviction, restart) can cause a duplicate, never a loss.

Entries are ordered for eviction by ``(ts, insertion)`` in a binary heap with lazy deletion:
re-remembering an id leaves its old heap node behind as a stale marker, skipped when popped, and
the heap is rebuilt from the live entries once stale nodes outnumber them. Every operation is
O(log n) amortised and memory stays within a constant factor of ``max_entries``.
"""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass

# Rebuild the heap when it holds more than this many nodes per live entry (plus a little slack
# so tiny caches do not rebuild on every update).
_STALE_FACTOR = 2
_STALE_SLACK = 64


def digest(value: bytes) -> bytes:
    """A 16-byte BLAKE2b digest of a record value: fast, and collisions are not a practical risk."""
    return hashlib.blake2b(value, digest_size=16).digest()


class DedupCache:
    """``id -> (ts, digest)`` of emitted records, bounded to ``max_entries``.

    Use: ``if cache.should_emit(id, ts, d): produce(...); cache.remember(id, ts, d)``. Past the
    cap the oldest entries (smallest ``ts``, then earliest remembered) are dropped and counted in
    ``evictions_by_cap``; the caller compares that counter before/after to WARN and export the
    metric. ``max_entries == 0`` keeps nothing (every row is emitted).
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0: {max_entries}")
        self.max_entries = max_entries
        self.evictions_by_cap = 0
        # id -> (ts, digest, seq); seq identifies the live heap node for the id.
        self._entries: dict[str, tuple[str, bytes, int]] = {}
        self._heap: list[tuple[str, int, str]] = []  # (ts, seq, id), possibly stale
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def contains(self, id: str) -> bool:
        """Whether anything is remembered for ``id``.

        The poller uses it to tell a late commit (a row below the cursor that was never emitted)
        from an overlap re-read.
        """
        return id in self._entries

    def should_emit(self, id: str, ts: str, digest: bytes) -> bool:
        """False only when the entry for ``id`` has this exact ``ts`` and value digest."""
        entry = self._entries.get(id)
        return entry is None or entry[0] != ts or entry[1] != digest

    def remember(self, id: str, ts: str, digest: bytes) -> None:
        """Record that this value was emitted for ``id`` (replaces any earlier entry)."""
        self._seq += 1
        self._entries[id] = (ts, digest, self._seq)
        heapq.heappush(self._heap, (ts, self._seq, id))
        while len(self._entries) > self.max_entries:
            self._pop_oldest()
            self.evictions_by_cap += 1
        if len(self._heap) > _STALE_FACTOR * len(self._entries) + _STALE_SLACK:
            self._rebuild()

    def evict_older_than(self, ts: str) -> int:
        """Forget entries whose ``ts`` is strictly before ``ts``; return how many were dropped.

        The poller calls this with the start of the re-read window: rows older than that are
        never read again by this sweep, so their entries cannot suppress anything.
        """
        evicted = 0
        while self._heap and self._heap[0][0] < ts:
            if self._discard_top():
                evicted += 1
        return evicted

    def clear(self) -> None:
        """Forget everything (restart, resume, internal restart). ``evictions_by_cap`` is kept."""
        self._entries.clear()
        self._heap.clear()

    def _discard_top(self) -> bool:
        """Pop the heap's top; delete its entry when the node is live. True if it was live."""
        _ts, seq, id_ = heapq.heappop(self._heap)
        entry = self._entries.get(id_)
        if entry is not None and entry[2] == seq:
            del self._entries[id_]
            return True
        return False

    def _pop_oldest(self) -> None:
        while not self._discard_top():
            pass

    def _rebuild(self) -> None:
        self._heap = [(ts, seq, id_) for id_, (ts, _d, seq) in self._entries.items()]
        heapq.heapify(self._heap)


# What a restart reads back from a table's topic to rebuild this cache (adapters.topic_tail).


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
