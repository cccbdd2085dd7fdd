"""Liveness and fencing through a Kafka consumer group (SPEC §10).

Every running process joins the group ``snowsource.<name>`` with dynamic membership; its client
id carries its task id, start time, host and pid. After each rebalance (and periodically, as a
safety net) a process describes the group: when another member carries the same task id and
started later, this process is fenced — it stops its pollers, commits what Kafka acknowledged
and exits 1. The offsets script describes the same group to refuse changes while anything runs.

Kafka is the only shared medium, so this works from any machine that reaches the cluster; no
lock files, no extra service.

Joining never holds up the start: after a kill -9 the dead member stays in the group until its
session expires, and a join waits for that rebalance. The pollers start at once and the join
completes in the background; a live duplicate is still fenced, once the rebalance is done. The
group is used for membership only: its assignor hands out no partitions, so the consumer never
fetches.

With ``tasks.assignment: group`` the same membership carries the table assignment instead
(``adapters/group_protocol.py``): the one assignor is the table assignor, nothing is fenced by
task id, and a member that learns it lost its membership stops every table at once. The few
uses of aiokafka's private coordinator (member id, asking for a new round, whether a
coordinator is known) are in :func:`_coordinator` and its callers here, nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import KafkaError

from snowsource.adapters.group_protocol import TableAssignor
from snowsource.adapters.kafka import KafkaConnection, admin_client, stop_client
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

log = structlog.get_logger("snowsource.adapters.membership")

_PREFIX = "snowsource"
CHECK_INTERVAL_SECONDS = 15.0
SESSION_TIMEOUT_MS = 10000
# The task id a group-mode member carries in its client id: it has none, and fences nobody.
GROUP_TASK_ID = -1
#: How often group mode looks at the clock for a stall of the whole process (SIGSTOP, a paused
#: VM): one longer than the session means the group has given this member's tables away.
STALL_WATCH_SECONDS = 0.5
HEARTBEAT_INTERVAL_MS = 1000


def group_id(connector: str) -> str:
    """The consumer group every process of ``connector`` joins."""
    return f"snowsource.{connector}"


@dataclass(frozen=True)
class Member:
    """One live process of the connector, as the group describes it."""

    member_id: str
    task_id: int
    started_ms: int
    host: str
    pid: int
    client_host: str

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.started_ms / 1000))
        who = f"task {self.task_id}" if self.task_id >= 0 else "group member"
        return f"{who} on {self.host} (pid {self.pid}, started {started} UTC)"


def client_id_for(task_id: int, started_ms: int) -> str:
    """The client id that identifies this process in the group."""
    return (
        f"{_PREFIX}|task={task_id}|start={started_ms}|host={socket.gethostname()}|pid={os.getpid()}"
    )


def parse_client_id(member_id: str, client_id: str, client_host: str) -> Member | None:
    """A group member written by :func:`client_id_for`; None for anything else."""
    parts = client_id.split("|")
    if not parts or parts[0] != _PREFIX:
        return None
    fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
    try:
        return Member(
            member_id=member_id,
            task_id=int(fields["task"]),
            started_ms=int(fields["start"]),
            host=fields.get("host", "?"),
            pid=int(fields.get("pid", "0")),
            client_host=client_host,
        )
    except (KeyError, ValueError):
        return None


async def describe_members(conn: KafkaConnection, connector: str) -> list[Member]:
    """Every live process of ``connector`` (empty when none runs)."""
    async with admin_client(conn) as admin:
        responses: list[Any] = await admin.describe_consumer_groups([group_id(connector)])
    members: list[Member] = []
    for response in responses:
        for group in response.to_object()["groups"]:
            if group["error_code"]:
                continue
            for m in group["members"]:
                member = parse_client_id(m["member_id"], m["client_id"], m["client_host"])
                if member is not None:
                    members.append(member)
    return members


class NoPartitionsAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Gives every member an empty assignment: the group exists for liveness, not for data."""

    name = "snowsource-membership"
    version = 0

    @classmethod
    def assign(
        cls,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        del cluster
        return {
            member: ConsumerProtocolMemberAssignment(cls.version, [], b"") for member in members
        }

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(cls.version, list(topics), b"")

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        del assignment


# The broker picks, among the protocols every member supports, the one the members prefer. A 0.1
# process only speaks roundrobin, so during an upgrade beside one the group falls back to it (the
# listener pauses what it assigns); among this release's processes nothing is ever assigned.
ASSIGNORS = (NoPartitionsAssignor, RoundRobinPartitionAssignor)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: GroupMembership) -> None:
        self._owner = owner

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        del revoked
        self._owner.joining()

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self._owner.rebalanced(assigned)


class GroupMembership(AsyncResource):
    """This process's membership in the connector's group; calls ``on_fenced`` once if fenced."""

    def __init__(
        self,
        conn: KafkaConnection,
        *,
        connector: str,
        task_id: int,
        topic: str,
        on_fenced: Callable[[str], None],
        check_interval: float = CHECK_INTERVAL_SECONDS,
        assignor: TableAssignor | None = None,
        session_timeout_ms: int = SESSION_TIMEOUT_MS,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self._conn = conn
        self.connector = connector
        self.task_id = task_id
        self._topic = topic
        self._on_fenced = on_fenced
        self._check_interval = check_interval
        self._assignor = assignor
        self._session_timeout_ms = session_timeout_ms
        self._on_lost = on_lost
        self._no_coordinator_since: float | None = None
        self.started_ms = int(time.time() * 1000)
        self.client_id = client_id_for(task_id, self.started_ms)
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._check_now = asyncio.Event()
        self._fenced = False
        self._joined = False
        self._closed = False
        # Group mode: when this process last ran, and how many stalls past the session it saw.
        self._alive_at = time.monotonic()
        self._stalls = 0
        self._watchdog: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect and ask to join the group; returns before the join completes.

        The join itself (which makes any older duplicate see us) finishes in the background.
        """
        # The start time orders duplicates (the younger fences the older): it is when this
        # process joins, not when its membership was built (two daemons built together).
        self.started_ms = int(time.time() * 1000)
        self.client_id = client_id_for(self.task_id, self.started_ms)
        kwargs = self._conn.client_kwargs()
        kwargs["client_id"] = self.client_id
        consumer = AIOKafkaConsumer(
            **kwargs,
            group_id=group_id(self.connector),
            enable_auto_commit=False,
            session_timeout_ms=self._session_timeout_ms,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            rebalance_timeout_ms=self._session_timeout_ms,
            # Group mode speaks only the table protocol: a process of the other mode (or of
            # 0.1) in the same group is refused by the broker instead of sharing its tables.
            partition_assignment_strategy=ASSIGNORS
            if self._assignor is None
            else (self._assignor,),
        )
        # Kept before start(): a start that fails half-way has connections close() must stop.
        self._consumer = consumer
        await consumer.start()
        # Subscribing after start() is what keeps the join off the start-up path: a consumer
        # subscribed before start() waits there for its first assignment. A subscription is
        # still needed for the group protocol; the assignor turns it into nothing to fetch.
        consumer.subscribe([self._topic], listener=_Listener(self))
        self._task = asyncio.create_task(self._loop(), name="membership")
        if self._assignor is not None:
            self._alive_at = time.monotonic()
            self._watchdog = asyncio.create_task(self._watch_stalls(), name="membership-stalls")
        self._check_now.set()

    async def close(self, deadline: Deadline | None = None) -> None:
        """Leave the group (the offsets script then works at once) within ``deadline``.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        deadline = deadline or Deadline.never()
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        if self._task is not None:
            # Let the loop finish its current step: cancelling aiokafka while it bootstraps a
            # client (our group description) can leak that client's connection.
            await asyncio.wait({self._task}, timeout=deadline.remaining(5))
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await stop_client(self._consumer, "the consumer group membership", deadline)

    def lease(self) -> Callable[[], str | None]:
        """For tables started now: why they may no longer produce, or None while they may.

        A process frozen past its session (SIGSTOP, a paused VM) wakes with the answer to a
        page request waiting in its socket, and its poller may get to send that page before
        any heartbeat or rebalance tells it the table moved. So the answer does not wait for
        them: a stall seen by the watchdog, or one still going on when asked (the watchdog has
        not run since), ends the lease for good.
        """
        stalls = self._stalls

        def lost() -> str | None:
            still = time.monotonic() - self._alive_at
            if self._stalls != stalls or still > self._stall_limit():
                return (
                    f"this process stood still for about the group session "
                    f"({self._session_timeout_ms / 1000:g}s): the group may have given its "
                    f"tables to another member"
                )
            return None

        return lost

    def _stall_limit(self) -> float:
        # The broker counts the session from the last heartbeat, up to one interval (and its
        # round trip) before the stall began: a stall this long may already have cost it.
        session = self._session_timeout_ms / 1000
        return max(session / 2, session - 2 * HEARTBEAT_INTERVAL_MS / 1000)

    async def _watch_stalls(self) -> None:
        while not self._closed:
            await asyncio.sleep(STALL_WATCH_SECONDS)
            self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        """The watchdog's look at the clock: a gap longer than the session is a stall."""
        gap, self._alive_at = now - self._alive_at, now
        if gap > self._stall_limit():
            self._stalls += 1
            log.warning("this process stood still past its group session", seconds=round(gap, 1))
            self._lost(f"this process stood still for {gap:.0f}s, about its group session")
            # If the group did keep us after all, a new round gives the tables back at once.
            self.request_rejoin()

    def request_rejoin(self) -> None:
        """Ask for a new round of the group (after releasing tables the plan withheld)."""
        coordinator = _coordinator(self._consumer)
        if coordinator is not None and not self._closed:
            coordinator.request_rejoin()

    def joining(self) -> None:
        """Rebalance listener, before every join: a member whose id was reset was expelled."""
        if self._joined and self._assignor is not None and not self._member_id():
            self._lost("the group no longer knew this member (session expired)")

    def _lost(self, why: str) -> None:
        if self._on_lost is not None and not self._closed:
            self._on_lost(why)

    def rebalanced(self, assigned: list[TopicPartition]) -> None:
        """Rebalance listener: pause what we were given and look at the group again."""
        if self._consumer is not None and assigned:
            self._consumer.pause(*assigned)
        if not self._joined:
            # Logged because the join completes after the pollers started: after a crash only
            # once the dead process's session expired. Fencing works from here on.
            self._joined = True
            log.info("consumer group joined", group=group_id(self.connector))
        self._check_now.set()

    async def _loop(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        while not self._closed:
            try:
                # Heartbeats run on their own; calling getmany tells the consumer we are alive
                # (max.poll.interval). With no partition assigned it sends no fetch request.
                await consumer.getmany(timeout_ms=500)
            except KafkaError as exc:
                # An outage must not end liveness for good: the consumer rejoins by itself.
                log.warning("consumer group membership interrupted", error=repr(exc))
                await asyncio.sleep(1.0)
                continue
            if self._assignor is not None:
                self._watch_coordinator()
                continue
            if self._check_now.is_set() or self._due():
                self._check_now.clear()
                await self._check()

    def _watch_coordinator(self) -> None:
        """Cut off from the coordinator for a whole session: the group has given our tables to
        others by now, so keeping them would poll them twice."""
        coordinator = _coordinator(self._consumer)
        if coordinator is None or getattr(coordinator, "coordinator_id", None) is not None:
            self._no_coordinator_since = None
            return
        now = time.monotonic()
        if self._no_coordinator_since is None:
            self._no_coordinator_since = now
        elif now - self._no_coordinator_since > self._session_timeout_ms / 1000:
            self._no_coordinator_since = None
            self._lost("no group coordinator reachable for a whole session")

    _last_check = 0.0
    _describe_failing = False

    def _due(self) -> bool:
        return time.monotonic() - self._last_check >= self._check_interval

    async def _check(self) -> None:
        self._last_check = time.monotonic()
        try:
            members = await describe_members(self._conn, self.connector)
        except Exception as exc:  # noqa: BLE001 - a liveness check must never kill the daemon
            # One WARN per run of failures (a coordinator down answers none of them), INFO after.
            level = log.info if self._describe_failing else log.warning
            level("could not describe the consumer group", error=repr(exc))
            self._describe_failing = True
            return
        if self._describe_failing:
            log.info("consumer group described again")
            self._describe_failing = False
        mine = self._member_id()
        newer = [
            m
            for m in members
            if m.task_id == self.task_id
            and m.member_id != mine
            # Ties on start time (same millisecond) are broken by member id, deterministically.
            and (m.started_ms, m.member_id) > (self.started_ms, mine)
        ]
        if newer and not self._fenced:
            self._fenced = True
            self._on_fenced(newer[0].describe())

    def _member_id(self) -> str:
        coordinator = _coordinator(self._consumer)
        return str(getattr(coordinator, "member_id", "") or "")


def _coordinator(consumer: AIOKafkaConsumer | None) -> Any:
    """aiokafka's group coordinator of ``consumer`` (private API, checked against 0.14)."""
    if consumer is None:
        return None
    return getattr(consumer, "_coordinator", None)
