"""The commit rule (SPEC §6): only the contiguous acknowledged prefix is ever committable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.commit import CommitTracker


def test_nothing_is_committable_before_an_ack() -> None:
    tracker: CommitTracker[str] = CommitTracker()
    assert tracker.committable() is None
    tracker.submit("r1")
    assert tracker.committable() is None
    assert tracker.pending == 1


def test_in_order_acks() -> None:
    tracker: CommitTracker[str] = CommitTracker()
    tickets = [tracker.submit(f"r{i}") for i in range(1, 4)]
    assert tickets == [0, 1, 2]
    tracker.ack(tickets[0])
    assert tracker.committable() == "r1"
    assert tracker.committable() is None  # taken
    tracker.ack(tickets[1])
    tracker.ack(tickets[2])
    assert tracker.pending == 0
    assert tracker.committable() == "r3"  # several acks coalesce into one offset write
    assert tracker.committable() is None
    assert tracker.in_flight == 0


def test_an_unacked_record_holds_back_every_later_offset() -> None:
    # connect-offsets §9.3 (7): r1, r2, r4 acked, r3 not: only r2 is committable.
    tracker: CommitTracker[str] = CommitTracker()
    tickets = {name: tracker.submit(name) for name in ("r1", "r2", "r3", "r4", "r5")}
    for name in ("r4", "r2", "r1"):
        tracker.ack(tickets[name])
    assert tracker.pending == 2
    assert tracker.committable() == "r2"
    assert tracker.committable() is None
    tracker.ack(tickets["r5"])
    assert tracker.committable() is None  # still blocked on r3
    tracker.ack(tickets["r3"])
    assert tracker.committable() == "r5"
    assert tracker.pending == 0


def test_duplicate_and_late_acks_are_ignored() -> None:
    tracker: CommitTracker[str] = CommitTracker()
    first, second = tracker.submit("a"), tracker.submit("b")
    tracker.ack(second)
    tracker.ack(second)
    assert tracker.pending == 1
    tracker.ack(first)
    assert tracker.committable() == "b"
    tracker.ack(first)  # already taken
    assert tracker.pending == 0
    assert tracker.committable() is None


def test_a_ticket_never_issued_is_a_bug() -> None:
    tracker: CommitTracker[str] = CommitTracker()
    with pytest.raises(ValueError, match="never issued"):
        tracker.ack(0)
    tracker.submit("a")
    with pytest.raises(ValueError, match="never issued"):
        tracker.ack(1)
    with pytest.raises(ValueError, match="never issued"):
        tracker.ack(-1)


def test_offsets_may_be_any_object_including_falsy_ones() -> None:
    tracker: CommitTracker[int] = CommitTracker()
    tracker.ack(tracker.submit(0))
    assert tracker.committable() == 0


@st.composite
def _schedules(draw: st.DrawFn) -> tuple[int, list[int], list[bool]]:
    n = draw(st.integers(min_value=0, max_value=60))
    order = draw(st.permutations(list(range(n))))
    acked_count = draw(st.integers(min_value=0, max_value=n))
    polls = draw(st.lists(st.booleans(), min_size=acked_count, max_size=acked_count))
    return n, list(order[:acked_count]), polls


@given(_schedules())
def test_random_ack_orders_never_commit_past_an_unacked_record(
    schedule: tuple[int, list[int], list[bool]],
) -> None:
    n, ack_order, polls = schedule
    tracker: CommitTracker[int] = CommitTracker()
    # The offset a record carries is its own index, so "past" is a plain comparison.
    tickets = [tracker.submit(i) for i in range(n)]
    acked: set[int] = set()
    last_committed = -1
    for ticket, poll in zip(ack_order, polls, strict=True):
        tracker.ack(tickets[ticket])
        acked.add(ticket)
        if poll:
            got = tracker.committable()
            if got is not None:
                assert got > last_committed
                assert all(i in acked for i in range(got + 1))
                last_committed = got
        assert tracker.pending == n - len(acked)
    prefix = 0
    while prefix in acked:
        prefix += 1
    final = tracker.committable()
    if final is not None:
        last_committed = final
    # The last committable equals the offset of the highest contiguous acked ticket.
    assert last_committed == prefix - 1
    assert tracker.committable() is None
    assert tracker.in_flight == n - prefix


@given(st.lists(st.tuples(st.sampled_from(["submit", "ack", "poll"]), st.integers(0, 200))))
def test_interleaved_operations_match_a_model(ops: list[tuple[str, int]]) -> None:
    tracker: CommitTracker[int] = CommitTracker()
    generation: list[int] = []  # tickets of the current generation, in submit order
    acked: set[int] = set()
    issued = 0
    for op, arg in ops:
        if op == "submit":
            ticket = tracker.submit(issued)  # offset == ticket, for easy checking
            assert ticket == issued
            generation.append(ticket)
            issued += 1
        elif op == "ack" and issued:
            ticket = arg % issued
            tracker.ack(ticket)
            if ticket in generation:
                acked.add(ticket)
        elif op == "poll":
            expected = None
            while generation and generation[0] in acked:
                expected = generation.pop(0)
                acked.discard(expected)
            assert tracker.committable() == expected
        assert tracker.pending == len(generation) - len(acked)
        assert tracker.in_flight == len(generation)
