"""Retry timing: full-jitter backoff, Retry-After, and the adaptive page size (SPEC §9)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snowsource.core.retry import (
    GROW_AFTER_SUCCESSES,
    MIN_PAGE_SIZE,
    RETRY_AFTER_CAP_SECONDS,
    PageSizer,
    RetryPolicy,
)

POLICY = RetryPolicy(initial_backoff=0.5, max_backoff=30.0)


class _Extremes(random.Random):
    """An rng whose uniform() returns one end of the range, to pin the ceiling exactly."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


@pytest.mark.parametrize(
    ("attempt", "ceiling"),
    [(0, 0.5), (1, 1.0), (2, 2.0), (5, 16.0), (6, 30.0), (7, 30.0), (10_000, 30.0)],
)
def test_full_jitter_ceiling_doubles_up_to_max(attempt: int, ceiling: float) -> None:
    assert POLICY.next_delay(attempt, rng=_Extremes(high=True)) == ceiling
    assert POLICY.next_delay(attempt, rng=_Extremes(high=False)) == 0.0


@settings(deadline=None)
@given(attempt=st.integers(0, 200), seed=st.integers(0, 2**32))
def test_jitter_stays_in_range(attempt: int, seed: int) -> None:
    delay = POLICY.next_delay(attempt, rng=random.Random(seed))
    assert 0.0 <= delay <= min(30.0, 0.5 * 2**attempt)


def test_jitter_is_spread_out() -> None:
    rng = random.Random(42)
    delays = [POLICY.next_delay(8, rng=rng) for _ in range(2000)]
    assert min(delays) < 3.0
    assert max(delays) > 27.0
    assert 13.0 < sum(delays) / len(delays) < 17.0  # mean of uniform(0, 30)


def test_default_rng_is_used_when_none_given() -> None:
    delays = {POLICY.next_delay(10) for _ in range(20)}
    assert len(delays) > 1
    assert all(0.0 <= d <= 30.0 for d in delays)


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        (2.0, 2.0),
        (0.0, 0.5),  # never a hot loop: at least the initial backoff
        (-5.0, 0.5),
        (120.0, 120.0),  # above max_backoff but below the 300 s cap: obeyed
        (3600.0, RETRY_AFTER_CAP_SECONDS),
        (math.inf, RETRY_AFTER_CAP_SECONDS),
    ],
)
def test_retry_after_is_honoured_within_bounds(retry_after: float, expected: float) -> None:
    assert POLICY.next_delay(0, retry_after=retry_after) == expected
    # The attempt number does not matter when the server said how long to wait.
    assert POLICY.next_delay(9, retry_after=retry_after) == expected


def test_retry_after_cap_follows_a_larger_max_backoff() -> None:
    policy = RetryPolicy(initial_backoff=1.0, max_backoff=900.0)
    assert policy.retry_after_cap == 900.0
    assert policy.next_delay(0, retry_after=3600.0) == 900.0
    assert POLICY.retry_after_cap == 300.0


def test_nan_retry_after_falls_back_to_backoff() -> None:
    assert POLICY.next_delay(3, retry_after=math.nan, rng=_Extremes(high=True)) == 4.0


def test_zero_backoff_policy_is_allowed() -> None:
    policy = RetryPolicy(initial_backoff=0.0, max_backoff=0.0)
    assert policy.next_delay(5) == 0.0
    assert policy.next_delay(0, retry_after=0.0) == 0.0


@pytest.mark.parametrize(
    ("initial", "maximum"), [(-1.0, 1.0), (1.0, -1.0), (math.nan, 1.0), (1.0, math.inf)]
)
def test_policy_refuses_bad_knobs(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        RetryPolicy(initial_backoff=initial, max_backoff=maximum)


def test_negative_attempt_refused() -> None:
    with pytest.raises(ValueError, match="attempt"):
        POLICY.next_delay(-1)


def test_policy_is_frozen() -> None:
    with pytest.raises(AttributeError):
        POLICY.max_backoff = 1.0  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# PageSizer
# --------------------------------------------------------------------------------------------


def test_page_sizer_halves_down_to_ten() -> None:
    sizer = PageSizer(1000)
    assert sizer.size == 1000
    sizes = []
    while sizer.shrink():
        sizes.append(sizer.size)
    assert sizes == [500, 250, 125, 62, 31, 15, 10]
    assert sizer.size == MIN_PAGE_SIZE == 10
    assert not sizer.shrink()
    assert sizer.size == 10


def test_page_sizer_grows_back_after_twenty_consecutive_successes() -> None:
    sizer = PageSizer(1000)
    sizer.shrink()
    sizer.shrink()
    assert sizer.size == 250
    for _ in range(GROW_AFTER_SUCCESSES - 1):
        sizer.success()
    assert sizer.size == 250
    sizer.success()
    assert sizer.size == 500
    for _ in range(GROW_AFTER_SUCCESSES):
        sizer.success()
    assert sizer.size == 1000
    for _ in range(100):
        sizer.success()
    assert sizer.size == 1000  # never above batch_size


def test_page_sizer_growth_is_capped_at_batch_size() -> None:
    sizer = PageSizer(15)
    assert sizer.shrink()
    assert sizer.size == 10
    for _ in range(GROW_AFTER_SUCCESSES):
        sizer.success()
    assert sizer.size == 15


def test_page_sizer_streak_is_broken_by_failures() -> None:
    sizer = PageSizer(100)
    sizer.shrink()
    for _ in range(GROW_AFTER_SUCCESSES - 1):
        sizer.success()
    sizer.shrink()  # another timeout: shrink again, streak restarts
    assert sizer.size == 25
    for _ in range(GROW_AFTER_SUCCESSES - 1):
        sizer.success()
    sizer.failure()
    sizer.success()
    assert sizer.size == 25
    for _ in range(GROW_AFTER_SUCCESSES - 1):
        sizer.success()
    assert sizer.size == 50


def test_page_sizer_successes_at_full_size_do_not_bank() -> None:
    sizer = PageSizer(100)
    for _ in range(GROW_AFTER_SUCCESSES * 3):
        sizer.success()
    sizer.shrink()
    for _ in range(GROW_AFTER_SUCCESSES - 1):
        sizer.success()
    assert sizer.size == 50


def test_page_sizer_small_batch_size() -> None:
    sizer = PageSizer(4)
    assert sizer.size == 4
    assert sizer.floor == 4
    assert not sizer.shrink()
    assert sizer.size == 4
    with pytest.raises(ValueError, match="batch_size"):
        PageSizer(0)
