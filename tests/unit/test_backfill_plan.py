"""The sliced backfill's plan (SPEC §14.2): random schedules keep every promise.

A model of the instance (keyset pages over a sorted row set, access rules hiding rows after the
limit applies) answers the plan's fetches; hypothesis draws the schedule: which fetch arrives
next (ranges in any order), acks whole or in part, transient fetch failures, a failure of the
table, a stop, free page slots, contention and the page size (halved at times, as the engine
does when the instance runs out of time). On every step the committed offset (what
``advance`` returns) never moves back and never passes a row Kafka has not acknowledged; at the
end every visible row was read exactly once, or the plan says why it ended early; the plan
never sits still while it says it is running.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snowsource.core.backfill_plan import BackfillPlan, Fetch, RangeState, Status
from snowsource.core.cursor import Position, in_window
from snowsource.core.slices import Backfill, SliceRange, shift_ts

T0 = "2026-01-01 00:00:00"
Key = tuple[str, str]


def ts(second: int) -> str:
    return shift_ts(T0, second)


class HiddenPageError(Exception):
    """Every row of a page was hidden: the engine's count check FAILs the table (SPEC §5)."""


def instance_page(rows: list[Key], hidden: set[Key], fetch: Fetch) -> list[Key]:
    """The instance: ``sysparm_offset`` and the limit apply before access rules, which then
    hide some rows."""
    first = bisect.bisect_left(rows, (fetch.after.ts, fetch.after.id))
    window = [
        k
        for k in rows[first : first + fetch.skip + fetch.limit + 1]
        if in_window(Position(*k), fetch.after, fetch.hi)
    ][fetch.skip :]
    page = [k for k in window[: fetch.limit] if k not in hidden]
    if window and not page:
        raise HiddenPageError
    return page


def plan_for(
    seconds: int,
    *,
    slices: int,
    limit: int,
    max_ahead: int,
    per_slice: int = 2,
    counted: int | None = None,
) -> BackfillPlan:
    """``counted``: the window's rows, known (ranges placed by their first pages)."""
    board = Backfill(
        Position(ts(0), ""), ts(seconds - 1), slices=slices, max_ahead=max_ahead,
        ranges_per_slice=per_slice, expected_rows=counted,
        page_rows=None if counted is None else limit,
    )  # fmt: skip
    return BackfillPlan(board, page_rows=limit)


# ------------------------------------------------------------------ examples


def test_each_reader_has_one_fetch_and_the_slots_bound_them() -> None:
    plan = plan_for(40, slices=4, limit=5, max_ahead=1000)
    fetches = plan.next_fetches(3, contended=False)
    assert [f.reader for f in fetches] == [0, 1, 2]
    assert plan.next_fetches(0, contended=False) == []
    assert [f.reader for f in plan.next_fetches(5, contended=False)] == [3]
    assert plan.next_fetches(5, contended=False) == []  # every reader has its fetch
    assert plan.in_flight() == 4


def test_fetches_reserve_the_page_size_they_are_asked_with() -> None:
    plan = plan_for(40, slices=2, limit=5, max_ahead=1000)
    (first,) = plan.next_fetches(1, contended=False)
    assert first.limit == 5
    # The engine halved its page size (the instance ran out of time): later fetches reserve it.
    (second,) = plan.next_fetches(1, contended=False, page_rows=2)
    assert second.limit == 2
    assert second.range.reserved == 2
    assert plan.on_page(second, [(ts(21), "a"), (ts(22), "b")]).rows == 2
    assert not second.range.finished, "a page of the new size is full"


def test_contended_only_the_first_reader_starts_a_range() -> None:
    plan = plan_for(40, slices=4, limit=5, max_ahead=1000)
    assert [f.reader for f in plan.next_fetches(4, contended=True)] == [0]


def test_states_and_the_offset_moves_forward_only() -> None:
    plan = plan_for(10, slices=2, limit=5, max_ahead=1000, per_slice=1)
    first, second = plan.next_fetches(2, contended=False)
    r0, r1 = first.range, second.range
    assert plan.state(r0) is RangeState.READING
    # The second range reads its rows and is acknowledged first: the prefix waits for the first.
    assert plan.on_page(second, [(ts(6), "a")]).rows == 1
    plan.on_ack(r1, Position(ts(6), "a"))
    assert plan.advance() is None
    assert plan.on_page(first, [(ts(1), "a"), (ts(7), "b")]).rows == 1  # clipped: finished
    assert plan.state(r0) is RangeState.READ
    # With it acknowledged, the prefix runs through it into the second range's acknowledged rows.
    assert plan.for_transaction(r0, Position(ts(1), "a")) == Position(ts(6), "a")
    plan.on_ack(r0, Position(ts(1), "a"))
    assert plan.state(r0) is RangeState.SETTLED
    assert plan.advance() == Position(ts(6), "a")
    assert plan.advance() is None  # it did not move again
    assert plan.outcome().status is Status.RUNNING  # the second range is not read to its end


def test_a_partial_ack_blocks_the_plan_and_holds_the_offset() -> None:
    plan = plan_for(10, slices=1, limit=5, max_ahead=1000, per_slice=1)
    (fetch,) = plan.next_fetches(1, contended=False)
    plan.on_page(fetch, [(ts(1), "a"), (ts(2), "b")])
    plan.on_ack(fetch.range, Position(ts(1), "a"), complete=False)
    assert plan.state(fetch.range) is RangeState.BROKEN
    assert plan.advance() == Position(ts(1), "a")
    assert plan.next_fetches(1, contended=False) == []
    outcome = plan.outcome()
    assert outcome.status is Status.BLOCKED
    assert "in part" in outcome.reason


def test_a_failure_is_raised_once_every_row_before_it_is_acknowledged() -> None:
    plan = plan_for(20, slices=2, limit=5, max_ahead=1000, per_slice=1)
    first, second = plan.next_fetches(2, contended=False)
    plan.on_fetch_failed(second, fails_table=True)
    assert plan.state(second.range) is RangeState.FAILING
    assert plan.outcome().status is Status.RUNNING  # the first range still runs
    assert plan.next_fetches(2, contended=False) == []  # the first's fetch is in flight
    plan.on_page(first, [(ts(1), "a"), (ts(12), "b")])
    assert plan.outcome().status is Status.RUNNING  # its page awaits its ack
    plan.on_ack(first.range, Position(ts(1), "a"))
    outcome = plan.outcome()
    assert outcome.status is Status.FAILED
    assert outcome.failed is second.range


def test_a_fetch_for_nothing_is_a_bug() -> None:
    plan = plan_for(10, slices=1, limit=5, max_ahead=1000)
    (fetch,) = plan.next_fetches(1, contended=False)
    plan.on_fetch_failed(fetch)
    with pytest.raises(ValueError, match="no such fetch"):
        plan.on_page(fetch, [])


# ------------------------------------------------------------------ the property


@dataclass
class World:
    plan: BackfillPlan
    rows: list[Key]
    hidden: set[Key]
    limit: int  # the table's page size (the engine may halve it)
    in_flight: list[Fetch] = field(default_factory=list)
    # Pages read and not acknowledged, per range, oldest first (a range's pages are produced in
    # order; ranges are acknowledged in any order).
    unacked: dict[int, tuple[SliceRange, list[list[Key]]]] = field(default_factory=dict)
    acked: set[Key] = field(default_factory=set)
    read: list[Key] = field(default_factory=list)
    committed: Position | None = None
    checked: int = 0
    hidden_page: bool = False  # a whole page was hidden: the table FAILs
    # Rows that left the window meanwhile (updated past HI, deleted): read or not, either is
    # right; the stream phase reads their new versions.
    gone: set[Key] = field(default_factory=set)

    def pages(self) -> list[tuple[SliceRange, list[list[Key]]]]:
        return [entry for entry in self.unacked.values() if entry[1]]


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[Key], set[Key], int]:
    seconds = draw(st.integers(1, 30))
    counts = draw(st.lists(st.integers(0, 6), min_size=seconds, max_size=seconds))
    rows = sorted((ts(s), f"{i:04x}") for s, n in enumerate(counts) for i in range(n))
    hidden = {k for k in rows if draw(st.integers(0, 15)) == 0}
    return rows, hidden, seconds


def _step(world: World, rnd: random.Random, *, mischief: bool, vanish: bool = False) -> None:
    """One event of the schedule."""
    plan = world.plan
    if vanish and world.rows and rnd.random() < 0.05:
        world.gone.add(world.rows.pop(rnd.randrange(len(world.rows))))
    # The engine halves its page size when the instance runs out of time, and grows it back.
    size = rnd.choice((world.limit, max(1, world.limit // 2)))
    for fetch in plan.next_fetches(rnd.randint(0, 3), contended=rnd.random() < 0.3, page_rows=size):
        world.in_flight.append(fetch)
    choices = ["arrive"] * bool(world.in_flight) + ["ack"] * bool(world.pages())
    if not choices:
        return
    kind = rnd.choice(choices)
    if kind == "arrive":
        fetch = world.in_flight.pop(rnd.randrange(len(world.in_flight)))
        if mischief and rnd.random() < 0.1:
            plan.on_fetch_failed(fetch, fails_table=rnd.random() < 0.2)
            return
        try:
            page = instance_page(world.rows, world.hidden, fetch)
        except HiddenPageError:
            plan.on_fetch_failed(fetch, fails_table=True)
            world.hidden_page = True
            return
        kept = plan.on_page(fetch, page)
        keys = page[kept.first : kept.first + kept.rows]
        world.read.extend(keys)
        if keys:
            r = fetch.range
            world.unacked.setdefault(id(r), (r, []))[1].append(keys)
        return
    r, queue = rnd.choice(world.pages())
    keys = queue.pop(0)
    if mischief and rnd.random() < 0.05:
        part = rnd.randrange(len(keys))  # Kafka took only the first ``part`` rows
        world.acked.update(keys[:part])
        plan.on_ack(r, Position(*keys[part - 1]) if part else None, complete=False)
    else:
        world.acked.update(keys)
        plan.on_ack(r, Position(*keys[-1]))


def _check(world: World, visible: list[Key]) -> None:
    """The committed offset never moves back and never passes an unacknowledged row."""
    moved = world.plan.advance()
    if moved is None:
        return
    assert world.committed is None or moved > world.committed, "the offset moved back"
    world.committed = moved
    while world.checked < len(visible) and Position(*visible[world.checked]) <= moved:
        key = visible[world.checked]
        assert key in world.acked or key in world.gone, f"offset {moved} passes {key}"
        world.checked += 1


@settings(max_examples=600, deadline=None)
@given(
    tables(),
    st.integers(1, 6),
    st.integers(2, 5),
    st.integers(0, 40),
    st.integers(1, 3),
    st.booleans(),
    st.integers(0, 400),
    st.randoms(use_true_random=False),
    st.sampled_from(["cut", "counted", "counted, rows leaving"]),
)
def test_random_schedules_keep_every_promise(  # noqa: PLR0917 - one argument per strategy
    table: tuple[list[Key], set[Key], int],
    slices: int,
    limit: int,
    max_ahead: int,
    per_slice: int,
    mischief: bool,
    stop_at: int,
    rnd: random.Random,
    board: str,
) -> None:
    """``board``: ranges cut in time, or placed by their first pages (the window's rows
    counted), while rows leave the window or not."""
    rows, hidden, seconds = table
    visible = [k for k in rows if k not in hidden]
    counted = None if board == "cut" else len(rows)
    plan = plan_for(
        seconds, slices=slices, limit=limit, max_ahead=max_ahead, per_slice=per_slice,
        counted=counted,
    )  # fmt: skip
    world = World(plan, list(rows), hidden, limit)
    vanish = board.endswith("leaving")
    for step in range(20_000):
        if step == stop_at and mischief:
            plan.stop()
        outcome = plan.outcome()
        if outcome.status is not Status.RUNNING and not world.in_flight and not world.pages():
            break
        before = (len(world.in_flight), sum(len(q) for _, q in world.pages()))
        _step(world, rnd, mischief=mischief, vanish=vanish)
        _check(world, visible)
        if not world.in_flight and not world.pages() and plan.outcome().status is Status.RUNNING:
            # Liveness: with nothing in flight and nothing to acknowledge, a running plan has
            # something to fetch given a slot and no contention.
            fetches = plan.next_fetches(slices, contended=False)
            assert fetches, f"running, nothing to do: {plan.board.ranges} {before}"
            world.in_flight.extend(fetches)
        assert plan.board.ahead() <= max_ahead, "rows ahead of the prefix passed the limit"
    else:
        pytest.fail("the plan never ended")
    outcome = plan.outcome()
    if outcome.status is Status.DONE:
        read = sorted(world.read)
        assert len(read) == len(set(read)), "no row is read twice"
        assert set(read) <= set(visible), "nothing else is read"
        # A counted board's last range may end on a short page once the count is read: the
        # sweep after the backfill reads on from its last row (``last_read``).
        last = plan.last_read()
        swept = {k for k in visible if counted and last is not None and Position(*k) > last}
        assert set(read) >= set(visible) - world.gone - swept, "every visible row is read"
        if not world.gone and not swept:
            assert plan.committed == (Position(*visible[-1]) if visible else None)
    else:
        assert mischief or world.hidden_page, f"ended early without a reason: {outcome}"
        assert outcome.status in {Status.STOPPED, Status.FAILED, Status.BLOCKED}
        assert len(world.read) == len(set(world.read)), "a row was read twice"
