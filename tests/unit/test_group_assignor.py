"""The table assignor: the plan travels in the assignment's user data, never a partition."""

from __future__ import annotations

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from snowsource.adapters.group_protocol import (
    GroupView,
    MemberReport,
    TableAssignor,
    decode_metadata,
    decode_view,
    encode_metadata,
    encode_view,
    plan_view,
)
from snowsource.core.group_plan import owner_among

ALIASES = [f"t{i}" for i in range(9)]


def _assignor(key: str, running: set[str], seen: list[GroupView]) -> TableAssignor:
    return TableAssignor(
        key=key,
        aliases=ALIASES,
        worker_id=lambda: f"{key}:8083",
        running=lambda: running,
        on_view=seen.append,
    )


def test_metadata_and_view_round_trip() -> None:
    data = encode_metadata("h/1/2", "h:8083", {"b", "a"}, active=False)
    assert decode_metadata(data) == ("h/1/2", MemberReport("h:8083", ("a", "b"), active=False))
    view = GroupView(owners={"a": "h/1/2", "b": None}, members={"h/1/2": MemberReport("h:1", ())})
    assert decode_view(encode_view(view)) == view


def test_foreign_metadata_is_recognised_as_such() -> None:
    assert decode_metadata(b"") is None
    assert decode_metadata(b'{"key": 1}') is None
    assert decode_view(b"") is None


def test_the_leader_assigns_no_partition_and_sends_every_member_the_whole_plan() -> None:
    seen: list[GroupView] = []
    members = {
        f"member-{k}": ConsumerProtocolMemberMetadata(
            0, ["offsets"], _assignor(k, set(), seen).metadata(["offsets"]).user_data
        )
        for k in ("a", "b", "c")
    }
    leader = _assignor("a", set(), seen)
    assignments = leader.assign(ClusterMetadata(), members)
    assert set(assignments) == set(members)
    # No topic partition at all: the consumer has nothing to fetch.
    assert all(a.assignment == [] for a in assignments.values())
    datas = {a.user_data for a in assignments.values()}
    assert len(datas) == 1
    leader.on_assignment(next(iter(assignments.values())))
    view = seen[-1]
    assert {alias: view.owners[alias] for alias in ALIASES} == {
        alias: owner_among(alias, ["a", "b", "c"]) for alias in ALIASES
    }
    assert view.worker_of(ALIASES[0]) == f"{view.owners[ALIASES[0]]}:8083"


def test_what_a_member_still_runs_is_withheld_from_a_new_owner() -> None:
    seen: list[GroupView] = []
    alias = ALIASES[0]
    winner = owner_among(alias, ["a", "b"])
    loser = "b" if winner == "a" else "a"
    metadata = {
        winner: _assignor(winner, set(), seen).metadata([]),
        loser: _assignor(loser, {alias}, seen).metadata([]),
    }
    assignments = _assignor("a", set(), seen).assign(ClusterMetadata(), metadata)
    view = decode_view(assignments[winner].user_data)
    assert view is not None
    assert view.owners[alias] is None


def test_an_assignment_without_a_plan_runs_nothing() -> None:
    seen: list[GroupView] = []
    assignor = _assignor("a", set(), seen)
    members = {"m": ConsumerProtocolMemberMetadata(0, [], b"not ours")}
    assignment = assignor.assign(ClusterMetadata(), members)["m"]
    assignor.on_assignment(assignment)
    assert seen[-1].owners == {}


def test_the_plan_covers_every_members_discovered_tables_and_never_two_runners() -> None:
    # SPEC §15.2: members that momentarily disagree about the discovered set.
    a = MemberReport("wa", running=("u_x",), found=("u_x", "u_new"))
    b = MemberReport("wb", running=(), found=("u_x",))  # has not seen u_new yet
    view = plan_view(["incident"], {"a": a, "b": b})
    assert set(view.owners) == {"incident", "u_x", "u_new"}
    # u_x is run by a: it is never given to b while a reports running it.
    assert view.owners["u_x"] in ("a", None)
    decoded = decode_metadata(encode_metadata("a", "wa", ["u_x"], found=["u_new", "u_x"]))
    assert decoded is not None
    assert decoded[1].found == ("u_new", "u_x")
    old = decode_metadata(b'{"key": "k", "worker": "w", "runs": []}')
    assert old is not None
    assert old[1].found == ()
