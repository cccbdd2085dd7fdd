"""One range of a sliced backfill and what its reader did with it (SPEC §14.2).

``core.slices.Backfill`` holds these and the rules between them; this module has what a range
knows about itself: where its next page starts, how many seconds a page of it spans, whether
it is worth splitting.
"""

from __future__ import annotations

from snowsource.core.cursor import Position
from snowsource.core.slice_cuts import seconds_a_page_read
from snowsource.core.slice_spans import quantile_spans, seconds_between, shift_ts, split_span

__all__ = [
    "MIN_PAGES_PER_RANGE",
    "SliceRange",
    "initial_ranges",
    "unread_pages",
    "worth_splitting",
]

#: Pages a range is cut to hold at least, when the backfill's row count is known: every range
#: ends with a page that is partly the next range's (or an empty one), so a range of a few pages
#: costs a share of a request each (SPEC §15.3: at most 1.05 requests per page of rows).
MIN_PAGES_PER_RANGE = 10


class SliceRange:
    """One range of a backfill and what its reader did with it (mutated by :class:`Backfill`)."""

    __slots__ = (
        "acked_to",
        "anchor",
        "broken",
        "cut_page_seconds",
        "end",
        "finished",
        "last",
        "left",
        "page_seconds",
        "pending",
        "read_to",
        "reader",
        "reserved",
        "rows",
        "short",
        "skip",
        "start",
    )

    def __init__(self, start: Position, end: str) -> None:
        self.start = start
        self.end = end
        self.reader: int | None = None  # the slice reading it
        self.read_to: Position | None = None  # the last row its pages returned (and kept)
        self.acked_to: Position | None = None  # the last emitted row Kafka acknowledged
        self.rows = 0  # rows its pages returned (and kept)
        self.reserved = 0  # rows a page in flight may return
        self.pending = 0  # pages read whose records are not acknowledged yet
        self.finished = False  # no more pages: every row of the range was returned
        self.page_seconds: int | None = None  # seconds its last full page spanned (density)
        self.short = False  # its last page was short: little or nothing is left to read
        self.broken = False  # a page was acknowledged only in part: the prefix never passes it
        #: Seconds a page spans by the density the range was cut with (before it read any).
        self.cut_page_seconds: float | None = None
        # A range placed by its first page (``core.slice_place``): that page is asked ``skip``
        # rows after ``anchor``, and ``start`` is a guess until it arrives.
        self.anchor: Position | None = None
        self.skip = 0
        #: Rows left between where its next page starts and its end, when counted (a board
        #: that knows the window's rows): where it is split. Rows that left the window since
        #: make it high, never low enough to lose one (ranges end by clips, not by counts).
        self.left: int | None = None
        #: Its last row, as the placing page of the range after it showed (``core.slice_place``).
        self.last: Position | None = None

    @property
    def floating(self) -> bool:
        """Its start is not known yet: its placing page is still to arrive."""
        return self.anchor is not None

    @property
    def settled(self) -> bool:
        """Read to its end and every record acknowledged."""
        return self.finished and self.pending == 0 and not self.broken

    @property
    def after(self) -> Position:
        """Where its next page starts."""
        return self.read_to if self.read_to is not None else self.start

    @property
    def hi(self) -> str:
        """The last second of the range: the bound of its count of rows hidden by ACLs (its
        pages ask up to the backfill's ``HI``)."""
        return shift_ts(self.end, -1)

    def seconds_a_page(self, page_rows: int | None) -> float | None:
        """Seconds a page of this range spans: from what its reader read so far, else from its
        last full page, else from the density it was cut with."""
        if page_rows is not None:
            measured = seconds_a_page_read(self.start, self.read_to, self.rows, page_rows)
            if measured is not None:
                return measured
        if self.page_seconds is not None:
            return float(self.page_seconds)
        return self.cut_page_seconds

    def empty(self) -> bool:
        """It holds no second: its placing page found it empty (``core.slice_place``)."""
        return self.finished and self.start.ts >= self.end

    def untouched(self) -> bool:
        """Nobody reads it, nor ever read any of it."""
        return (
            self.reader is None
            and not self.finished
            and self.rows == 0
            and self.reserved == 0
            and self.read_to is None
        )

    def unread_seconds(self) -> int:
        """Seconds not read yet, counting the second its reader stands in."""
        return max(0, seconds_between(self.after.ts, self.end))

    def __repr__(self) -> str:
        return (
            f"SliceRange({self.start.ts}/{self.start.id or '-'}..{self.end} reader={self.reader}"
            f" rows={self.rows} finished={self.finished} pending={self.pending})"
        )


def unread_pages(r: SliceRange, seconds_a_page: float) -> float:
    """Pages ``r``'s unread part is expected to hold (from its own density when known)."""
    spans = seconds_a_page if r.page_seconds is None else r.page_seconds
    return r.unread_seconds() / spans if spans > 0 else float("inf")


def worth_splitting(r: SliceRange, seconds_a_page: float, least: float = 2) -> bool:
    """Whether handing over half of ``r``'s unread part saves a slice any time: it holds at
    least ``least`` pages (a split costs about half a request: each range ends with a page
    that is partly the next one's)."""
    if r.finished or r.short or r.unread_seconds() < 2:
        return False
    return unread_pages(r, seconds_a_page) >= least


def initial_ranges(
    start: Position,
    hi: str,
    *,
    slices: int,
    max_ahead: int,
    pieces: int,
    expected_rows: int | None,
    page_rows: int | None,
    first_page_seconds: int | None,
) -> list[SliceRange]:
    """The initial ranges: ``pieces`` of equal seconds; when the window's row count is
    known, of about equal rows, each with the density it was cut with, and as few as
    serve the slices: every range costs about half a request (its last page is short), so
    no more than one per ``MIN_PAGES_PER_RANGE`` pages, nor more than the max-ahead
    allowance needs (the ``slices - 1`` ranges read beside the prefix range fit in it; the
    prefix range's own rows are never ahead), but one per slice at least."""
    spans = split_span(start, hi, pieces)
    if expected_rows is None or not page_rows:
        return [SliceRange(span.start, span.end) for span in spans]
    worth = int(expected_rows // (page_rows * MIN_PAGES_PER_RANGE))
    fits = -(-expected_rows * (slices - 1) // max(1, max_ahead))
    pieces = max(1, min(pieces, worth, max(fits, slices)))
    spans = split_span(start, hi, pieces)
    quantiles = None
    if first_page_seconds is not None and pieces > 1:
        density = page_rows / max(1, first_page_seconds)
        quantiles = quantile_spans(start, hi, pieces, expected_rows, density)
    ranges = [SliceRange(span.start, span.end) for span in quantiles or spans]
    total = sum(seconds_between(r.start.ts, r.end) for r in ranges)
    for r in ranges:
        seconds = seconds_between(r.start.ts, r.end)
        # Quantile ranges hold about equal rows; equal-second ones the window's average.
        rows = expected_rows / len(ranges) if quantiles else expected_rows * seconds / total
        r.cut_page_seconds = seconds * page_rows / rows if rows > 0 else None
    if first_page_seconds is not None:
        ranges[0].cut_page_seconds = float(max(1, first_page_seconds))
    return ranges
