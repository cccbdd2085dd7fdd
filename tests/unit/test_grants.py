"""The AIMD concurrency limit and the round-robin grant order (``core.grants``), exhaustively."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.grants import GROW_AFTER_SUCCESSES, AimdLimit, FairQueue, Priority

# ---- AimdLimit ---------------------------------------------------------------------------------


def test_limit_starts_at_the_ceiling() -> None:
    limit = AimdLimit(8)
    assert (limit.value, limit.ceiling, limit.epoch) == (8, 8, 0)


@pytest.mark.parametrize("ceiling", [0, -1])
def test_a_ceiling_below_one_is_refused(ceiling: int) -> None:
    with pytest.raises(ValueError, match="ceiling"):
        AimdLimit(ceiling)


def test_saturation_halves_down_to_one_and_never_below() -> None:
    limit = AimdLimit(8)
    seen = []
    for _ in range(6):
        assert limit.saturated(limit.epoch) is True
        seen.append(limit.value)
    assert seen == [4, 2, 1, 1, 1, 1]
    assert limit.epoch == 6


def test_odd_values_halve_downwards() -> None:
    limit = AimdLimit(7)
    limit.saturated(0)
    assert limit.value == 3


def test_answers_to_requests_granted_before_a_decrease_do_not_halve_again() -> None:
    limit = AimdLimit(8)
    granted = limit.epoch  # eight requests in flight, all granted in epoch 0
    assert limit.saturated(granted) is True
    for _ in range(7):  # the other seven come back 429 too: one signal, not eight
        assert limit.saturated(granted) is False
    assert limit.value == 4
    assert limit.saturated(limit.epoch) is True  # a request granted after the decrease counts
    assert limit.value == 2


def test_twenty_successes_raise_the_limit_by_one_up_to_the_ceiling() -> None:
    limit = AimdLimit(4)
    limit.saturated(0)
    limit.saturated(1)
    assert limit.value == 1
    raised = [limit.succeeded() for _ in range(GROW_AFTER_SUCCESSES * 5)]
    assert raised.count(True) == 3  # 1 -> 4, then the ceiling holds
    assert [i for i, r in enumerate(raised) if r] == [19, 39, 59]
    assert limit.value == 4


def test_successes_before_a_saturation_do_not_count_after_it() -> None:
    limit = AimdLimit(8)
    limit.saturated(0)
    for _ in range(GROW_AFTER_SUCCESSES - 1):
        limit.succeeded()
    limit.saturated(limit.epoch)
    assert limit.value == 2
    for _ in range(GROW_AFTER_SUCCESSES - 1):
        assert limit.succeeded() is False
    assert limit.succeeded() is True
    assert limit.value == 3


def test_successes_at_the_ceiling_are_not_banked() -> None:
    limit = AimdLimit(2)
    for _ in range(GROW_AFTER_SUCCESSES * 3):
        assert limit.succeeded() is False
    limit.saturated(0)
    assert limit.value == 1
    assert [limit.succeeded() for _ in range(GROW_AFTER_SUCCESSES)].count(True) == 1


@given(st.integers(1, 64), st.lists(st.sampled_from(["ok", "sat", "stale"]), max_size=300))
def test_limit_always_between_one_and_the_ceiling(ceiling: int, events: list[str]) -> None:
    limit = AimdLimit(ceiling)
    for event in events:
        before = limit.value
        if event == "ok":
            limit.succeeded()
            assert limit.value in (before, before + 1)
        elif event == "sat":
            limit.saturated(limit.epoch)
            assert limit.value == max(1, before // 2)
        else:
            limit.saturated(limit.epoch - 1)
            assert limit.value == before
        assert 1 <= limit.value <= ceiling


# ---- FairQueue ---------------------------------------------------------------------------------


def drain(queue: FairQueue[str]) -> list[str]:
    out = []
    while (ticket := queue.pop()) is not None:
        out.append(ticket)
    return out


def test_an_empty_queue_grants_nothing() -> None:
    queue: FairQueue[str] = FairQueue()
    assert queue.pop() is None
    assert len(queue) == 0


def test_one_key_is_fifo() -> None:
    queue: FairQueue[str] = FairQueue()
    for n in range(4):
        queue.push("incident", f"i{n}")
    assert drain(queue) == ["i0", "i1", "i2", "i3"]


def test_keys_take_turns_whatever_each_queued() -> None:
    queue: FairQueue[str] = FairQueue()
    for n in range(3):
        queue.push("incident", f"i{n}")
    queue.push("change", "c0")
    for n in range(2):
        queue.push("task", f"t{n}")
    assert drain(queue) == ["i0", "c0", "t0", "i1", "t1", "i2"]


def test_a_key_asking_again_joins_behind_the_keys_that_waited() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", "a0")
    queue.push("b", "b0")
    assert queue.pop() == "a0"
    queue.push("a", "a1")  # the backfill asks for its next page at once
    queue.push("c", "c0")
    assert drain(queue) == ["b0", "a1", "c0"]


def test_low_priority_waits_for_every_normal_ticket() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("sweep", "s0", Priority.LOW)
    queue.push("sweep", "s1", Priority.LOW)
    queue.push("a", "a0")
    assert queue.waiting(Priority.LOW) == 2
    assert queue.waiting(Priority.STREAM) == 1
    assert queue.pop() == "a0"
    assert queue.pop() == "s0"
    queue.push("b", "b0")  # a normal request that arrives later still goes first
    assert drain(queue) == ["b0", "s1"]


def test_a_key_may_wait_at_both_priorities_separately() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("incident", "low", Priority.LOW)
    queue.push("incident", "page")
    assert drain(queue) == ["page", "low"]


def test_removing_a_ticket_withdraws_it_and_only_it() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", "a0")
    queue.push("a", "a1")
    queue.push("b", "b0")
    assert queue.remove("a", "a0") is True
    assert queue.remove("a", "a0") is False
    assert queue.remove("zzz", "a1") is False
    assert queue.remove("a", "a1", Priority.LOW) is False
    assert queue.remove("b", "b0") is True  # its key leaves the ring
    assert drain(queue) == ["a1"]


@given(
    st.integers(1, 6),
    st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=200),
)
def test_a_waiting_key_is_granted_within_one_turn_of_every_other_key(
    backfills: int, events: list[tuple[int, bool]]
) -> None:
    """The SPEC §14.1 bound: a streaming request never waits behind more than one ticket of each
    other key, however many tickets the backfills keep queuing."""
    queue: FairQueue[tuple[str, int]] = FairQueue()
    keys = [f"backfill{n}" for n in range(backfills)]
    serial = 0
    for key in keys:
        for _ in range(3):
            queue.push(key, (key, serial))
            serial += 1
    queue.push("stream", ("stream", -1))
    granted_before: list[str] = []
    for index, push in itertools.islice(itertools.cycle(events), 1000):
        ticket = queue.pop()
        assert ticket is not None
        if ticket[0] == "stream":
            break
        granted_before.append(ticket[0])
        if push:  # the backfill that was just served (or another) queues yet another page
            key = keys[index % backfills]
            queue.push(key, (key, serial))
            serial += 1
    assert "stream" not in granted_before
    assert len(granted_before) <= backfills
    assert all(granted_before.count(key) <= 1 for key in keys), granted_before
