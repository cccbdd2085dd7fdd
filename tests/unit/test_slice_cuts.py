"""Where a sliced backfill's ranges are cut (SPEC §15.3: at most 1.05 requests a page of rows).

Each range's last page is short unless the range holds a whole number of pages; the board cuts
how many ranges a window gets from its row count, and moves a cut to a fifth of a page before
where the reader before it is expected to end a page (``core.slice_cuts``).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.cursor import Position
from snowsource.core.slice_cuts import PAGE_MARGIN, aligned_seconds, seconds_a_page_read
from snowsource.core.slice_range import initial_ranges
from snowsource.core.slices import Backfill, seconds_between, shift_ts

T0 = "2026-01-01 00:00:00"


def ts(second: int) -> str:
    return shift_ts(T0, second)


@given(
    st.integers(0, 10**6),
    st.integers(-5, 10**6),
    st.floats(0.5, 10**5, allow_nan=False),
    st.floats(0.0, 0.5),
)
def test_an_aligned_cut_falls_a_margin_before_a_page_end_within_its_bounds(
    unread: int, bound: int, seconds_a_page: float, margin: float
) -> None:
    cut = aligned_seconds(unread, bound, seconds_a_page, margin)
    nearest = round(unread / seconds_a_page + margin)
    pages = max(1, nearest)  # the reader before the cut keeps a page at least
    expected = math.floor((pages - margin) * seconds_a_page)
    if cut is None:
        # No whole second fits: the bound is below one, or the cut's page is under a second.
        assert bound < 1 or expected < 1
        return
    assert 1 <= cut <= bound
    # Within the bound, the cut is ``margin`` of a page before its reader's page end...
    assert cut == min(expected, bound)
    # ... and the page end nearest the cut asked for: it moves by at most about half a page.
    if cut == expected and nearest >= 1:
        assert abs(cut - unread) <= seconds_a_page * (0.5 + margin) + 1


def test_an_aligned_cut_needs_a_known_density_and_room() -> None:
    assert aligned_seconds(100, 50, 0.0) is None
    assert aligned_seconds(100, 0, 10.0) is None
    assert aligned_seconds(100, 1_000, 10.0) == 98  # 10 pages, minus a fifth of one
    assert aligned_seconds(3, 1_000, 10.0) == 8  # never less than one page


def test_the_density_read_counts_every_row_read_not_the_last_page() -> None:
    start = Position(ts(0), "")
    assert seconds_a_page_read(start, None, 0, 100) is None
    assert seconds_a_page_read(start, Position(ts(50), "x"), 99, 100) is None  # under a page
    assert seconds_a_page_read(start, Position(ts(0), "x"), 300, 100) is None  # one second
    assert seconds_a_page_read(start, Position(ts(600), "x"), 300, 100) == 200.0


@pytest.mark.parametrize(
    ("rows", "page", "slices", "ranges"),
    [
        # The 200k benchmark at 1,000 a page, 50,000 ahead: one range per ten pages at most
        # (before: 16 at 4 slices, 32 at 8), fewer when the allowance needs fewer.
        (200_000, 1_000, 8, 20),
        (200_000, 1_000, 4, 12),
        (2_000_000, 1_000, 8, 32),  # capped at four a slice
        (20_000, 500, 4, 4),  # one per slice: no slower than before
        (2_000, 500, 4, 1),  # four pages: a range for one reader
    ],
)
def test_a_counted_window_gets_as_few_ranges_as_serve_its_slices(
    rows: int, page: int, slices: int, ranges: int
) -> None:
    cut = initial_ranges(
        Position(ts(0), ""),
        ts(30 * 86_400),
        slices=slices,
        max_ahead=50_000,
        pieces=slices * 4,
        expected_rows=rows,
        page_rows=page,
        first_page_seconds=None,
    )
    assert len(cut) == ranges
    assert all(r.cut_page_seconds is not None for r in cut)
    assert cut[0].start == Position(ts(0), "")
    assert cut[-1].end == ts(30 * 86_400 + 1)


def _read(b: Backfill, r: object, seconds: list[int], limit: int) -> None:
    assert isinstance(r, type(b.ranges[0]))
    b.reserve(r, limit)
    b.arrived(r, [(ts(s), f"{s:08d}") for s in seconds], limit)


def test_a_free_range_starts_where_the_reader_before_it_ends_a_page() -> None:
    # Two ranges of 1,000 seconds; pages of 10 rows. The first range's reader reads two full
    # pages, a row every 10 s: 100 s a page, and its next page starts at second 200.
    b = Backfill(Position(ts(0), ""), ts(1_999), slices=2, max_ahead=10**6, ranges_per_slice=1,
                 page_rows=10)  # fmt: skip
    first = b.take(0)
    assert first is not None
    assert first.end == ts(1_000)
    _read(b, first, list(range(10, 101, 10)), 10)
    _read(b, first, list(range(110, 201, 10)), 10)
    second = b.take(1)
    assert second is not None
    # 800 unread seconds are 8 pages: the cut moves to 7.8 pages after second 200.
    expected = 200 + math.floor((8 - PAGE_MARGIN) * 100)
    assert (first.end, second.start) == (ts(expected), Position(ts(expected), ""))
    assert b.ranges == [first, second]
    assert seconds_between(second.start.ts, second.end) == 2_000 - expected


def test_a_range_with_rows_read_or_after_a_finished_one_is_never_moved() -> None:
    b = Backfill(Position(ts(0), ""), ts(1_999), slices=2, max_ahead=10**6, ranges_per_slice=1,
                 page_rows=10)  # fmt: skip
    first = b.take(0)
    assert first is not None
    _read(b, first, list(range(10, 101, 10)), 10)
    _read(b, first, [], 10)  # an empty page: read to its end
    assert first.finished
    second = b.take(1)
    assert second is not None
    assert second.start == Position(ts(1_000), "")
    # Without a page size (the unit boards) nothing moves either.
    plain = Backfill(Position(ts(0), ""), ts(1_999), slices=2, max_ahead=10**6,
                     ranges_per_slice=1)  # fmt: skip
    one = plain.take(0)
    assert one is not None
    _read(plain, one, list(range(10, 101, 10)), 10)
    two = plain.take(1)
    assert two is not None
    assert two.start == Position(ts(1_000), "")
