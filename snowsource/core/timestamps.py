"""ServiceNow's stored timestamp form, ``YYYY-MM-DD HH:MM:SS`` in UTC: the one rule.

Cursor, offsets, configuration (``start.timestamp``) and ``snowsource check`` all ask this
module whether a value is such a timestamp, so they can never disagree about one. Pure.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

TS_FORMAT = "%Y-%m-%d %H:%M:%S"

# Strict shape check before parsing: ``strptime``/``fromisoformat`` alone accept forms the
# instance never sends and that would not sort as strings (single-digit fields, ``T``, fractions,
# offsets, non-ASCII digits).
_TS_SHAPE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}")


def parse_ts(s: str) -> datetime:
    """Parse ``YYYY-MM-DD HH:MM:SS`` (UTC) into an aware UTC datetime; ``ValueError`` otherwise."""
    if not isinstance(s, str) or _TS_SHAPE.fullmatch(s) is None:
        raise ValueError(f"not a YYYY-MM-DD HH:MM:SS timestamp: {s!r}")
    try:
        parsed = datetime.fromisoformat(s)
    except ValueError as exc:  # shape is right but the calendar is not (2026-02-30, 24:00:00)
        raise ValueError(f"not a valid timestamp: {s!r}") from exc
    return parsed.replace(tzinfo=UTC)


def format_ts(dt: datetime) -> str:
    """Format an aware datetime as a UTC ``YYYY-MM-DD HH:MM:SS`` literal, truncated to the second.

    Naive datetimes are refused: guessing their zone is how cursors drift by a UTC offset.
    """
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"naive datetime refused (cursor times are UTC): {dt!r}")
    u = dt.astimezone(UTC)
    # Formatted by hand: strftime("%Y") does not zero-pad years below 1000 on every platform.
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d} {u.hour:02d}:{u.minute:02d}:{u.second:02d}"


def is_valid_ts(s: str) -> bool:
    """True when ``s`` is exactly a valid ``YYYY-MM-DD HH:MM:SS`` timestamp."""
    try:
        parse_ts(s)
    except ValueError:
        return False
    return True
