"""The membership group's assignor hands out nothing, whatever the members subscribe to."""

from __future__ import annotations

import time

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.membership import (
    ASSIGNORS,
    GROUP_TASK_ID,
    GroupMembership,
    NoPartitionsAssignor,
)


def test_every_member_gets_an_empty_assignment() -> None:
    members = {
        m: ConsumerProtocolMemberMetadata(0, ["offsets", "snow.incident"], b"") for m in "abc"
    }
    assignment = NoPartitionsAssignor.assign(ClusterMetadata(), members)
    assert set(assignment) == {"a", "b", "c"}
    assert all(a.assignment == [] for a in assignment.values())


def test_preferred_first_with_the_0_1_assignor_as_fallback() -> None:
    # The broker picks, among the protocols all members support, the one they prefer: ours
    # among 0.2 processes, roundrobin beside a 0.1 process (the only one it offers).
    assert [a.name for a in ASSIGNORS] == ["snowsource-membership", "roundrobin"]


def test_a_stall_past_the_session_ends_every_lease_given_before_it() -> None:
    """Issue 23 item 7: the watchdog's view of a SIGSTOP; the lease also ends while the stall
    has not been seen yet (the page's answer may be handled before the watchdog runs)."""
    lost: list[str] = []
    member = GroupMembership(
        KafkaConnection("127.0.0.1:1"),
        connector="c",
        task_id=GROUP_TASK_ID,
        topic="t",
        on_fenced=print,
        session_timeout_ms=6000,
        on_lost=lost.append,
    )
    start = time.monotonic()
    member.tick(start)
    before = member.lease()
    assert before() is None
    member.tick(start + 1)  # a busy loop, not a stall
    assert before() is None
    assert not lost
    member.tick(start + 6)  # over session - 2 heartbeat intervals since the last tick
    assert before() is not None
    assert "stood still" in lost[0]
    member.tick(time.monotonic())
    after = member.lease()  # tables started after the stall hold a fresh lease
    assert after() is None
    assert before() is not None
