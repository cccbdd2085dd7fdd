"""Parallel backfill of one table: ranges of whole seconds, work stealing, the committed prefix.

SPEC §14.2. A backfill reads everything from a start position up to the sweep's high-water mark
``HI``. Here that span is cut into half-open ranges of whole seconds ``[a, b)`` of the timestamp
field, so a second never spans two ranges and a same-second burst is always read by one keyset
pager. Up to N slices each page one range at a time (the §5 query from the range's start; the
engine asks up to the backfill's ``HI`` and the board clips what lies at or past ``b``, so the
first row of the next range ends this one, unless nobody has started the ranges after it: then
this range takes them over and keeps those rows); the first range starts at the resume position,
which may name a row inside its first second.

Pure, no I/O: the engine asks :class:`Backfill` which range a slice reads next, whether it may
fetch a page, and tells it what each page read and what Kafka acknowledged. From that the board
knows at any moment

- the committed offset: the end of the contiguous acknowledged prefix in cursor order, i.e. the
  last acknowledged row of the ranges that are finished and acknowledged from the start on, plus
  the acknowledged part of the first range that is not (never below the committed position the
  backfill resumed from, so the offset never moves back);
- the rows read ahead of that prefix (in ranges after the first one not settled, i.e. not read
  to its end and acknowledged), which
  ``backfill.max.ahead.rows`` bounds: a slice outside the prefix range may fetch a page only if
  the rows ahead plus the pages already reserved plus its own page stay within the limit. The
  prefix range itself is never held back, so the backfill always makes progress.

Work distribution: the span starts as ``slices * RANGES_PER_SLICE`` equal ranges (fewer when it
has fewer seconds) and an idle slice takes the earliest range nobody reads, so the slices work
close to the prefix and it advances in steps of a range. When none is left, or the earliest free
one is beyond reach of the prefix, the range with the most unread pages (from its own density)
is split at its midpoint in time and handed over (work stealing); :meth:`Backfill.take` has the
exact rule (no split leaves a part under two pages, or of a range whose last page was short). A
page that arrives after its range was split may hold rows of the part handed over:
:meth:`Backfill.arrived` clips them (the new owner reads them) and the clipped range is
finished, since its page reached past its new end.

When the window's rows are counted (``X-Total-Count`` of its first page) and the page size is
known, as on the engine's boards, ranges are not cut in time: the window starts as one range,
and an idle slice splits the range with the most rows left at a whole number of its reader's
pages, its part placed by its first page (``core.slice_place``: ``sysparm_offset`` from that
reader's position), so that every range ends on a page and slicing costs almost no request
(SPEC §15.3). Such a split needs no density estimate, so a skewed table splits as evenly as a
uniform one. The rules above hold for both kinds of board; a placed range's start is a guess
until its placing page arrives, and the range before it is not clipped at the guess.

A range is finished only by an empty page or a clipped one, never by a short page: the instance
applies ``sysparm_limit`` before access rules, so a page shortened by ACLs says nothing about the
rows after it (a sweep of one pager re-reads them in its next sweep; a range has no next sweep).
A clipped page does: the rows come in cursor order, so a row past the end means every readable
row before it was in the page. So does a page that ends on the range's last row, as the placing
page of the range after it showed it (the row before that range's first: no row between).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from snowsource.core.cursor import Position
from snowsource.core.slice_cuts import aligned_seconds
from snowsource.core.slice_place import Placements, chunk_pages, clip_end, next_floating
from snowsource.core.slice_range import (
    MIN_PAGES_PER_RANGE,
    SliceRange,
    initial_ranges,
    unread_pages,
    worth_splitting,
)
from snowsource.core.slice_spans import (
    Span,
    seconds_between,
    shift_ts,
    split_span,
)

__all__ = [
    "MIN_PAGES_PER_RANGE",
    "RANGES_PER_SLICE",
    "Backfill",
    "SliceProgress",
    "SliceRange",
    "Span",
    "seconds_between",
    "shift_ts",
    "split_span",
]

#: Initial ranges per slice: small enough that the slices read close to the prefix (so it moves
#: in steps of a range rather than waiting for one slice to read a quarter of the table), large
#: enough that a range is many pages.
RANGES_PER_SLICE = 4


#: Pages the reader before a placed range reads, at least, before the placed range starts.
PLACING_PAGES = 3

#: Unread pages a range must hold to be split for an idle slice, when the page size is known.
MIN_SPLIT_PAGES = 4


@dataclass(frozen=True)
class SliceProgress:
    """The slices' combined progress, for ``/status`` and the gauges."""

    slices_active: int
    ranges: int
    rows_read: int
    rows_ahead: int
    covered: float  # share of the backfill's seconds read so far, 0..1
    hi: str


class Backfill:
    """The ranges of one sliced backfill and the rules between them."""

    def __init__(
        self,
        start: Position,
        hi: str,
        *,
        slices: int,
        max_ahead: int,
        committed: Position | None = None,
        ranges_per_slice: int = RANGES_PER_SLICE,
        expected_rows: int | None = None,
        page_rows: int | None = None,
        first_page_seconds: int | None = None,
    ) -> None:
        if slices < 1:
            raise ValueError(f"a backfill has at least one slice: {slices}")
        if max_ahead < 0:
            raise ValueError(f"rows ahead cannot be limited below 0: {max_ahead}")
        self.slices = slices
        self.max_ahead = max_ahead
        self.hi = hi
        self._base = committed
        #: Rows the window matched when its first page was read (``X-Total-Count``), if known.
        self.expected_rows = expected_rows
        self._page_size = page_rows
        # Known page size (the engine's boards): a split must save more than it costs.
        self._split_pages = 2 if page_rows is None else MIN_SPLIT_PAGES
        #: Counted: the window's rows and the page size are known, so ranges are placed by
        #: their first pages (``core.slice_place``): the window starts as one range, and an
        #: idle slice splits the range with the most rows left at a whole number of its
        #: reader's pages. Otherwise ranges are cut in time.
        self.counted = expected_rows is not None and bool(page_rows)
        self._placements: Placements | None = None
        if self.counted:
            assert expected_rows is not None
            assert page_rows
            self.ranges = [SliceRange(span.start, span.end) for span in split_span(start, hi, 1)]
            for first in self.ranges:
                first.left = expected_rows
            chunk = chunk_pages(expected_rows, page_rows, slices, max_ahead)
            self._placements = Placements(self.ranges, page_rows, chunk, slices=slices)
        else:
            self.ranges = initial_ranges(
                start,
                hi,
                slices=slices,
                max_ahead=max_ahead,
                pieces=slices * ranges_per_slice,
                expected_rows=expected_rows,
                page_rows=page_rows,
                first_page_seconds=first_page_seconds,
            )
        #: Slices that read at all: no more than the ranges the count made worth their
        #: requests (an extra slice would only split them again).
        self.readers = (
            slices if expected_rows is None or self.counted else min(slices, len(self.ranges))
        )
        self.total_seconds = sum(seconds_between(r.start.ts, r.end) for r in self.ranges)
        self._page_rows: int | None = None  # rows of the last full page any range read

    # ------------------------------------------------------------------ progress

    def all_read(self) -> bool:
        """Every range read to its end (acknowledged or not): nothing is left to take."""
        return all(r.finished for r in self.ranges)

    def done(self) -> bool:
        """Every range read to its end and acknowledged: the stream phase may start."""
        return all(r.settled for r in self.ranges)

    def prefix(self) -> Position | None:
        """The end of the contiguous acknowledged prefix: what the committed offset says."""
        best = self._base
        for r in self.ranges:
            if r.acked_to is not None and (best is None or r.acked_to > best):
                best = r.acked_to
            if not r.settled:
                break
        return best

    def _prefix_index(self) -> int:
        """Index of the first range not settled (``len(ranges)`` when all are)."""
        for index, r in enumerate(self.ranges):
            if not r.settled:
                return index
        return len(self.ranges)

    def ahead(self) -> int:
        """Rows read past the prefix range, not yet part of the committed prefix."""
        return sum(r.rows for r in self.ranges[self._prefix_index() + 1 :])

    def _claimed_ahead(self) -> int:
        return sum(r.rows + r.reserved for r in self.ranges[self._prefix_index() + 1 :])

    def active(self) -> int:
        """Ranges a slice is reading now."""
        return sum(1 for r in self.ranges if r.reader is not None and not r.finished)

    def rows_read(self) -> int:
        """Rows returned by every page so far."""
        return sum(r.rows for r in self.ranges)

    def covered_seconds(self) -> int:
        """Seconds of the span read so far, for progress bars (a finished range counts whole)."""
        covered = 0
        for r in self.ranges:
            if r.finished:
                covered += seconds_between(r.start.ts, r.end)
            elif r.read_to is not None:
                covered += seconds_between(r.start.ts, min(r.read_to.ts, r.end))
        return covered

    def progress(self) -> SliceProgress:
        """A snapshot of the combined progress."""
        total = self.total_seconds
        return SliceProgress(
            slices_active=self.active(),
            ranges=len(self.ranges),
            rows_read=self.rows_read(),
            rows_ahead=self.ahead(),
            covered=round(self.covered_seconds() / total, 4) if total else 1.0,
            hi=self.hi,
        )

    # ------------------------------------------------------------------ work

    def take(self, reader: int) -> SliceRange | None:
        """The range an idle slice reads next; ``None`` when nothing is left to hand over.

        The earliest range nobody reads, else the later half of the largest unread part of a
        range being read (its reader keeps the earlier half and the second it stands in). Also
        when the earliest free range lies more than ``max_ahead`` rows (estimated) beyond the
        prefix, the largest part before it is split instead: reading there would only spend
        the max-ahead allowance the ranges next to the prefix need (a skewed table's dense
        last range, taken early, held every other slice at the limit).
        "Largest" counts pages, not seconds: a range's density is what its last full page
        spanned (a skewed table's dense month outweighs a sparse year), and a part expected to
        hold fewer than two pages is not split — its reader gets there sooner than a new
        request would (each range ends with one page of its own).
        """
        if self.expected_rows is not None and reader >= self.readers:
            return None  # a slice the window's count leaves idle
        if self._placements is not None:
            return self._placements.take(reader)
        seconds_a_page = self._seconds_a_page()
        free = next((r for r in self.ranges if r.reader is None and not r.finished), None)
        candidates = [r for r in self.ranges if self._splittable(r, seconds_a_page)]
        if free is not None:
            # A free range further from the prefix than max_ahead rows would only fill the
            # max-ahead allowance and wait: help the ranges before it instead.
            before = self.ranges.index(free)
            candidates = [r for r in candidates if self.ranges.index(r) < before]
            if not candidates or not self._beyond_reach(before, seconds_a_page):
                self._align(free)
                free.reader = reader
                return free
        victim = max(candidates, key=lambda r: unread_pages(r, seconds_a_page), default=None)
        if victim is None:
            return None
        middle = shift_ts(victim.after.ts, self._split_seconds(victim))
        stolen = SliceRange(Position(middle, ""), victim.end)
        stolen.cut_page_seconds = victim.seconds_a_page(self._page_size)
        stolen.reader = reader
        victim.end = middle
        self.ranges.insert(self.ranges.index(victim) + 1, stolen)
        return stolen

    # ------------------------------------------------------------------ placing (slice_place)

    def ask(self, r: SliceRange) -> tuple[Position, int]:
        """Where ``r``'s next page is asked: after which position, skipping how many rows
        (a placing page, ``core.slice_place``)."""
        return (r.anchor, r.skip) if r.anchor is not None else (r.after, 0)

    def place(self, r: SliceRange, keys: Sequence[tuple[str, str]]) -> int:
        """``r``'s placing page arrived with rows at ``keys``: how many of its first rows are
        the ranges' before it (``core.slice_place.Placements.place``)."""
        if self._placements is None:
            raise ValueError(f"{r!r} is not being placed: this board cuts its ranges in time")
        return self._placements.place(r, keys)

    def page_rows_now(self, page_rows: int) -> None:
        """The page size from now on (halved when the instance runs out of time): where
        placed ranges are placed. Unknown sizes stay unknown (a board without a count)."""
        if self._page_size is not None:
            self._page_size = page_rows
        if self._placements is not None:
            self._placements.page_rows = page_rows

    def _split_seconds(self, victim: SliceRange) -> int:
        """Where ``victim`` is split, in seconds after where its next page starts: at its
        midpoint; when its density is known, a little before the end of its reader's page
        nearest the midpoint (``core.slice_cuts``: a split at a page's end costs no request,
        one in a page's middle about half a request)."""
        unread = victim.unread_seconds()
        known = self._page_size is not None and victim.page_seconds is not None
        spans = victim.seconds_a_page(self._page_size) if known else None
        aligned = None if spans is None else aligned_seconds(unread // 2, unread - 1, spans)
        return aligned or unread // 2

    def _align(self, free: SliceRange) -> None:
        """Before ``free`` is handed out, move its start to where the reader of the range
        before it is expected to end a page (``core.slice_cuts``): that range's last page is
        then nearly all its own. Only an untouched range moves, and only while the range
        before it is still being read."""
        index = self.ranges.index(free)
        if index == 0 or self._page_size is None or not free.untouched() or free.start.id:
            return
        before = self.ranges[index - 1]
        if before.finished or before.short or before.end != free.start.ts:
            return
        spans = before.seconds_a_page(self._page_size)
        if spans is None:
            return
        after = before.after.ts
        unread = seconds_between(after, free.start.ts)
        cut = aligned_seconds(unread, seconds_between(after, free.end) - 1, spans)
        if cut is not None:
            before.end = shift_ts(after, cut)
            free.start = Position(before.end, "")

    def should_leave(self, r: SliceRange) -> bool:
        """Whether ``r``'s reader should stop reading it for now and help nearer the prefix.

        True when ``r`` lies beyond reach (the rows read ahead of the prefix plus those
        expected unread before ``r`` exceed ``max_ahead``) and a range before ``r`` can be
        split: reading on would spend the allowance the ranges next to the prefix need (a
        skewed table's dense week, found only once its first page arrived, was otherwise read
        by one slice while the others sat at the limit). Its reader fetches no more pages of
        ``r`` and leaves it (:meth:`leave`) once its last page there is acknowledged.
        """
        if self.counted or r.finished or r.floating or self.holds_prefix(r):
            return False
        index = self.ranges.index(r)
        seconds_a_page = self._seconds_a_page()
        if not self._beyond_reach(index, seconds_a_page):
            return False
        before = self.ranges[self._prefix_index() : index]
        return any(self._splittable(x, seconds_a_page) for x in before)

    def _splittable(self, r: SliceRange, seconds_a_page: float) -> bool:
        """Whether ``r`` may be split for an idle slice now: worth it, and its end is known
        (neither it nor the range after it is still being placed)."""
        if r.floating or next_floating(self.ranges, r):
            return False
        return worth_splitting(r, seconds_a_page, self._split_pages)

    def leave(self, r: SliceRange) -> None:
        """``r``'s reader stops reading it: it is free again, from where its pages ended, for
        whichever slice gets there (:meth:`take`). Only with no page of ``r`` in flight or
        unacknowledged: the next reader's pages must be acknowledged after those, or the
        prefix could pass a row Kafka has not acknowledged."""
        if r.reserved or r.pending:
            raise ValueError(f"a page of {r!r} is still in flight or unacknowledged")
        r.reader = None

    def _beyond_reach(self, index: int, seconds_a_page: float) -> bool:
        """Whether range ``index``'s rows could not join the prefix within the allowance: the
        rows already read (or being fetched) ahead of the prefix plus those expected unread
        between the prefix and the range exceed ``max_ahead`` (unknown until a full page told
        the page size)."""
        if self._page_rows is None:
            return False
        pages = sum(
            unread_pages(r, seconds_a_page)
            for r in self.ranges[self._prefix_index() : index]
            if not r.finished
        )
        return self._claimed_ahead() + pages * self._page_rows > self.max_ahead

    def _seconds_a_page(self) -> float:
        """Seconds a full page spans on average so far (for ranges without a full page yet);
        1 before any: then ranges compare by unread seconds."""
        known = [r.page_seconds for r in self.ranges if r.page_seconds is not None]
        return max(1.0, sum(known) / len(known)) if known else 1.0

    def may_fetch(self, r: SliceRange, limit: int) -> bool:
        """Whether ``r``'s reader may ask for a page of up to ``limit`` rows now.

        The prefix range always may; any other only while the rows ahead of the prefix, the
        pages reserved ahead of it and this page stay within ``max_ahead``.
        """
        if self.holds_prefix(r):
            # Never held back, not even by a placing page after it that the allowance holds:
            # it reads on past its planned end, and that page places its range after it.
            return True
        if r.left is not None and r.left <= 0 and next_floating(self.ranges, r):
            return False  # it ends where the range after it is being placed: that page first
        return self._claimed_ahead() + limit <= self.max_ahead

    def pending(self) -> bool:
        """Whether a page read awaits its acks."""
        return any(r.pending for r in self.ranges)

    def settled_before(self, r: SliceRange) -> bool:
        """Whether every range before ``r`` is read to its end and acknowledged."""
        return all(x.settled for x in self.ranges[: self.ranges.index(r)])

    def holds_prefix(self, r: SliceRange) -> bool:
        """Whether ``r`` is the first range not settled: the one the prefix waits for."""
        index = self._prefix_index()
        return index < len(self.ranges) and self.ranges[index] is r

    def reserve(self, r: SliceRange, limit: int) -> None:
        """A page of up to ``limit`` rows is being fetched for ``r``."""
        r.reserved += limit

    def cancelled(self, r: SliceRange, limit: int) -> None:
        """A fetch reserved with ``limit`` returned nothing usable (stopped, failed)."""
        r.reserved = max(0, r.reserved - limit)

    def arrived(self, r: SliceRange, keys: Sequence[tuple[str, str]], limit: int) -> int:
        """A page for ``r`` arrived with rows at ``keys`` (in cursor order); how many to keep.

        Rows at or past the range's end belong to the next range. When nobody has started
        that one, ``r`` takes it over (one reader paging on costs no request, where a new
        range's first page would); otherwise they are the next reader's: they are dropped and
        ``r`` is finished. An empty page finishes it too.
        """
        r.reserved = max(0, r.reserved - limit)
        if r.floating:
            raise ValueError(f"{r!r} is being placed: its page is placed first")
        if keys and keys[-1][0] >= r.end:
            self._absorb(r, keys[-1][0])
        end = clip_end(self.ranges, r)
        keep = len(keys)
        while keep and keys[keep - 1][0] >= end:
            keep -= 1
        ends = r.last is not None and keep > 0 and Position(*keys[keep - 1]) == r.last
        if keep < len(keys) or not keys or ends or self._ends_window(r, keep, limit):
            r.finished = True
        elif len(keys) >= limit:
            # A page inside one second (a burst) says little about the seconds after it: count
            # it as one, or one burst would make its range look endless (every other range
            # beyond reach, the range split down to single seconds).
            r.page_seconds = max(1, seconds_between(r.after.ts, keys[-1][0]))
            self._page_rows = limit
        else:
            # Short and not clipped: probably little is left, so it is not worth splitting; the
            # range goes on all the same (ACLs may have shortened the page, see above).
            r.page_seconds = None
            r.short = True
        if keep:
            r.rows += keep
            r.read_to = Position(*keys[keep - 1])
            r.pending += 1
        if r.left is not None:
            r.left = max(0, r.left - keep)
        return keep

    def _ends_window(self, r: SliceRange, keep: int, limit: int) -> bool:
        """Whether a page of ``r`` that is neither clipped nor empty ends it all the same:
        ``r`` is the window's last range (nothing after it to clip at) and the page was short,
        or every row the window's count announced is read (only on boards that know the count:
        the engine's, whose sweep after the backfill continues as said). Safe although ACLs may have
        shortened the page: the sweep after the backfill continues from the last row read
        (``next_sweep_start``), which is this range's, as one pager's next sweep does after a
        short page; no empty request of its own then."""
        expected = self.expected_rows
        if expected is None or r is not self.ranges[-1]:
            return False  # without the window's count: only clipped or empty pages end ranges
        if self.counted:
            # The last range is most of the window until it is split: a page shortened by
            # ACLs would leave nearly all of it to the sweep after the backfill. Its rows left
            # are counted (before ACLs): it ends when they are read, while other ranges are
            # still being read.
            return (r.left is not None and r.left <= keep) or self.rows_read() + keep >= expected
        return keep < limit or self.rows_read() + keep >= expected

    def _absorb(self, r: SliceRange, upto: str) -> None:
        """Extend ``r`` over the untouched ranges after it, as far as second ``upto``."""
        index = self.ranges.index(r)
        while r.end <= upto and index + 1 < len(self.ranges):
            after = self.ranges[index + 1]
            untouched = after.reader is None and not after.finished and after.rows == 0
            if not (untouched and after.reserved == 0 and after.start == Position(r.end, "")):
                return
            r.end = after.end
            del self.ranges[index + 1]

    def acked(self, r: SliceRange, last_emitted: Position | None) -> None:
        """The records of ``r``'s oldest unacknowledged page are acknowledged.

        ``last_emitted`` is the position of its last emitted row (``None`` when every row was
        suppressed as already in Kafka): the prefix moves to it once the ranges before allow.
        """
        if r.pending < 1:
            raise ValueError(f"no page of {r!r} awaits an acknowledgement")
        r.pending -= 1
        if r.broken:
            return  # a later page of a range whose earlier page Kafka refused in part
        if last_emitted is not None and (r.acked_to is None or last_emitted > r.acked_to):
            r.acked_to = last_emitted

    def partly_acked(self, r: SliceRange, last_emitted: Position | None) -> None:
        """Only the records of ``r``'s oldest unacknowledged page up to ``last_emitted`` (none
        when ``None``) are acknowledged, and the rest never will be (the table restarts or
        FAILs): the prefix may reach ``last_emitted`` but never passes the page: ``r`` is
        broken and never settles, and no later ack of ``r`` moves it."""
        if r.pending < 1:
            raise ValueError(f"no page of {r!r} awaits an acknowledgement")
        if (
            not r.broken
            and last_emitted is not None
            and (r.acked_to is None or last_emitted > r.acked_to)
        ):
            r.acked_to = last_emitted
        r.pending -= 1
        r.broken = True

    def prefix_free(self) -> bool:
        """Whether nobody reads the range that holds the prefix back (one left earlier, now
        first): only a slice that takes it lets the prefix move again."""
        index = self._prefix_index()
        if index == len(self.ranges):
            return False
        first = self.ranges[index]
        return first.reader is None and not first.finished

    def prefix_if_acked(self, r: SliceRange, last_emitted: Position | None) -> Position | None:
        """The prefix once ``r``'s oldest pending page is acknowledged (for a transaction that
        commits that page and its offset together)."""
        saved = (r.pending, r.acked_to)
        self.acked(r, last_emitted)
        try:
            return self.prefix()
        finally:
            r.pending, r.acked_to = saved

    def last_read(self) -> Position | None:
        """The furthest row any page returned: where a following sweep continues."""
        return max((r.read_to for r in self.ranges if r.read_to is not None), default=None)
