"""The commit rule: nothing is committed that did not reach Kafka (SPEC §6).

A table's committable offset is the offset of the last record of its contiguous acknowledged
prefix. Kafka may acknowledge records out of order (different partitions, retries), so an
unacknowledged record holds back every later offset of the same table — otherwise a crash
could skip it. This is Kafka Connect's ``SubmittedRecords`` rule, per table, with no I/O.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

__all__ = ["CommitTracker"]

T = TypeVar("T")


class CommitTracker(Generic[T]):
    """Tracks one table's records between hand-off to the producer and acknowledgement.

    One tracker per table generation: an internal restart starts a new one, so a late
    acknowledgement from before it can never reach the new generation's offsets.
    """

    def __init__(self) -> None:
        self._next_ticket = 0
        # In-flight records in submit order; ticket of _offsets[i] is _base + i.
        self._base = 0
        self._offsets: deque[T] = deque()
        self._acked: deque[bool] = deque()
        self._unacked = 0

    def submit(self, offset: T) -> int:
        """Register a record handed to the producer; returns its ticket for :meth:`ack`."""
        ticket = self._next_ticket
        self._next_ticket += 1
        if not self._offsets:
            self._base = ticket
        self._offsets.append(offset)
        self._acked.append(False)
        self._unacked += 1
        return ticket

    def ack(self, ticket: int) -> None:
        """Kafka acknowledged the record. Acks of records already taken or already acked are
        ignored; a ticket never issued is a bug."""
        if not 0 <= ticket < self._next_ticket:
            raise ValueError(f"ticket {ticket} was never issued")
        index = ticket - self._base
        if 0 <= index < len(self._acked) and not self._acked[index]:
            self._acked[index] = True
            self._unacked -= 1

    def committable(self) -> T | None:
        """The offset of the last record of the contiguous acknowledged prefix, once: those
        records are consumed, and the next call returns ``None`` until more are acked."""
        last: T | None = None
        taken = False
        while self._acked and self._acked[0]:
            self._acked.popleft()
            last = self._offsets.popleft()
            self._base += 1
            taken = True
        return last if taken else None

    @property
    def pending(self) -> int:
        """Records submitted but not yet acknowledged."""
        return self._unacked

    @property
    def in_flight(self) -> int:
        """Records submitted and not yet taken by :meth:`committable` (acked or not)."""
        return len(self._offsets)
