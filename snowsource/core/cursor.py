"""The keyset cursor ``(ts, id)``: timestamps, positions and the page queries (SPEC §5).

Pure functions and one frozen value object, no I/O. This is the only code that builds keyset
queries; the poller asks it where a sweep starts, what to request for the next page and whether
a returned row lies inside the window it asked for.

Timestamps are ServiceNow's stored form, ``YYYY-MM-DD HH:MM:SS`` in UTC. Because the format is
fixed-width and zero-padded, string order equals chronological order, so positions compare as
plain ``(ts, id)`` string tuples — the same order as ``^ORDERBYts^ORDERBYid``. Ids compare by code
point; the instance compares them with its database collation, which agrees for the lowercase hex
sys_ids ServiceNow generates (the poller checks the order of every row it receives anyway).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from snowsource.core.query import split_groups
from snowsource.core.timestamps import TS_FORMAT, format_ts, is_valid_ts, parse_ts

__all__ = [
    "TS_FORMAT",
    "Position",
    "first_sweep_start",
    "format_ts",
    "high_water_mark",
    "in_window",
    "is_valid_ts",
    "next_sweep_start",
    "page_query",
    "parse_ts",
]

_FIELD_NAME = re.compile(r"[A-Za-z0-9_]+")
_EPOCH_FLOOR = datetime(1, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, order=True)
class Position:
    """A cursor position: the row ``(ts, id)`` last read, compared as a string tuple.

    ``id == ""`` means "before the first row of second ``ts``", because ``""`` sorts before every
    real id. ``ts`` must be a valid timestamp (checked at construction).
    """

    ts: str
    id: str

    def __post_init__(self) -> None:
        if not is_valid_ts(self.ts):
            raise ValueError(f"cursor timestamp is not YYYY-MM-DD HH:MM:SS: {self.ts!r}")
        if not isinstance(self.id, str):
            raise TypeError(f"cursor id must be a string, got {type(self.id).__name__}")

    def minus(self, seconds: int) -> Position:
        """``(ts - seconds, "")``; ``seconds == 0`` returns ``self`` unchanged (id kept).

        Clamped at ``0001-01-01 00:00:00``: rewinding past the calendar's start means "read
        everything", which is what that floor reads.
        """
        if seconds < 0:
            raise ValueError(f"cannot rewind by a negative number of seconds: {seconds}")
        if seconds == 0:
            return self
        start = parse_ts(self.ts)
        delta = timedelta(seconds=seconds)
        earlier = _EPOCH_FLOOR if start - _EPOCH_FLOOR <= delta else start - delta
        return Position(format_ts(earlier), "")


def _check_field(kind: str, name: str) -> None:
    if _FIELD_NAME.fullmatch(name) is None:
        raise ValueError(f"{kind} field must match [A-Za-z0-9_]+: {name!r}")


def page_query(normalised_base: str, ts_field: str, id_field: str, after: Position, hi: str) -> str:
    """The ``sysparm_query`` for rows strictly after ``after`` with ``ts <= hi``, in cursor order.

    ``normalised_base`` must already be normalised (``query.normalise_query``) so that a trailing
    ``^EQ`` or an empty query never leaks into the request. Raises ``ValueError`` for a malformed
    ``hi``, field name, or an id containing ``^`` (it cannot be written into an encoded query).
    """
    _check_field("timestamp", ts_field)
    _check_field("id", id_field)
    if not is_valid_ts(hi):
        raise ValueError(f"high-water mark is not YYYY-MM-DD HH:MM:SS: {hi!r}")
    if "^" in after.id:
        raise ValueError(f"cursor id contains '^' and cannot be queried: {after.id!r}")
    t, s = after.ts, after.id
    upper = f"{ts_field}<={hi}"
    if s:
        window = [
            f"{ts_field}>{t}^{upper}",
            f"{ts_field}={t}^{id_field}>{s}^{upper}",
        ]
    else:
        window = [f"{ts_field}>={t}^{upper}"]
    clauses: list[str] = []
    for group in split_groups(normalised_base):
        # ^NQ is a top-level OR of independent AND-groups: a condition written once binds only to
        # the group it sits in. The keyset window is itself an OR (ts > T, or ts = T and id > S),
        # so the only way to say "(base) AND (window)" is to distribute: every base group gets
        # every window clause. Writing the base once would let the other clauses return rows the
        # base filter excludes (pitfall (b)2 in servicenow-table-api.md), and a dependent ^OR
        # instead of ^NQ would bind to the wrong neighbour.
        prefix = f"{group}^" if group else ""
        clauses.extend(prefix + clause for clause in window)
    # ORDERBY goes once, at the very end: the instance applies trailing ORDERBY terms to the whole
    # ^NQ union (the poller still verifies the order of every row it receives).
    return "^NQ".join(clauses) + f"^ORDERBY{ts_field}^ORDERBY{id_field}"


def first_sweep_start(
    committed: Position | None, overlap_seconds: int, start_timestamp: str
) -> Position:
    """Where the first sweep after start-up, resume or internal restart begins (SPEC §5).

    The committed position rewound by ``overlap_seconds`` (exactly the committed position when
    the overlap is 0), or ``(start_timestamp, "")`` when the table has no offset.
    """
    if committed is None:
        return Position(start_timestamp, "")
    return committed.minus(overlap_seconds)


def next_sweep_start(
    prev_start: Position, last_read: Position | None, prev_hi: str, overlap_seconds: int
) -> Position:
    """Where every later sweep begins: the earlier of two positions (SPEC §5).

    (a) after the last row the previous sweep read (its start when it read none) and
    (b) ``(prev_hi - overlap_seconds, "")``. A busy table thus re-reads the overlap window for
    late-visible rows, a quiet one re-reads nothing older, and a page shortened by ACLs never
    lets the cursor jump over rows it did not see.
    """
    continued = last_read if last_read is not None else prev_start
    rewound = Position(prev_hi, "").minus(overlap_seconds)
    return min(continued, rewound)


def high_water_mark(instance_now: datetime, safety_lag_seconds: int) -> str:
    """``HI`` for a sweep: instance time minus the safety lag, truncated to the second."""
    if safety_lag_seconds < 0:
        raise ValueError(f"safety lag must be >= 0: {safety_lag_seconds}")
    return format_ts(instance_now - timedelta(seconds=safety_lag_seconds))


def in_window(pos: Position, after: Position, hi: str) -> bool:
    """Whether a row at ``pos`` is one ``page_query(..., after, hi)`` may return.

    Strictly after ``after`` in cursor order — or, when ``after.id`` is empty, any row of second
    ``after.ts`` or later (the query then says ``ts>=T``) — and ``ts <= hi``.
    """
    if pos.ts > hi:
        return False
    if after.id:
        return pos > after
    return pos.ts >= after.ts
