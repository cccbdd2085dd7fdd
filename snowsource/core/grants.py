"""Who may send the next ServiceNow request: the concurrency limit and the grant order (SPEC §14.1).

Pure bookkeeping, no I/O and no waiting; the session pool (``adapters.session_pool``) holds the
waiters and asks these two objects what to do.

- ``AimdLimit``: how many requests the process may have in flight. A 429 without ``Retry-After``
  (the instance's node semaphores are full) halves it, never below 1; every 20 further good
  answers raise it by one, up to the configured ceiling K.
- ``FairQueue``: waiting requests granted round-robin across requester keys (a table's alias;
  several slices of one table share one key and so one turn), in ``Priority`` order.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

__all__ = ["GROW_AFTER_SUCCESSES", "AimdLimit", "FairQueue", "Priority"]

#: Good answers needed, after the last change, to raise the limit by one (SPEC §14.1).
GROW_AFTER_SUCCESSES: Final = 20

T = TypeVar("T")


class Priority(enum.Enum):
    """How urgent a request is: when requests wait (for a slot or for the rate budget), a
    more urgent one is granted first (SPEC §15.3). Declaration order is grant order."""

    STREAM = "stream"  # a caught-up table's pages and the clock probe: new rows, lag matters
    DERIVED = "derived"  # delete and journal streams, dictionary reads, existence re-checks
    BACKFILL = "backfill"  # pages of a table still backfilling, one pager or slices
    LOW = "low"  # reconcile key sweeps and discovery


@dataclass
class AimdLimit:
    """Additive-increase / multiplicative-decrease concurrency limit between 1 and ``ceiling``.

    ``epoch`` counts the decreases. A request remembers the epoch it was granted in; a saturation
    answer to a request granted before the latest decrease does not halve again: the requests
    that were already in flight when the nodes filled up all come back 429 together, and that is
    one signal, not eight (TCP reacts once per window for the same reason).
    """

    ceiling: int
    value: int = field(init=False)
    epoch: int = field(default=0, init=False)
    _successes: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.ceiling < 1:
            raise ValueError(f"the concurrency ceiling must be >= 1, got {self.ceiling}")
        self.value = self.ceiling

    def saturated(self, granted_epoch: int) -> bool:
        """A 429 without ``Retry-After`` to a request granted in ``granted_epoch``.

        True when the limit was halved (a new epoch began); False when the signal belongs to
        a decrease already made.
        """
        if granted_epoch < self.epoch:
            return False
        self.value = max(1, self.value // 2)
        self.epoch += 1
        self._successes = 0
        return True

    def succeeded(self) -> bool:
        """A good answer; True when it raised the limit."""
        if self.value >= self.ceiling:
            return False
        self._successes += 1
        if self._successes < GROW_AFTER_SUCCESSES:
            return False
        self._successes = 0
        self.value += 1
        return True


@dataclass
class _Lane(Generic[T]):
    """The waiting tickets of one priority: a ring of keys, each with its FIFO of tickets."""

    ring: OrderedDict[str, deque[T]] = field(default_factory=OrderedDict)

    def push(self, key: str, ticket: T) -> None:
        # A key new to the ring joins at its end: behind every key already waiting its turn.
        self.ring.setdefault(key, deque()).append(ticket)

    def pop(self) -> T | None:
        if not self.ring:
            return None
        key, tickets = next(iter(self.ring.items()))
        ticket = tickets.popleft()
        if tickets:
            self.ring.move_to_end(key)  # its next ticket waits one full round
        else:
            del self.ring[key]
        return ticket

    def remove(self, key: str, ticket: T) -> bool:
        tickets = self.ring.get(key)
        if tickets is None:
            return False
        try:
            tickets.remove(ticket)
        except ValueError:
            return False
        if not tickets:
            del self.ring[key]
        return True

    def __len__(self) -> int:
        return sum(len(tickets) for tickets in self.ring.values())


class FairQueue(Generic[T]):
    """Waiting requests (any ``ticket`` object), granted round-robin across requester keys.

    ``pop`` takes the first ticket of the key at the head of the ring and sends that key to the
    back when it still has tickets: with N keys waiting, a key's ticket is granted within N
    grants of its arrival (one per other key), whatever the others queued. A key whose last
    ticket was granted leaves the ring; when it asks again it joins at the back, behind every key
    that waited meanwhile. A ticket is granted only when no ticket of a more urgent priority
    waits (``Priority`` declaration order).
    """

    def __init__(self) -> None:
        self._lanes: dict[Priority, _Lane[T]] = {p: _Lane() for p in Priority}

    def push(self, key: str, ticket: T, priority: Priority = Priority.STREAM) -> None:
        """Queue ``ticket`` for ``key``."""
        self._lanes[priority].push(key, ticket)

    def pop(self) -> T | None:
        """The next ticket to grant, or None when none waits."""
        for priority in Priority:  # declaration order: STREAM first
            ticket = self._lanes[priority].pop()
            if ticket is not None:
                return ticket
        return None

    def remove(self, key: str, ticket: T, priority: Priority = Priority.STREAM) -> bool:
        """Withdraw a ticket that was not granted (its requester gave up); True if it waited."""
        return self._lanes[priority].remove(key, ticket)

    def waiting(self, priority: Priority | None = None) -> int:
        """Tickets waiting (of ``priority``, or of every priority)."""
        if priority is not None:
            return len(self._lanes[priority])
        return sum(len(lane) for lane in self._lanes.values())

    def __len__(self) -> int:
        return self.waiting()
