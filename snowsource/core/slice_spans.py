"""A backfill's span as ranges of whole seconds (SPEC §14.2): equal seconds, or equal rows.

``core.slices`` cuts a sliced backfill's window with these: :func:`split_span` into ranges of
nearly equal seconds, :func:`quantile_spans` into ranges of about as many rows each when the
window's row count and its first page's density are known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from snowsource.core.cursor import Position
from snowsource.core.timestamps import format_ts, parse_ts

__all__ = ["Span", "quantile_spans", "seconds_between", "shift_ts", "split_span"]


def shift_ts(ts: str, seconds: int) -> str:
    """``ts`` moved by a whole number of seconds."""
    return format_ts(parse_ts(ts) + timedelta(seconds=seconds))


def seconds_between(a: str, b: str) -> int:
    """Whole seconds from ``a`` to ``b`` (negative when ``b`` is earlier)."""
    return int((parse_ts(b) - parse_ts(a)).total_seconds())


@dataclass(frozen=True)
class Span:
    """A half-open range ``[start.ts, end)`` of whole seconds, read from ``start`` on.

    ``start.id`` is empty except for a backfill's first range, which resumes inside its first
    second at the committed row.
    """

    start: Position
    end: str

    def __post_init__(self) -> None:
        if seconds_between(self.start.ts, self.end) < 1:
            raise ValueError(f"a range holds at least one second: {self.start.ts} to {self.end}")

    @property
    def hi(self) -> str:
        """The last second of the range (``ts <= hi``): the bound of its count of rows hidden
        by ACLs; its pages ask up to the backfill's ``HI``."""
        return shift_ts(self.end, -1)

    @property
    def seconds(self) -> int:
        """How many seconds the range covers."""
        return seconds_between(self.start.ts, self.end)


def split_span(start: Position, hi: str, pieces: int) -> list[Span]:
    """``[start, hi]`` as at most ``pieces`` adjacent ranges of nearly equal whole seconds.

    Empty when ``hi`` is before ``start``'s second (nothing to read).
    """
    if pieces < 1:
        raise ValueError(f"a backfill is split into at least one range: {pieces}")
    total = seconds_between(start.ts, hi) + 1
    if total < 1:
        return []
    pieces = min(pieces, total)
    spans: list[Span] = []
    first = start
    base, extra = divmod(total, pieces)
    offset = 0
    for index in range(pieces):
        offset += base + (1 if index < extra else 0)
        end = shift_ts(start.ts, offset)
        spans.append(Span(first, end))
        first = Position(end, "")
    return spans


def quantile_spans(
    start: Position, hi: str, pieces: int, rows: int, density: float
) -> list[Span] | None:
    """``pieces`` ranges of about as many rows each, with rows per second growing (or falling)
    linearly from ``density`` at ``start`` so that the window holds ``rows`` (a table's rows
    are seldom spread evenly in time: updates crowd its last days). Ranges of equal rows end
    together, so no slice steals at the end (each split costs about half a request). ``None``
    when no such line fits (its density would fall below zero)."""
    total = seconds_between(start.ts, hi) + 1
    slope = 2 * (rows - density * total) / (total * total)
    if density + slope * total < 0:
        return None
    ends: list[str] = []
    for index in range(1, pieces):
        share = rows * index / pieces  # rows before the cut: density * x + slope * x^2 / 2
        if abs(slope) < 1e-12:
            x = share / density
        else:
            x = (-density + math.sqrt(density * density + 2 * slope * share)) / slope
        end = shift_ts(start.ts, max(1, round(x)))
        if (ends and end <= ends[-1]) or seconds_between(end, hi) < 0:
            return None
        ends.append(end)
    spans: list[Span] = []
    first = start
    for end in [*ends, shift_ts(hi, 1)]:
        spans.append(Span(first, end))
        first = Position(end, "")
    return spans
