"""Display formatting of date/time values in a user's time zone and Java-style date format.

Pure code. ServiceNow stores date/times in UTC and shows them (``sysparm_display_value``) in the
caller's time zone using the user's ``date_format`` and ``time_format`` preferences, which are
Java ``SimpleDateFormat`` patterns such as ``MM/dd/yyyy`` and ``hh:mm:ss a``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_TOKEN = re.compile(r"'[^']*'|([A-Za-z])\1*")

Part = Callable[[datetime], str]


def _hour12(dt: datetime) -> int:
    return dt.hour % 12 or 12


def _letter(run: str) -> Part:
    """A formatter for one run of a pattern letter (``yyyy``, ``MM``, ``a`` ...)."""
    letter, width = run[0], len(run)
    if letter == "y":
        return (lambda dt: f"{dt.year % 100:02d}") if width == 2 else (lambda dt: f"{dt.year:04d}")
    if letter == "M":
        if width >= 4:
            return lambda dt: _MONTHS[dt.month - 1]
        if width == 3:
            return lambda dt: _MONTHS[dt.month - 1][:3]
    if letter == "E":
        return (
            (lambda dt: _DAYS[dt.weekday()]) if width >= 4 else (lambda dt: _DAYS[dt.weekday()][:3])
        )
    if letter == "a":
        return lambda dt: "AM" if dt.hour < 12 else "PM"
    getters: dict[str, Callable[[datetime], int]] = {
        "M": lambda dt: dt.month,
        "d": lambda dt: dt.day,
        "H": lambda dt: dt.hour,
        "h": _hour12,
        "m": lambda dt: dt.minute,
        "s": lambda dt: dt.second,
    }
    getter = getters.get(letter)
    if getter is None:
        return lambda _dt: run
    return lambda dt: str(getter(dt)).zfill(width)


def _literal(text: str) -> Part:
    return lambda _dt: text


@functools.lru_cache(maxsize=64)
def compile_pattern(pattern: str) -> Callable[[datetime], str]:
    """Compile a Java ``SimpleDateFormat`` pattern (common letters only) into a formatter."""
    parts: list[Part] = []
    pos = 0
    for match in _TOKEN.finditer(pattern):
        if match.start() > pos:
            parts.append(_literal(pattern[pos : match.start()]))
        token = match.group(0)
        if token.startswith("'"):
            parts.append(_literal(token[1:-1] or "'"))
        else:
            parts.append(_letter(token))
        pos = match.end()
    if pos < len(pattern):
        parts.append(_literal(pattern[pos:]))
    return lambda dt: "".join(part(dt) for part in parts)


def display_datetime(stored: str, tz: ZoneInfo, date_format: str, time_format: str) -> str:
    """The display value of a stored UTC ``YYYY-MM-DD HH:MM:SS`` for a user; ``""`` stays ``""``."""
    if not stored:
        return ""
    try:
        utc = datetime.strptime(stored, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return stored
    local = utc.astimezone(tz)
    return compile_pattern(f"{date_format} {time_format}".strip())(local)
