"""The emulator's controllable clock: every ``Date`` header, ``sys_*`` stamp and token expiry.

Tests pin it and move it by hand; the CLI lets it follow the wall clock. Following keeps an
offset from the real clock, so ``set``/``advance`` still work while following.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime


class Clock:
    """An aware-UTC clock that tests control (``set``, ``advance``) or that follows real time."""

    def __init__(self, now: datetime | None = None, *, follow_wall_clock: bool = False) -> None:
        start = now if now is not None else datetime.now(UTC)
        if start.tzinfo is None:
            raise ValueError("Clock needs an aware datetime")
        self._fixed = start.astimezone(UTC)
        self._follow = False
        self._offset = 0.0
        self.follow_wall_clock(follow_wall_clock)

    def now(self) -> datetime:
        """The current emulator time (aware, UTC, microsecond resolution)."""
        if self._follow:
            return datetime.fromtimestamp(time.time() + self._offset, UTC)
        return self._fixed

    def timestamp(self) -> float:
        """The current emulator time as Unix epoch seconds."""
        if self._follow:
            return time.time() + self._offset
        return self._fixed.timestamp()

    def set(self, dt: datetime) -> None:
        """Jump to ``dt`` (aware). While following, time keeps running from there."""
        if dt.tzinfo is None:
            raise ValueError("Clock.set needs an aware datetime")
        if self._follow:
            self._offset = dt.timestamp() - time.time()
        else:
            self._fixed = dt.astimezone(UTC)

    def advance(self, seconds: float) -> None:
        """Move the clock forward (or back, with a negative value) by ``seconds``."""
        self.set(self.now() + timedelta(seconds=seconds))

    def follow_wall_clock(self, follow: bool = True) -> None:
        """Let time move with the real clock (True) or freeze it at the current instant."""
        current = self.now()
        self._follow = follow
        if follow:
            self._offset = current.timestamp() - time.time()
        else:
            self._fixed = current

    @property
    def following(self) -> bool:
        """Whether the clock currently moves with the wall clock."""
        return self._follow


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Seeding stamps millions of instants over a few days: the date part is formatted once per day
# and the time of day looked up, three times cheaper than formatting each instant.
_DAYS: dict[int, str] = {}
_TIMES_OF_DAY = tuple(
    f"{h:02d}:{m:02d}:{s:02d}" for h in range(24) for m in range(60) for s in range(60)
)


def stamp(dt: datetime) -> str:
    """A ServiceNow stored date/time: UTC ``YYYY-MM-DD HH:MM:SS``, truncated to the second."""
    try:
        since = dt - _EPOCH  # exact whole days and seconds, whatever the offset
    except TypeError:  # naive: read as local time, like astimezone does
        return dt.astimezone(UTC).isoformat(" ", "seconds")[:19]
    day = _DAYS.get(since.days)
    if day is None:
        day = (_EPOCH + timedelta(days=since.days)).date().isoformat() + " "
        _DAYS[since.days] = day
    return day + _TIMES_OF_DAY[since.seconds]


def parse_stamp(value: str) -> datetime:
    """Parse a stored ``YYYY-MM-DD HH:MM:SS`` UTC value into an aware datetime."""
    return datetime.strptime(value, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def http_date(dt: datetime) -> str:
    """RFC 7231 ``Date`` header value (IMF-fixdate, one-second resolution)."""
    return format_datetime(dt.astimezone(UTC).replace(microsecond=0), usegmt=True)
