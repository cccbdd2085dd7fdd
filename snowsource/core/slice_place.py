"""Ranges placed by their first page, so that a range boundary costs no request (SPEC §15.3).

Each range of a sliced backfill is paged on its own, so the page that reaches its end is partly
the next range's: about half a request lost per boundary when the boundary is cut in time
(``core.slice_cuts`` narrows that by guessing where the reader before it ends a page). With
``backfill.max.ahead.rows`` keeping the ranges near the prefix small, a backfill of 8 slices has
some 40 boundaries: that half request each is what kept it above 1.05 requests per page.

A range split off a range being read is *placed* instead: its first page is the keyset query
of the reader before it (same position, same bound) with ``sysparm_offset`` set so that the
page starts with the *witness*, the last row of that reader's ``k``-th page (or the row before
it, :func:`witness_short`). The reader pages on from the same position, ``page_rows`` at a
time, so its ``k``-th page ends on the witness, its last row (or on the placed range's first
row, clipped): the range before ends with no request of its own. The witness is the row just
before the placed range's first kept row, so when its second is earlier, no row of the kept
row's second comes before it, and the boundary stays a whole second (SPEC §14.2).

Nothing here is needed for correctness, only for the count: a guess that lands wrong (rows
changed meanwhile, a page shortened by ACLs, a page size halved) costs a request, never a row.
The rules that keep every row (``start_in_page``): the placed range starts at a second later
than every row a range before it has read, and later than its witness; the rows before that
second are the range before it's, which reads up to the boundary as it reads up to any other;
and when the page holds no such second before the range's end, the range is empty and its
seconds go to the range before it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from snowsource.core.cursor import Position
from snowsource.core.slice_range import SliceRange
from snowsource.core.slice_spans import shift_ts

__all__ = [
    "MIN_PLACED_PAGES",
    "WITNESS",
    "Placements",
    "chunk_pages",
    "clip_end",
    "next_floating",
    "placing_skip",
    "split_pages",
    "start_in_page",
    "witness_short",
]

#: Rows of a placing page before the placed range's first kept row: the witness just before it.
WITNESS = 1

#: Pages a split leaves its reader at least: the page it has in flight may arrive before the
#: placing page (then it passes the placed start, and a request is lost), the next one rarely.
MIN_PLACED_PAGES = 2


def chunk_pages(expected_rows: int, page_rows: int, slices: int, max_ahead: int) -> int:
    """Pages the last range's reader keeps when an idle slice takes the rest: as many as let
    the slices beside the prefix's reader read within ``max_ahead`` with a page each in flight
    (a chunk further would only wait for the allowance), no more than an even share of the
    window, and at least ``MIN_PLACED_PAGES``."""
    # One page less than the allowance admits: each of those slices also holds a page in flight
    # (reserved), and a chunk that fills the allowance to the row stalls them all at its end.
    allowance = max_ahead // (page_rows * max(1, slices - 1)) - 1
    share = -(-expected_rows // (page_rows * slices))
    return max(MIN_PLACED_PAGES, min(allowance, share))


def split_pages(left: int, page_rows: int, chunk: int | None) -> int | None:
    """Pages a range with ``left`` rows left keeps when it hands over the rest: ``chunk`` (the
    last range), or half; ``None`` when it is too small to split (each part a page at least,
    the reader's ``MIN_PLACED_PAGES``)."""
    pages = left // page_rows
    if chunk is not None and pages >= chunk + MIN_PLACED_PAGES:
        return chunk
    keep = pages // 2
    return keep if keep >= MIN_PLACED_PAGES and pages - keep >= 1 else None


def placing_skip(grid_skip: int, pages: int, page_rows: int, *, short: int = 0) -> int:
    """``sysparm_offset`` of a placing page, counted from the anchor of the reader before it.

    That reader's pages end ``grid_skip + j * page_rows`` rows after the anchor (``grid_skip``
    is 0 for a reader paging on from where it read, its own skip while it is itself being
    placed). The witness is the last row of its ``pages``-th page (that page then ends the
    reader's range exactly), or with ``short=1`` the row before it (that page then ends with
    the placed range's first row, clipped): :func:`witness_short` says which.
    """
    if pages < 1 or page_rows < 1:
        raise ValueError(f"a placing page lies at least one page on: {pages} x {page_rows}")
    return grid_skip + pages * page_rows - WITNESS - short


def witness_short(left: int, page_rows: int, *, last: bool) -> int | None:
    """Rows the witness of a split lies before the end of its reader's page (0 or 1), so that
    both parts end on a page; ``None`` when no split does.

    ``left``: the reader's rows up to and including its last row (the witness of the range
    after it). The reader's part ends on its own pages either way: its last row ends a page (0),
    or the page after the witness reaches the placed range's first row (1, clipped). The part
    handed over pages on from its placing page, one row after the witness, and must end a page
    on its last row or the row after it: only when ``left`` lies one to three rows short of
    whole pages. The last range ends by the window's count, not on a page: its split leaves
    the reader's part one row short of whole pages (1), so that part can be split once more
    (each split costs a request otherwise: a row more than whole pages is a page more).
    """
    if last:
        return 1
    short = left % page_rows
    if short == 0:
        return None  # whole pages: any split reads a row more than them, so a page more
    if short == page_rows - 1:
        return 0
    if short in (page_rows - 2, page_rows - 3):
        return 1
    return None


def start_in_page(keys: Sequence[tuple[str, str]], floor: Position | None, end: str) -> int | None:
    """Where a placing page's range starts: the index of its first row whose second is later
    than the row before it in the page and than ``floor``'s (the furthest row a range before it
    read), and earlier than ``end``; ``None`` when no row qualifies (the range is then empty).

    The row before it was the row just before it when the page was read, so no row of its
    second precedes it: every row from that second on up to the range's end is the range's.
    """
    for index in range(1, len(keys)):
        ts = keys[index][0]
        if ts >= end:
            return None
        if ts > keys[index - 1][0] and (floor is None or ts > floor.ts):
            return index
    return None


def next_floating(ranges: Sequence[SliceRange], r: SliceRange) -> bool:
    """Whether the range after ``r`` is being placed (so ``r``'s end is a guess)."""
    index = ranges.index(r) + 1
    return index < len(ranges) and ranges[index].floating


def clip_end(ranges: Sequence[SliceRange], r: SliceRange) -> str:
    """Where ``r``'s pages are clipped: its end, or while the ranges after it are being placed
    (their starts are guesses) or were found empty, the end of the last of them."""
    end, index = r.end, ranges.index(r) + 1
    while index < len(ranges) and (ranges[index].floating or ranges[index].empty()):
        end, index = ranges[index].end, index + 1
    return end


class Placements:
    """The splits of a counted board, each placed by its first page.

    It shares the board's list of ranges (``core.slices.Backfill``) and changes it: the window
    starts as one range, and an idle slice splits the range with the most rows left at a whole
    number of its reader's pages: the last range (up to HI) keeps ``chunk`` of them and hands
    over the rest (less near the window's end: an even share of the rest for ``slices``), any
    other keeps half.
    """

    def __init__(
        self, ranges: list[SliceRange], page_rows: int, chunk: int, *, slices: int = 1
    ) -> None:
        self.ranges = ranges
        self.page_rows = page_rows  # the engine halves it when the instance runs out of time
        self.chunk = chunk
        self.slices = slices

    def take(self, reader: int) -> SliceRange | None:
        """The range an idle slice reads next: one its reader left, else a split (``None``
        when no range can be split so that both parts end on a page)."""
        free = next((r for r in self.ranges if r.reader is None and not r.finished), None)
        if free is not None:
            free.reader = reader
            return free
        size = self.page_rows
        if size < 2:
            return None  # a placing page of one row would hold only its witness
        splits = [(r, self._split_of(r)) for r in self.ranges if self._splittable(r)]
        victim, split = max(
            ((r, p) for r, p in splits if p is not None), key=lambda x: x[0].left or 0,
            default=(None, None),
        )  # fmt: skip
        if victim is None or victim.left is None or split is None:
            return None
        pages, short = split
        anchor, skip = (victim.anchor, victim.skip) if victim.anchor else (victim.after, 0)
        start = self._guess(victim, pages)
        stolen = SliceRange(Position(start, ""), victim.end)
        stolen.reader = reader
        stolen.anchor, stolen.skip = anchor, placing_skip(skip, pages, size, short=short)
        stolen.left = victim.left - (stolen.skip - skip)
        victim.left = stolen.skip - skip + WITNESS
        victim.end = stolen.start.ts
        # Its last row is the stolen part's now; its own is the witness, once that arrives.
        stolen.last, victim.last = victim.last, None
        self.ranges.insert(self.ranges.index(victim) + 1, stolen)
        return stolen

    def _split_of(self, r: SliceRange) -> tuple[int, int] | None:
        """How ``r`` would be split: the pages its reader keeps and how short its witness
        lies; ``None`` when no split of it ends both parts on a page."""
        assert r.left is not None
        last = r is self.ranges[-1]
        short = witness_short(r.left, self.page_rows, last=last)
        if short is None:
            return None
        # The last range's reader keeps what makes its range a chunk (it has read some of it
        # already: a range twice a chunk would hold the prefix back while the others fill the
        # allowance); near the window's end less, an even share of what is left, so that the
        # slices end together instead of waiting for the last chunks' readers.
        share = max(MIN_PLACED_PAGES, r.left // (self.page_rows * self.slices))
        chunk = min(self.chunk - r.rows // self.page_rows, share)
        if len(self.ranges) < self.slices:
            # The first chunks grow from small to whole, so the slices never end a chunk
            # together (their next placing pages would arrive at once, and the allowance fill
            # at the same moment) and the prefix moves early.
            chunk = -(-chunk * len(self.ranges) // self.slices)
        chunk = max(MIN_PLACED_PAGES, chunk)
        pages = split_pages(r.left, self.page_rows, chunk if last else None)
        return None if pages is None else (pages, short)

    def _splittable(self, r: SliceRange) -> bool:
        """Whether ``r`` can hand over part of its rows: being read (its reader's pages give
        the grid a placed range starts on), its rows left known, room for a second between.
        A range still being placed only when it is the last (a backfill's first splits chain
        on the window's one range without waiting for each placing page)."""
        if r.finished or r.broken or r.reader is None or r.left is None:
            return False
        if r.floating and r is not self.ranges[-1]:
            return False
        return r.unread_seconds() >= 2

    def _guess(self, victim: SliceRange, pages: int) -> str:
        """Where a range placed ``pages`` pages into ``victim`` is expected to start: as far
        into its unread seconds as those pages are into its rows left (a guess its placing
        page corrects, strictly inside them, so that both parts can be split again before it
        arrives; a guess from the seconds its pages spanned could land at its very end)."""
        assert victim.left is not None
        unread = victim.unread_seconds()
        share = pages * self.page_rows / max(1, victim.left)
        return shift_ts(victim.after.ts, min(max(1, int(unread * share)), unread - 1))

    def place(self, r: SliceRange, keys: Sequence[tuple[str, str]]) -> int:
        """``r``'s placing page arrived with rows at ``keys``: where ``r`` starts in it (the
        rows before are the ranges' before it, to drop). When it holds no start before ``r``'s
        end, ``r`` is empty: it is finished, and its seconds are the range's before it."""
        if not r.floating:
            raise ValueError(f"{r!r} is not being placed")
        r.anchor, r.skip = None, 0
        index = self.ranges.index(r)
        before = self.ranges[:index]
        # Its end is a guess too while the range after it is being placed: up to theirs.
        first = start_in_page(keys, _floor(before), clip_end(self.ranges, r))
        at = r.end if first is None else keys[first][0]
        r.start = Position(at, "")
        if first is not None:
            _after_start(self.ranges[index:], at)
        # The range before it reads up to it (over the ones emptied by their placing pages).
        for x in reversed(before):
            hollow = x.empty()
            x.end = at
            if not hollow:
                break
            x.start = Position(at, "")
        dropped = len(keys) if first is None else first
        r.reserved = max(0, r.reserved - dropped)
        prior = next((x for x in reversed(before) if not x.empty()), None)
        if prior is not None and prior.left is not None:
            # The rows dropped past the witness were the range before's after all; an empty
            # range's were all of them.
            prior.left += max(0, (r.left or 0) if first is None else first - WITNESS)
        if r.left is not None:
            r.left = max(0, r.left - dropped)
        if first is None:
            r.finished = True
        elif prior is not None:
            # Its last row, seen here: a page of it that ends there reads it to its end without
            # a request of its own (no row comes between: the page showed them side by side).
            prior.last = Position(*keys[first - 1])
            prior.finished = prior.finished or prior.read_to == prior.last
        return dropped


def _after_start(ranges: Sequence[SliceRange], at: str) -> None:
    """``ranges[0]`` now starts at second ``at``: the guessed starts of the ranges being placed
    after it move past it, a second at least each (never past a range that is placed), and
    its end is where the next of them starts."""
    floor = shift_ts(at, 1)
    for x, after in itertools.pairwise(ranges):
        if not after.floating:
            break
        if after.start.ts < floor:
            after.start = Position(min(floor, after.end), "")
        x.end = after.start.ts
        floor = shift_ts(after.start.ts, 1)


def _floor(before: Sequence[SliceRange]) -> Position | None:
    """The furthest position the ranges before a placed one have read or start at: the placed
    range starts at a later second."""
    floor = max((x.read_to for x in before if x.read_to is not None), default=None)
    starts = [x.start for x in before if not x.floating]
    if starts and (floor is None or starts[-1] > floor):
        floor = starts[-1]
    return floor
