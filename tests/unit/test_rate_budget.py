"""``core.rate_budget.RateBudget``: pacing requests to an hourly budget (SPEC §15.3)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snowsource.core.rate_budget import HOUR, RateBudget


def _drain(budget: RateBudget, start: float, until: float) -> list[float]:
    """Start every request as early as the budget allows from ``start`` to ``until``."""
    now, starts = start, list[float]()
    while True:
        now += budget.delay(now)
        if now >= until:
            return starts
        budget.spend(now)
        starts.append(now)


def test_no_budget_never_waits() -> None:
    budget = RateBudget()
    for i in range(100):
        assert budget.delay(float(i) / 1000) == 0
        budget.spend(float(i) / 1000)
    assert budget.status(1.0).per_hour is None


def test_the_configured_budget_is_spent_evenly_less_the_headroom() -> None:
    budget = RateBudget(max_per_hour=3600, headroom=0.1, burst=4)
    starts = _drain(budget, 0.0, HOUR)
    # 0.9 request a second for an hour, plus the burst the bucket starts with.
    assert 3240 <= len(starts) <= 3240 + 4
    assert budget.status(10.0).per_hour == pytest.approx(3240)


def test_the_instance_window_is_trusted_and_its_allowance_spread_until_the_reset() -> None:
    budget = RateBudget(headroom=0.1, burst=2)
    # A rule of 600 an hour whose window ends in 60 s (a window the instance compressed, or
    # the last minute of an hour): 540 may be spent, evenly, by the reset.
    budget.observe(600, window=1060.0, now=1000.0)
    starts = _drain(budget, 1000.0, 1060.0)
    assert 530 <= len(starts) <= 542
    # Evenly: no ten seconds carry more than their share plus the burst.
    for t in range(1000, 1050):
        inside = [s for s in starts if t <= s < t + 10]
        assert len(inside) <= 540 / 60 * 10 + 2 + 1


def test_a_new_reset_starts_a_new_window_and_an_old_one_is_ignored() -> None:
    budget = RateBudget(headroom=0.0, burst=1)
    budget.observe(100, window=100.0, now=0.0)
    for _ in range(50):
        budget.spend(1.0)
    assert budget.status(1.0).used_in_window == 50
    budget.observe(100, window=200.0, now=100.0)
    assert budget.status(100.0).used_in_window == 0
    budget.observe(100, window=100.0, now=100.5)  # a late answer of the window before
    assert budget.status(100.5).window_ends == 200.0


def test_a_window_that_ended_binds_nothing_and_its_requests_count_in_the_next() -> None:
    budget = RateBudget(headroom=0.0, burst=2)
    budget.observe(10, window=100.0, now=0.0)
    assert budget.rate(150.0) is None
    budget.spend(150.0)
    budget.spend(150.0)
    budget.observe(10, window=200.0, now=150.5)
    assert budget.status(150.5).used_in_window == 2
    assert budget.rate(150.5) == pytest.approx(8 / 49.5)


def test_answers_of_one_window_keep_its_count_and_the_earliest_end() -> None:
    # Each answer converts the reset with its own Date header (one-second resolution): the
    # estimates differ, but the window (the header as sent) is the same and so is its count.
    budget = RateBudget(headroom=0.0, burst=1)
    budget.observe(10, window=100.0, now=0.0, ends=100.7)
    budget.spend(0.0)
    budget.observe(10, window=100.0, now=0.5, ends=100.2)
    budget.observe(10, window=100.0, now=0.6, ends=100.9)
    status = budget.status(0.6)
    assert (status.used_in_window, status.window_ends) == (1, 100.2)


def test_nothing_left_in_the_window_waits_for_its_end() -> None:
    budget = RateBudget(headroom=0.0, burst=1)
    budget.observe(10, window=100.0, now=0.0)
    for _ in range(10):
        budget.spend(0.0)
    assert budget.delay(40.0) == pytest.approx(60.0)


def test_the_smaller_budget_wins_and_members_share_it() -> None:
    budget = RateBudget(max_per_hour=7200, headroom=0.0, burst=1)
    budget.observe(3600, window=HOUR, now=0.0)
    assert budget.rate(0.0) == pytest.approx(1.0)  # the instance's 3600/h beats 7200/h
    budget.set_members(3)
    assert budget.rate(0.0) == pytest.approx(1 / 3)
    budget.set_members(0)  # never below one member
    assert budget.rate(0.0) == pytest.approx(1.0)


def test_waiting_time_is_counted() -> None:
    budget = RateBudget(max_per_hour=36, headroom=0.0)
    budget.waited(1.5)
    budget.waited(-1)
    assert budget.status(0.0).waited_seconds == 1.5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"headroom": 1.0}, "headroom"),
        ({"headroom": -0.1}, "headroom"),
        ({"burst": 0}, "burst"),
        ({"max_per_hour": 0}, "max_per_hour"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RateBudget(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    per_hour=st.integers(60, 20000),
    headroom=st.floats(0.0, 0.5),
    burst=st.integers(1, 16),
    window=st.floats(10.0, 600.0),
    length=st.floats(1.0, 60.0),
)
def test_no_interval_carries_more_than_its_rate_times_length_plus_the_burst(
    per_hour: int, headroom: float, burst: int, window: float, length: float
) -> None:
    budget = RateBudget(max_per_hour=per_hour, headroom=headroom, burst=burst)
    starts = _drain(budget, 0.0, window)
    rate = per_hour * (1 - headroom) / HOUR
    for i, first in enumerate(starts):
        inside = sum(1 for s in starts[i:] if s < first + length)
        assert inside <= rate * length + burst + 1e-6
    # And it is not idle: the budget of the window is (nearly) all spent.
    assert len(starts) >= int(rate * window) - 1


def test_requests_of_the_old_windows_last_second_count_in_the_next() -> None:
    # The old window's end is known to a second (Date headers): what was sent in its last
    # second may already be counted by the instance in the new window.
    budget = RateBudget(headroom=0.0, burst=8)
    budget.observe(100, window=100.0, now=90.0)
    for started in (98.5, 99.2, 99.6):
        budget.spend(started)
    budget.observe(100, window=200.0, now=100.4)
    assert budget.status(100.4).used_in_window == 2  # 99.2 and 99.6, not 98.5
