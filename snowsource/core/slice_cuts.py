"""Where a sliced backfill's ranges end: on a page's end, not in its middle (SPEC §15.3).

Each range is paged on its own, so its last page is short unless the range holds a whole number
of pages: that page costs a full request for a part of one (about half a request a range on
average, the main cost of slicing). A range boundary costs nothing when the reader before it
ends exactly on a page; a little before a page's end costs that little. So when a range is
handed out, and when one is split, the cut is moved to where the reader before it is expected
to end a page: ``PAGE_MARGIN`` of a page before that page's end (rows are not spread evenly: a
cut just after a page's end would cost almost a whole request).

The reader's pages start where its last one ended (``SliceRange.after``), so its grid of pages
is known; where they end in time comes from how many seconds its pages spanned so far (the
range's own density), else the density the range was cut with.
"""

from __future__ import annotations

import math

from snowsource.core.cursor import Position
from snowsource.core.slice_spans import seconds_between

__all__ = ["PAGE_MARGIN", "aligned_seconds", "seconds_a_page_read"]

#: How far before a page's expected end a range is cut, in pages: the estimated density errs by
#: a few per cent over a range of several pages, and a cut past the end costs nearly a request.
PAGE_MARGIN = 0.2


def seconds_a_page_read(
    start: Position, read_to: Position | None, rows: int, page_rows: int
) -> float | None:
    """Seconds a page spans, from what a range's reader read so far: all of it, not only its
    last page (one page's span is a noisy estimate). ``None`` before a page's worth of rows, or
    when they all lie in one second (a burst says nothing about the seconds after it)."""
    if read_to is None or rows < page_rows:
        return None
    seconds = seconds_between(start.ts, read_to.ts)
    if seconds < 1:
        return None
    return seconds * page_rows / rows


def aligned_seconds(
    unread: int, bound: int, seconds_a_page: float, margin: float = PAGE_MARGIN
) -> int | None:
    """Where to cut a reader's part that is ``unread`` seconds long now, in seconds after where
    its next page starts: ``margin`` of a page before the end of its page nearest the cut,
    within ``1..bound`` seconds (``None`` when no cut fits there, or the density is unknown)."""
    if seconds_a_page <= 0 or bound < 1:
        return None
    pages = max(1, round(unread / seconds_a_page + margin))
    seconds = math.floor((pages - margin) * seconds_a_page)
    if seconds < 1:
        return None
    return min(seconds, bound)
