"""Ranges placed by their first pages (``core.slice_place``): the arithmetic and the rules.

The grid: a reader paging on from a position reads pages ending ``j * P`` rows after it; a range
placed ``k`` pages on starts right after its witness, the last row of the reader's ``k``-th page
(or the row before it). These tests page a sorted row list the way the instance does and check
that both parts of every split the rules allow end on a page.
"""

from __future__ import annotations

import itertools

import pytest

from snowsource.core.cursor import Position
from snowsource.core.slice_place import (
    MIN_PLACED_PAGES,
    WITNESS,
    Placements,
    chunk_pages,
    placing_skip,
    split_pages,
    start_in_page,
    witness_short,
)
from snowsource.core.slice_range import SliceRange
from snowsource.core.slice_spans import shift_ts

T0 = "2026-01-01 00:00:00"


def ts(second: int) -> str:
    return shift_ts(T0, second)


def requests_to_read(first_end: int, last: int, page: int) -> int:
    """Requests a reader spends when its first page ends on row ``first_end`` (1-based, one
    sorted list) and the next ``page`` rows each after that: it is done once a page ends on
    its ``last`` row (the row its successor's placing page showed) or reaches past it (the
    successor's first row, clipped)."""
    end, requests = first_end, 1
    while end < last:
        end, requests = end + page, requests + 1
    return requests


@pytest.mark.parametrize("page", [2, 3, 5, 10, 100])
def test_a_split_of_the_last_range_ends_its_reader_on_a_page(page: int) -> None:
    for pages in range(MIN_PLACED_PAGES, 6):
        short = witness_short(10**6, page, last=True)
        assert short is not None
        skip = placing_skip(0, pages, page, short=short)
        witness = skip + 1  # 1-based: the row the placing page starts with
        # The reader's pages end on rows page, 2*page, ...: its pages-th one ends on the row
        # after the witness, the placed range's first row, which clips it.
        assert pages * page in (witness, witness + 1)


@pytest.mark.parametrize("page", [3, 5, 10, 100])
def test_splits_the_rules_allow_end_both_parts_on_a_page(page: int) -> None:
    for left in range(page * MIN_PLACED_PAGES * 2, page * MIN_PLACED_PAGES * 2 + 3 * page):
        short = witness_short(left, page, last=False)
        pages = split_pages(left, page, None)
        if short is None or pages is None:
            continue
        # Rows 1..left are the reader's (left: its last, the next range's witness).
        witness = placing_skip(0, pages, page, short=short) + 1
        reader = requests_to_read(page, witness, page)  # it pages on from row 0
        placed = requests_to_read(witness + page - 1, left, page)  # from its witness
        whole = requests_to_read(page, left, page)  # one reader for all of them
        assert reader == pages, (left, short)
        assert reader + placed == whole, (left, short, reader, placed)


def test_which_rows_left_can_be_split() -> None:
    page = 10
    allowed = {
        left % page for left in range(100, 200) if witness_short(left, page, last=False) is not None
    }
    assert allowed == {page - 1, page - 2, page - 3}
    assert witness_short(123, page, last=True) == 1


def test_split_pages_keeps_a_chunk_of_the_last_range_or_half() -> None:
    assert split_pages(10_000, 100, 7) == 7
    assert split_pages(800, 100, 7) == 4  # too small for a chunk and two pages more: half
    assert split_pages(300, 100, None) is None  # half would leave its reader one page
    assert split_pages(400, 100, None) == 2


def test_chunk_pages_fit_the_allowance_and_an_even_share() -> None:
    # 7 slices beside the prefix's reader, each with a page in flight: 7 x (6 + 1) <= 50.
    assert chunk_pages(200_000, 1_000, 8, 50_000) == 6
    assert chunk_pages(200_000, 1_000, 4, 50_000) == 15
    assert chunk_pages(2_000, 500, 4, 50_000) == MIN_PLACED_PAGES  # an even share is one page
    assert chunk_pages(200_000, 1_000, 8, 0) == MIN_PLACED_PAGES


def test_placing_skip_counts_from_the_grid() -> None:
    assert placing_skip(0, 2, 10) == 19
    assert placing_skip(19, 2, 10) == 38
    assert placing_skip(0, 2, 10, short=1) == 18
    with pytest.raises(ValueError, match="at least one page"):
        placing_skip(0, 0, 10)


def test_start_in_page_needs_a_second_change_after_the_witness_and_the_floor() -> None:
    keys = [(ts(1), "w"), (ts(2), "a"), (ts(2), "b"), (ts(3), "c")]
    assert start_in_page(keys, None, ts(9)) == 1
    assert start_in_page(keys, Position(ts(2), "a"), ts(9)) == 3  # a range before read (2, a)
    assert start_in_page(keys, None, ts(3)) == 1
    assert start_in_page(keys, Position(ts(2), "b"), ts(3)) is None  # nothing before the end
    same = [(ts(1), "w"), (ts(1), "x"), (ts(1), "y")]
    assert start_in_page(same, None, ts(9)) is None  # one second: no start can be proven
    assert start_in_page([(ts(1), "w")], None, ts(9)) is None  # the witness alone
    assert start_in_page([], None, ts(9)) is None


def _split_last(page_rows: int, chunk: int) -> tuple[SliceRange, SliceRange, Placements]:
    """A window read by one reader (100 rows left), split once for an idle slice: the
    reader's range, the part handed over, and the placements over them."""
    r = SliceRange(Position(ts(0), ""), ts(1000))
    r.reader, r.left = 0, 100
    placements = Placements([r], page_rows=page_rows, chunk=chunk)
    stolen = placements.take(1)
    assert stolen is not None
    return r, stolen, placements


def test_a_split_hands_over_the_rest_of_the_last_range_placed_after_its_reader() -> None:
    r, stolen, placements = _split_last(10, 3)
    assert placements.ranges == [r, stolen]
    assert stolen.floating
    assert stolen.anchor == r.after
    assert stolen.skip == placing_skip(0, 3, 10, short=1)
    assert r.left == stolen.skip + WITNESS
    assert stolen.left == 100 - stolen.skip
    assert r.end == stolen.start.ts  # the guess, until the placing page arrives
    # The last range may be split again while it is being placed, on its own grid.
    assert placements.take(2) is not None
    assert placements.ranges[2].anchor == stolen.anchor
    assert placements.ranges[2].skip > stolen.skip


def test_a_placing_page_sets_the_boundary_and_the_last_row_of_the_range_before() -> None:
    r, stolen, placements = _split_last(4, 2)
    keys = [(ts(30), "w"), (ts(31), "a"), (ts(32), "b"), (ts(33), "c")]
    assert placements.place(stolen, keys) == 1
    assert not stolen.floating
    assert stolen.start == Position(ts(31), "")
    assert r.end == ts(31)
    assert r.last == Position(ts(30), "w")


def test_a_placing_page_past_its_range_leaves_it_empty_to_the_range_before() -> None:
    r, stolen, placements = _split_last(4, 2)
    end = stolen.end
    keys = [(ts(1000), "w"), (ts(1001), "a")]  # rows left the window: past its end
    assert placements.place(stolen, keys) == 2
    assert stolen.finished
    assert stolen.empty()
    assert r.end == end  # its seconds are the reader's again


def test_every_small_split_is_checked_by_paging() -> None:
    # Exhaustive over small pages and remainders: a split the rules allow never costs a request.
    for page, left in itertools.product(range(3, 9), range(12, 80)):
        short = witness_short(left, page, last=False)
        pages = split_pages(left, page, None)
        if short is None or pages is None:
            continue
        witness = placing_skip(0, pages, page, short=short) + 1
        both = requests_to_read(page, witness, page) + requests_to_read(
            witness + page - 1, left, page
        )
        assert both == requests_to_read(page, left, page), (page, left)
