"""Ranges placed by their first page, so that a range boundary costs no request (SPEC §15.3).

Each range of a sliced backfill is paged on its own, so the page that reaches its end is partly
the next range's: about half a request lost per boundary when the boundary is cut in time
(``core.slice_cuts`` narrows that by guessing where the reader before it ends a page). With
``backfill.max.ahead.rows`` keeping the ranges near the prefix small, a backfill of 8 slices has
some 40 boundaries: that half request each is what kept it above 1.05 requests per page.

A range handed out while the range before it is being read is *placed* instead: its first page
is the keyset query of the reader before it (same position, same bound) with ``sysparm_offset``
set so that the page starts one row before where that reader's ``k``-th page will end. The
reader before it pages on from the same position, ``page_rows`` at a time, so its pages end
every ``page_rows`` rows after it: the placed range's first kept row is the last row of that
reader's ``k``-th page, and that page, clipped at the new boundary, ends the range before with
no request of its own. The row the page starts with is the *witness*: it is the row just before
the first kept one, so when its second is earlier, no row of the kept row's second comes before
it, and the boundary stays a whole second (SPEC §14.2).

Nothing here is needed for correctness, only for the count: a guess that lands wrong (rows
changed meanwhile, a page shortened by ACLs, a page size halved) costs a request, never a row.
The rules that keep every row (``start_in_page``): the placed range starts at a second later
than every row a range before it has read, and later than its witness; the rows before that
second are the range before it's, which reads up to the boundary as it reads up to any other;
and when the page holds no such second before the range's end, the range is empty and its
seconds go to the range before it.
"""

from __future__ import annotations

from collections.abc import Sequence

from snowsource.core.cursor import Position

__all__ = [
    "MIN_PLACED_PAGES",
    "WITNESS",
    "chunk_pages",
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
    the slices beside the prefix's reader read within ``max_ahead`` (a chunk further would
    only wait for the allowance), no more than an even share of the window, and at least
    ``MIN_PLACED_PAGES``."""
    allowance = max_ahead // (page_rows * max(1, slices - 1))
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
