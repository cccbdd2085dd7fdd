"""The table assignor of ``tasks.assignment: group`` (SPEC §13.5): Kafka's group protocol with
tables, not partitions, in the assignment's user data.

At every join a member's subscription metadata carries its member key (host, pid, start time,
nonce), its REST worker id and the tables it runs (or is still stopping). The leader's
``assign`` turns those into a ``core.group_plan`` and sends the *whole* plan, with what each
member reported, to every member: any member's REST API can then show the connector. No topic
partition is ever assigned, so the consumer never fetches.

aiokafka calls ``metadata()`` at every join, ``assign()`` on the leader only and
``on_assignment()`` on every member right after the SyncGroup answer, before the rebalance
listener. The assignor is an instance (aiokafka only ever calls these three through the object
it was given), because its metadata depends on this process's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import orjson
import structlog
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from snowsource.core.group_plan import GroupView, MemberReport, member_key, plan

__all__ = ["GroupView", "MemberReport", "TableAssignor", "member_key"]

log = structlog.get_logger("snowsource.adapters.group_protocol")

_FORMAT = 1


def encode_metadata(
    key: str,
    worker_id: str,
    running: Iterable[str],
    *,
    active: bool = True,
    found: Iterable[str] = (),
) -> bytes:
    """A member's user data in its JoinGroup metadata."""
    return orjson.dumps(
        {
            "v": _FORMAT,
            "key": key,
            "worker": worker_id,
            "runs": sorted(running),
            "active": active,
            "found": sorted(found),
        }
    )


def decode_metadata(data: bytes) -> tuple[str, MemberReport] | None:
    """``(member key, report)``; None for metadata this release did not write."""
    try:
        doc = orjson.loads(data)
        key, worker, runs = doc["key"], doc["worker"], doc["runs"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not isinstance(key, str) or not isinstance(worker, str) or not isinstance(runs, list):
        return None
    active = doc.get("active", True) is not False
    found = doc.get("found", [])
    return key, MemberReport(
        worker_id=worker,
        running=tuple(str(a) for a in runs),
        active=active,
        found=tuple(str(a) for a in found) if isinstance(found, list) else (),
    )


def encode_view(view: GroupView) -> bytes:
    """The assignment's user data: the whole plan and every member's report."""
    return orjson.dumps(
        {
            "v": _FORMAT,
            "owners": dict(view.owners),
            "members": {
                key: {"worker": r.worker_id, "runs": list(r.running), "active": r.active}
                for key, r in view.members.items()
            },
        }
    )


def decode_view(data: bytes) -> GroupView | None:
    """The plan in an assignment; None when the assignment carries none (a foreign leader)."""
    try:
        doc = orjson.loads(data)
        owners = {str(a): (None if k is None else str(k)) for a, k in doc["owners"].items()}
        members = {
            str(key): MemberReport(
                worker_id=str(m["worker"]),
                running=tuple(str(a) for a in m["runs"]),
                active=m.get("active", True) is not False,
            )
            for key, m in doc["members"].items()
        }
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None
    return GroupView(owners=owners, members=members)


def plan_view(aliases: Sequence[str], reports: Mapping[str, MemberReport]) -> GroupView:
    """The leader's answer for ``reports`` (member key -> report): the configured tables and
    every table any member discovered. Members that momentarily disagree cannot run a table
    twice: the plan never gives a table to one member while another reports running it."""
    discovered = {alias for r in reports.values() for alias in r.found}
    result = plan([*aliases, *discovered], {key: r.running for key, r in reports.items()})
    return GroupView(owners=result.owners, members=dict(reports))


class TableAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Assigns tables by rendezvous hashing over the live members; never a partition."""

    name = "snowsource-tables"
    version = 0

    def __init__(
        self,
        *,
        key: str,
        aliases: Sequence[str],
        worker_id: Callable[[], str],
        running: Callable[[], Iterable[str]],
        on_view: Callable[[GroupView], None],
        active: Callable[[], bool] = lambda: True,
        found: Callable[[], Iterable[str]] = lambda: (),
    ) -> None:
        self.key = key
        self._found = found
        self._aliases = list(aliases)
        self._worker_id = worker_id
        self._running = running
        self._on_view = on_view
        self._active = active

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        data = encode_metadata(
            self.key, self._worker_id(), self._running(), active=self._active(), found=self._found()
        )
        return ConsumerProtocolMemberMetadata(self.version, list(topics), data)

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        del cluster
        reports: dict[str, MemberReport] = {}
        for member_id, metadata in members.items():
            decoded = decode_metadata(metadata.user_data or b"")
            if decoded is None:
                log.warning(
                    "group member sent no table metadata; it gets no table", member=member_id
                )
                continue
            key, report = decoded
            previous = reports.get(key)
            if previous is not None:
                # The same process twice (an old member id not expired yet): what either
                # runs counts, so nothing it may still poll is handed out.
                report = MemberReport(
                    report.worker_id,
                    tuple(sorted({*previous.running, *report.running})),
                    report.active or previous.active,
                    tuple(sorted({*previous.found, *report.found})),
                )
            reports[key] = report
        view = plan_view(self._aliases, reports) if reports else GroupView(owners={})
        if view.owners:
            withheld = [a for a, k in view.owners.items() if k is None]
            log.info(
                "group plan",
                members=len(reports),
                tables={k: sorted(view.tables_of(k)) for k in reports},
                withheld=withheld,
            )
        data = encode_view(view)
        return {
            member: ConsumerProtocolMemberAssignment(self.version, [], data) for member in members
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        view = decode_view(assignment.user_data or b"")
        if view is None:
            log.warning("group assignment carried no table plan; running no table")
            view = GroupView(owners={})
        self._on_view(view)
