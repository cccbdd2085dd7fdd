"""Instance time from Date headers: smallest drift of the last minute (SPEC §5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from snowsource.core.clock import DRIFT_WINDOW_SECONDS, InstanceClock
from snowsource.core.cursor import format_ts, high_water_mark

BASE = datetime(2026, 9, 29, 7, 30, 0, tzinfo=UTC)


class FakeTime:
    """Independent wall and monotonic clocks under test control."""

    def __init__(self) -> None:
        self.wall_s = BASE.timestamp()
        self.mono_s = 1000.0

    def wall(self) -> float:
        return self.wall_s

    def mono(self) -> float:
        return self.mono_s

    def advance(self, seconds: float) -> None:
        self.wall_s += seconds
        self.mono_s += seconds

    def header(self, drift: float) -> str:
        """The Date header an instance whose clock is ``drift`` s ahead would send right now."""
        return format_datetime(
            datetime.fromtimestamp(self.wall_s + drift, tz=UTC).replace(microsecond=0),
            usegmt=True,
        )


@pytest.fixture
def ft() -> FakeTime:
    return FakeTime()


@pytest.fixture
def clock(ft: FakeTime) -> InstanceClock:
    return InstanceClock(wall=ft.wall, mono=ft.mono)


def test_no_observation_means_local_clock(ft: FakeTime, clock: InstanceClock) -> None:
    assert not clock.has_observation
    assert clock.drift is None
    assert clock.now() == BASE


def test_parses_rfc7231_header(ft: FakeTime, clock: InstanceClock) -> None:
    clock.observe_date_header("Tue, 29 Sep 2026 07:30:42 GMT")
    assert clock.has_observation
    assert clock.drift == 42.0
    assert clock.now() == datetime(2026, 9, 29, 7, 30, 42, tzinfo=UTC)
    ft.advance(5.25)
    assert clock.now() == datetime(2026, 9, 29, 7, 30, 47, 250_000, tzinfo=UTC)
    assert clock.now().tzinfo is UTC


def test_instance_behind_local(clock: InstanceClock) -> None:
    clock.observe_date_header("Tue, 29 Sep 2026 07:29:00 GMT")
    assert clock.drift == -60.0
    assert format_ts(clock.now()) == "2026-09-29 07:29:00"


def test_numeric_offset_header_is_converted(clock: InstanceClock) -> None:
    clock.observe_date_header("Tue, 29 Sep 2026 09:30:10 +0200")
    assert clock.drift == 10.0
    clock.observe_date_header("Tue, 29 Sep 2026 07:30:05 -0000")  # parses naive: taken as UTC
    assert clock.drift == 5.0


@pytest.mark.parametrize(
    "garbage",
    ["", "yesterday", "Tue, 32 Sep 2026 07:30:42 GMT", "Tue, 29 Sep 2026 25:30:42 GMT", "0"],
)
def test_unparseable_headers_are_ignored(clock: InstanceClock, garbage: str) -> None:
    clock.observe_date_header(garbage)
    assert not clock.has_observation
    clock.observe_date_header("Tue, 29 Sep 2026 07:30:03 GMT")
    clock.observe_date_header(garbage)
    assert clock.drift == 3.0


def test_smallest_drift_of_the_last_minute_wins(ft: FakeTime, clock: InstanceClock) -> None:
    # Three nodes behind a load balancer, clocks +5, +2, +8 s.
    for drift in (5, 2, 8):
        clock.observe_date_header(ft.header(drift))
        ft.advance(1)
    assert clock.drift == 2.0
    ft.advance(30)
    clock.observe_date_header(ft.header(9))
    # The +2 node stays the minimum until its observation is a minute old...
    ft.advance(DRIFT_WINDOW_SECONDS - 32)
    assert clock.drift == 2.0
    # ...then the smallest of the remaining recent ones takes over.
    ft.advance(0.5)
    assert clock.drift == 8.0
    ft.advance(1)
    assert clock.drift == 9.0


def test_old_observation_kept_when_nothing_newer(ft: FakeTime, clock: InstanceClock) -> None:
    clock.observe_date_header(ft.header(7))
    ft.advance(3600)
    assert clock.has_observation
    assert clock.drift == 7.0
    clock.observe_date_header(ft.header(9))
    assert clock.drift == 9.0  # the fresh one replaces the expired one


def test_newest_of_several_expired_is_kept(ft: FakeTime, clock: InstanceClock) -> None:
    clock.observe_date_header(ft.header(1))
    ft.advance(10)
    clock.observe_date_header(ft.header(4))
    ft.advance(600)
    assert clock.drift == 4.0


def test_window_uses_monotonic_time_not_wall(ft: FakeTime, clock: InstanceClock) -> None:
    clock.observe_date_header(ft.header(2))
    clock.observe_date_header(ft.header(6))
    ft.wall_s += 3600  # the local wall clock steps forward; monotonic time does not move
    assert clock.drift == 2.0
    ft.mono_s += DRIFT_WINDOW_SECONDS + 1
    assert clock.drift == 6.0  # only the newest survives expiry


def test_smaller_newer_drift_replaces_larger(ft: FakeTime, clock: InstanceClock) -> None:
    clock.observe_date_header(ft.header(10))
    ft.advance(1)
    clock.observe_date_header(ft.header(3))
    assert clock.drift == 3.0
    assert len(clock._window) == 1  # the dominated observation is gone: memory stays bounded


def test_memory_bounded_under_many_observations(ft: FakeTime, clock: InstanceClock) -> None:
    for i in range(10_000):
        clock.observe(ft.wall_s + 5 + (i % 7))
        ft.advance(0.5)
    assert len(clock._window) <= 2 * int(DRIFT_WINDOW_SECONDS) + 1
    assert clock.drift == 5.0


def test_sub_second_local_time_biases_early(ft: FakeTime, clock: InstanceClock) -> None:
    # The instance clock equals ours, but we receive the response 0.8 s into the second: the
    # header says the start of that second, so instance time reads up to a second early — safe.
    ft.wall_s += 0.8
    clock.observe_date_header(ft.header(0))
    assert -1.0 < clock.drift <= 0.0  # type: ignore[operator]
    true_now = datetime.fromtimestamp(ft.wall_s, tz=UTC)
    assert clock.now() <= true_now
    assert true_now - clock.now() < timedelta(seconds=1)


def test_hi_from_instance_clock(ft: FakeTime, clock: InstanceClock) -> None:
    clock.observe_date_header(ft.header(-30))
    assert high_water_mark(clock.now(), 2) == "2026-09-29 07:29:28"
