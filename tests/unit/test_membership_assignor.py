"""The membership group's assignor hands out nothing, whatever the members subscribe to."""

from __future__ import annotations

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from snowsource.adapters.membership import ASSIGNORS, NoPartitionsAssignor


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
