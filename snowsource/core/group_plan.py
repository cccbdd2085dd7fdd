"""Which live group member runs which table (``tasks.assignment: group``, SPEC §13.5).

The group's leader computes the plan from what every member said when it joined: its stable
*member key* (host, pid, start time, a nonce) and the tables it runs at that moment. Each
table's owner is the member with the highest rendezvous weight
(``core.assignment.rendezvous_weight`` of the alias and the member key), so a member that joins
takes only the tables it wins and a member that leaves frees only its own.

A table is never polled by two live members at once: when its owner changes while another live
member still runs it, the plan *withholds* it (no owner this round). Its runner sees it missing
from its assignment, stops its poller, commits what Kafka acknowledged and asks for a new
round; in that round nobody runs it any more and it goes to its owner. This is the shape of
Kafka's cooperative rebalancing, applied to tables instead of partitions. A dead member is no
longer in the group, so its tables are assigned at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from snowsource.core.assignment import rendezvous_weight

__all__ = ["GroupPlan", "GroupView", "MemberReport", "member_key", "owner_among", "plan"]


def member_key(host: str, pid: int, started_ms: int, nonce: str) -> str:
    """A member's key in the plan: stable across its rejoins, unique among live members (the
    nonce tells apart two members of one process started in the same millisecond)."""
    return f"{host}/{pid}/{started_ms}/{nonce}"


@dataclass(frozen=True)
class MemberReport:
    """What one member said when it joined: its REST worker id, the tables it ran, and
    whether it runs what it is given (False while an operator stopped it)."""

    worker_id: str
    running: tuple[str, ...]
    active: bool = True
    # The tables this member's last discovery found (SPEC §15.2): the leader plans over the
    # configured tables and the union of every member's.
    found: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupView:
    """One round of the group as the leader planned it, identical on every member."""

    owners: Mapping[str, str | None]
    members: Mapping[str, MemberReport] = field(default_factory=dict)

    def tables_of(self, key: str) -> set[str]:
        """The tables the plan gives to member ``key``."""
        return {alias for alias, owner in self.owners.items() if owner == key}

    def worker_of(self, alias: str) -> str | None:
        """The REST worker id of ``alias``'s owner, None while it is withheld or unknown."""
        owner = self.owners.get(alias)
        report = self.members.get(owner) if owner is not None else None
        return report.worker_id if report is not None else None


def owner_among(alias: str, member_keys: Iterable[str]) -> str:
    """The member key with the highest weight for ``alias``; a tie goes to the smallest key,
    so every leader computes the same answer. Raises ``ValueError`` without members."""
    best: tuple[int, str] | None = None
    for key in member_keys:
        weight = rendezvous_weight(alias, key)
        # Higher weight wins; on equal weight the smaller key wins (hence the negated order).
        if best is None or weight > best[0] or (weight == best[0] and key < best[1]):
            best = (weight, key)
    if best is None:
        raise ValueError(f"no group member to own table {alias!r}")
    return best[1]


@dataclass(frozen=True)
class GroupPlan:
    """One round's answer: ``owners[alias]`` is a member key, or None while withheld."""

    owners: Mapping[str, str | None]

    def tables_of(self, member_key: str) -> list[str]:
        """The tables ``member_key`` runs after this round, in alias order."""
        return sorted(alias for alias, key in self.owners.items() if key == member_key)

    @property
    def withheld(self) -> list[str]:
        """Tables that wait for their previous runner to stop before they move."""
        return sorted(alias for alias, key in self.owners.items() if key is None)


def plan(aliases: Iterable[str], running: Mapping[str, Iterable[str]]) -> GroupPlan:
    """The plan for ``aliases`` over the members of ``running`` (member key -> the tables that
    member runs now, or is still stopping). Members must be non-empty."""
    if not running:
        raise ValueError("a group plan needs at least one member")
    runners: dict[str, set[str]] = {}
    for key, tables in running.items():
        for alias in tables:
            runners.setdefault(alias, set()).add(key)
    owners: dict[str, str | None] = {}
    for alias in sorted(set(aliases)):
        owner = owner_among(alias, running)
        others = runners.get(alias, set()) - {owner}
        # The owner keeps a table it already runs (anyone else running it sees the table
        # missing from its assignment and stops); a table held elsewhere waits for that stop.
        if others and owner not in runners.get(alias, set()):
            owners[alias] = None
        else:
            owners[alias] = owner
    return GroupPlan(owners=owners)
