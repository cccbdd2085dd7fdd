"""Parallel backfill slices: ranges, work stealing, the committed prefix, max ahead (SPEC §14.2).

The property test drives :class:`Backfill` with a random schedule of slices against a model of
the instance (keyset pages over a sorted row set, access rules hiding rows after the limit is
applied) and checks the promises on every step: each visible row is read exactly once, the
committed prefix never moves back and never passes an unacknowledged row, and the rows ahead of
it never exceed the limit.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snowsource.core.cursor import Position, in_window
from snowsource.core.slices import (
    Backfill,
    SliceRange,
    Span,
    seconds_between,
    shift_ts,
    split_span,
)

T0 = "2026-01-01 00:00:00"
Key = tuple[str, str]


def ts(second: int) -> str:
    return shift_ts(T0, second)


# ------------------------------------------------------------------ spans


def test_split_covers_the_span_in_adjacent_whole_second_ranges() -> None:
    spans = split_span(Position(ts(0), "abc"), ts(9), 4)
    assert [(s.start, s.end) for s in spans] == [
        (Position(ts(0), "abc"), ts(3)),
        (Position(ts(3), ""), ts(6)),
        (Position(ts(6), ""), ts(8)),
        (Position(ts(8), ""), ts(10)),
    ]
    assert [s.hi for s in spans] == [ts(2), ts(5), ts(7), ts(9)]
    assert sum(s.seconds for s in spans) == 10


def test_split_never_makes_more_ranges_than_seconds() -> None:
    spans = split_span(Position(ts(5), ""), ts(6), 8)
    assert [(s.start.ts, s.end) for s in spans] == [(ts(5), ts(6)), (ts(6), ts(7))]
    assert split_span(Position(ts(5), ""), ts(5), 3) == [Span(Position(ts(5), ""), ts(6))]


def test_split_of_an_empty_span_is_empty() -> None:
    assert split_span(Position(ts(5), "x"), ts(4), 4) == []


def test_split_refuses_zero_pieces_and_spans_refuse_zero_seconds() -> None:
    with pytest.raises(ValueError, match="at least one range"):
        split_span(Position(ts(0), ""), ts(3), 0)
    with pytest.raises(ValueError, match="at least one second"):
        Span(Position(ts(3), ""), ts(3))


@given(
    st.integers(0, 10_000), st.integers(-2, 100_000), st.integers(1, 64), st.sampled_from(["", "z"])
)
def test_split_property(start: int, length: int, pieces: int, ident: str) -> None:
    spans = split_span(Position(ts(start), ident), ts(start + length), pieces)
    if length < 0:
        assert spans == []
        return
    assert len(spans) == min(pieces, length + 1)
    assert spans[0].start == Position(ts(start), ident)
    assert spans[-1].end == ts(start + length + 1)
    for earlier, later in itertools.pairwise(spans):
        assert later.start == Position(earlier.end, "")
    sizes = [s.seconds for s in spans]
    assert min(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1


def test_seconds_between_and_shift() -> None:
    assert seconds_between(ts(0), ts(3600)) == 3600
    assert seconds_between(ts(10), ts(4)) == -6
    assert shift_ts("2026-12-31 23:59:59", 1) == "2027-01-01 00:00:00"


# ------------------------------------------------------------------ the board, by hand


def board(seconds: int = 40, slices: int = 2, max_ahead: int = 1_000, **kw: object) -> Backfill:
    return Backfill(
        Position(ts(0), ""),
        ts(seconds - 1),
        slices=slices,
        max_ahead=max_ahead,
        ranges_per_slice=kw.pop("ranges_per_slice", 2),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def test_slices_take_the_earliest_free_range_first() -> None:
    b = board()
    assert [(r.start.ts, r.end) for r in b.ranges] == [
        (ts(0), ts(10)),
        (ts(10), ts(20)),
        (ts(20), ts(30)),
        (ts(30), ts(40)),
    ]
    taken = [b.take(i) for i in range(4)]
    assert taken == b.ranges
    assert [r.reader for r in b.ranges] == [0, 1, 2, 3]


def test_stealing_splits_the_largest_unread_part_at_its_midpoint() -> None:
    b = board(seconds=40, slices=1, ranges_per_slice=2)
    first, second = b.take(0), b.take(1)
    assert first is not None
    assert second is not None
    b.reserve(second, 1)
    b.arrived(second, [(ts(21), "a")], 1)  # a full page into 21: 19 unread seconds, 1 s a page
    stolen = b.take(2)
    assert stolen is not None
    # first: 20 unread seconds from 0 (largest); split at 0 + 10
    assert (stolen.start, stolen.end, first.end) == (Position(ts(10), ""), ts(20), ts(10))
    assert b.ranges == [first, stolen, second]
    again = b.take(3)
    assert again is not None
    # second: unread [21, 40) = 19 seconds, larger than first's or stolen's 10
    assert (again.start.ts, again.end, second.end) == (ts(30), ts(40), ts(30))


def test_stealing_weighs_ranges_by_pages_not_seconds() -> None:
    b = board(seconds=400, slices=1, ranges_per_slice=2)
    sparse, dense = b.take(0), b.take(1)
    assert sparse is not None
    assert dense is not None
    b.reserve(sparse, 10)
    b.arrived(sparse, [(ts(i * 10), str(i)) for i in range(1, 11)], 10)  # 100 s a page
    b.reserve(dense, 10)
    b.arrived(dense, [(ts(200), str(i)) for i in range(10)], 10)  # a same-second burst
    # sparse: 100 unread seconds, one page; dense: 200 seconds at 0 s a page
    stolen = b.take(2)
    assert stolen is not None
    assert (stolen.start.ts, dense.end) == (ts(300), ts(300))


def test_a_part_of_less_than_two_pages_or_after_a_short_page_is_not_split() -> None:
    b = board(seconds=40, slices=1, ranges_per_slice=2)
    first, second = b.take(0), b.take(1)
    assert first is not None
    assert second is not None
    b.reserve(first, 2)
    b.arrived(first, [(ts(1), "a"), (ts(12), "b")], 2)  # 12 s a page, 8 unread: < 2 pages
    b.reserve(second, 5)
    b.arrived(second, [(ts(21), "a")], 5)  # short: little is left up to HI
    assert not second.finished
    assert b.take(2) is None
    b.reserve(first, 2)
    b.arrived(first, [(ts(13), "c"), (ts(14), "d")], 2)  # denser now: 2 s a page, 6 unread
    stolen = b.take(2)
    assert stolen is not None
    assert (stolen.start.ts, first.end) == (ts(17), ts(17))


def test_a_free_range_beyond_max_ahead_rows_waits_while_the_ranges_before_it_are_split() -> None:
    b = board(seconds=400, slices=1, ranges_per_slice=2, max_ahead=50)
    dense = b.take(0)
    assert dense is not None
    b.reserve(dense, 10)
    b.arrived(dense, [(ts(i), str(i)) for i in range(1, 11)], 10)  # 10 s a page: 19 pages left
    # 190 rows expected before the free range [200, 400): past max_ahead, so split the dense one.
    stolen = b.take(1)
    assert stolen is not None
    assert (stolen.start.ts, stolen.end, dense.end) == (ts(105), ts(200), ts(105))
    # A sparse prefix range leaves the free range within reach: it is taken.
    sparse_board = board(seconds=400, slices=1, ranges_per_slice=2, max_ahead=50)
    sparse = sparse_board.take(0)
    assert sparse is not None
    sparse_board.reserve(sparse, 10)
    sparse_board.arrived(sparse, [(ts(i * 10), str(i)) for i in range(1, 11)], 10)
    free = sparse_board.take(1)
    assert free is not None
    assert (free.start.ts, free.end) == (ts(200), ts(400))


def test_a_range_found_beyond_reach_is_left_for_ranges_nearer_the_prefix() -> None:
    b = board(seconds=400, slices=1, ranges_per_slice=2, max_ahead=50)
    dense, far = b.take(0), b.take(1)  # taken before any density is known
    assert dense is not None
    assert far is not None
    b.reserve(far, 10)
    b.arrived(far, [(ts(200 + 19 * i), str(i)) for i in range(1, 11)], 10)  # sparse
    assert not b.should_leave(far)  # nothing says the prefix range is large yet
    b.reserve(dense, 10)
    b.arrived(dense, [(ts(i), str(i)) for i in range(1, 11)], 10)  # 10 s a page: 19 left
    # 10 rows ahead + 190 expected before it > 50: the far range's reader stops fetching...
    assert b.should_leave(far)
    assert not b.should_leave(dense)  # the prefix range is never held back
    with pytest.raises(ValueError, match="unacknowledged"):
        b.leave(far)  # ...and leaves it only once its page there is acknowledged
    b.acked(far, Position(ts(390), "10"))
    b.leave(far)
    assert (far.reader, far.after) == (None, Position(ts(390), "10"))
    # Its slice splits the prefix range instead, halving until a part lies within reach.
    starts = []
    while True:
        r = b.take(1)
        assert r is not None
        starts.append(r.start.ts)
        if not b.should_leave(r):
            break
        b.leave(r)
    assert starts == [ts(105), ts(57), ts(33)]
    assert b.may_fetch(r, 10)
    assert dense.end == ts(33)
    # The parts left untouched wait free, in cursor order, for whoever gets there first.
    assert [(x.start.ts, x.reader) for x in b.ranges] == [
        (ts(0), 0),
        (ts(33), 1),
        (ts(57), None),
        (ts(105), None),
        (ts(200), None),
    ]


def test_a_range_of_one_unread_second_is_never_split() -> None:
    b = board(seconds=2, slices=1, ranges_per_slice=1)
    r = b.take(0)
    assert r is not None
    assert (r.start.ts, r.end) == (ts(0), ts(2))
    b.reserve(r, 5)
    b.arrived(r, [(ts(1), "a")], 5)
    assert r.unread_seconds() == 1
    assert b.take(1) is None


def test_a_page_reaching_past_a_split_is_clipped_and_finishes_its_range() -> None:
    b = board(seconds=40, slices=1, ranges_per_slice=1)
    r = b.take(0)
    assert r is not None
    b.reserve(r, 4)  # a page is in flight for [0, 40) ...
    stolen = b.take(1)  # ... when its second half is handed over
    assert stolen is not None
    assert r.end == ts(20)
    keys = [(ts(5), "a"), (ts(19), "b"), (ts(20), "c"), (ts(25), "d")]
    assert b.arrived(r, keys, 4) == 2
    assert r.finished
    assert r.read_to == Position(ts(19), "b")
    assert r.rows == 2


def test_a_page_reaching_into_untouched_ranges_takes_them_over() -> None:
    b = board(seconds=40, slices=1, ranges_per_slice=4)  # [0,10) [10,20) [20,30) [30,40)
    first = b.take(0)
    assert first is not None
    b.reserve(first, 4)
    keys = [(ts(5), "a"), (ts(12), "b"), (ts(21), "c"), (ts(22), "d")]
    assert b.arrived(first, keys, 4) == 4  # nobody started [10,20) or [20,30): all kept
    assert not first.finished
    assert (first.end, first.read_to) == (ts(30), Position(ts(22), "d"))
    assert [(r.start.ts, r.end) for r in b.ranges] == [(ts(0), ts(30)), (ts(30), ts(40))]
    last = b.take(1)
    assert last is not None
    assert last.start.ts == ts(30)
    b.reserve(first, 4)
    # [30,40) has a reader now: its rows are clipped and the range ends.
    assert b.arrived(first, [(ts(29), "e"), (ts(30), "f")], 4) == 1
    assert first.finished
    assert first.end == ts(30)


def test_an_empty_page_finishes_a_range_and_a_short_one_does_not() -> None:
    b = board(seconds=10, slices=1, ranges_per_slice=1)
    r = b.take(0)
    assert r is not None
    b.reserve(r, 100)
    assert b.arrived(r, [(ts(3), "a")], 100) == 1  # short: access rules may have hidden rows
    assert not r.finished
    assert r.after == Position(ts(3), "a")
    b.acked(r, Position(ts(3), "a"))
    b.reserve(r, 100)
    assert b.arrived(r, [], 100) == 0
    assert r.finished
    assert r.settled
    assert b.done()
    assert b.prefix() == Position(ts(3), "a")


def test_the_prefix_is_contiguous_and_never_below_the_committed_position() -> None:
    committed = Position(ts(5), "m")
    b = Backfill(Position(ts(0), ""), ts(39), slices=2, max_ahead=100, committed=committed,
                 ranges_per_slice=1)  # fmt: skip
    first, second = b.take(0), b.take(1)
    assert first is not None
    assert second is not None
    assert b.prefix() == committed
    b.reserve(second, 10)
    b.arrived(second, [(ts(25), "x")], 10)
    b.acked(second, Position(ts(25), "x"))
    assert b.prefix() == committed  # the first range holds it back
    assert b.ahead() == 1
    b.reserve(first, 10)
    b.arrived(first, [(ts(3), "a")], 10)  # a re-read row below the committed one
    b.acked(first, Position(ts(3), "a"))
    assert b.prefix() == committed
    b.reserve(first, 10)
    b.arrived(first, [(ts(7), "b")], 10)
    assert b.prefix() == committed  # read, not acknowledged
    b.acked(first, Position(ts(7), "b"))
    assert b.prefix() == Position(ts(7), "b")
    b.reserve(first, 10)
    b.arrived(first, [], 10)
    assert first.settled
    assert b.prefix() == Position(ts(25), "x")
    assert b.ahead() == 0


def test_a_fully_suppressed_page_moves_nothing_but_still_settles() -> None:
    b = board(seconds=10, slices=1, ranges_per_slice=1)
    r = b.take(0)
    assert r is not None
    b.reserve(r, 10)
    b.arrived(r, [(ts(1), "a")], 10)
    b.acked(r, None)
    assert b.prefix() is None
    b.reserve(r, 10)
    b.arrived(r, [], 10)
    assert b.done()
    assert b.prefix() is None


def test_a_clipped_last_page_acknowledged_in_part_holds_the_prefix_for_good() -> None:
    b = board(seconds=20, slices=2, ranges_per_slice=1)
    first, second = b.take(0), b.take(1)
    assert first is not None
    assert second is not None
    b.reserve(second, 2)
    b.arrived(second, [(ts(11), "x"), (ts(12), "y")], 2)
    b.acked(second, Position(ts(12), "y"))
    b.reserve(first, 3)
    # Its last page reaches into the next range (clipped: the range is read to its end)...
    assert b.arrived(first, [(ts(1), "a"), (ts(2), "b"), (ts(3), "c"), (ts(11), "x")], 3) == 3
    assert first.finished
    # ...but Kafka took only its first row: the prefix stops there, and stays.
    b.partly_acked(first, Position(ts(1), "a"))
    assert b.prefix() == Position(ts(1), "a")
    assert not first.settled
    b.reserve(second, 2)
    b.arrived(second, [(ts(13), "z")], 2)
    b.acked(second, Position(ts(13), "z"))
    assert b.prefix() == Position(ts(1), "a")
    assert first.broken
    assert first.pending == 0  # its page awaits no more acks: it never will be acknowledged
    with pytest.raises(ValueError, match="no page"):
        b.partly_acked(first, None)
    assert b.prefix() == Position(ts(1), "a")


def test_no_ack_after_a_partial_one_moves_its_range() -> None:
    b = board(seconds=20, slices=1, ranges_per_slice=1)
    r = b.take(0)
    assert r is not None
    b.reserve(r, 2)
    b.arrived(r, [(ts(1), "a"), (ts(2), "b")], 2)
    b.reserve(r, 2)
    b.arrived(r, [(ts(3), "c")], 2)
    b.partly_acked(r, None)  # Kafka took none of the first page
    b.acked(r, Position(ts(3), "c"))  # the next page's, produced meanwhile
    assert b.prefix() is None, "the prefix passed a refused row"


def test_the_prefix_is_free_when_nobody_reads_the_range_holding_it_back() -> None:
    b = board(seconds=400, slices=1, ranges_per_slice=2, max_ahead=50)
    first, second = b.take(0), b.take(1)
    assert first is not None
    assert second is not None
    assert not b.prefix_free()  # the first range has its reader
    b.reserve(second, 10)
    b.arrived(second, [(ts(200 + i), str(i)) for i in range(10)], 10)
    b.acked(second, Position(ts(209), "9"))
    b.leave(second)  # free again, not finished
    assert not b.prefix_free()
    b.reserve(first, 10)
    b.arrived(first, [], 10)  # the first range ends: the one left holds the prefix now
    assert first.settled
    assert b.prefix_free()
    assert b.take(1) is second
    assert not b.prefix_free()


def test_ack_without_a_pending_page_is_a_bug() -> None:
    b = board()
    r = b.take(0)
    assert r is not None
    with pytest.raises(ValueError, match="awaits"):
        b.acked(r, None)


def test_max_ahead_holds_back_every_range_but_the_prefix_one() -> None:
    b = board(seconds=40, slices=2, max_ahead=15, ranges_per_slice=1)
    first, second = b.take(0), b.take(1)
    assert first is not None
    assert second is not None
    assert b.may_fetch(second, 10)
    b.reserve(second, 10)
    assert not b.may_fetch(second, 10)  # 10 reserved + 10 > 15
    assert b.may_fetch(first, 10_000)  # the prefix range is never held back
    b.arrived(second, [(ts(20 + i), "x") for i in range(4)], 10)
    assert b.ahead() == 4
    assert b.may_fetch(second, 10)
    assert not b.may_fetch(second, 12)
    b.cancelled(second, 10)  # a reservation that returned nothing gives its room back
    assert b.may_fetch(second, 11)


def test_active_rows_read_and_covered_seconds() -> None:
    b = board(seconds=40, slices=2, ranges_per_slice=1)
    first, second = b.take(0), b.take(1)
    assert first is not None
    assert second is not None
    assert b.active() == 2
    assert b.total_seconds == 40
    b.reserve(first, 10)
    b.arrived(first, [(ts(4), "a"), (ts(6), "b")], 10)
    b.reserve(second, 10)
    b.arrived(second, [], 10)
    assert b.active() == 1
    assert b.rows_read() == 2
    assert b.covered_seconds() == 6 + 20


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="at least one slice"):
        Backfill(Position(ts(0), ""), ts(1), slices=0, max_ahead=1)
    with pytest.raises(ValueError, match="below 0"):
        Backfill(Position(ts(0), ""), ts(1), slices=1, max_ahead=-1)


# ------------------------------------------------------------------ the property


@dataclass
class Slice:
    ident: int
    range: SliceRange | None = None
    in_flight: tuple[list[Key], int] | None = None  # page rows, limit
    # The kept keys of each page, with its range: a slice that left a range still awaits the
    # acks of the page it was producing there.
    unacked: list[tuple[SliceRange, list[Key]]] = field(default_factory=list)


class HiddenPageError(Exception):
    """Every row of a page was hidden: the engine's count check FAILs the table (SPEC §5)."""


def instance_page(
    rows: list[Key], hidden: set[Key], after: Position, hi: str, limit: int
) -> list[Key]:
    """The instance: the limit applies before access rules, which then hide some rows."""
    first = bisect.bisect_left(rows, (after.ts, after.id))
    window = [k for k in rows[first : first + limit + 1] if in_window(Position(*k), after, hi)]
    window = window[:limit]
    page = [k for k in window if k not in hidden]
    if window and not page:
        raise HiddenPageError
    return page


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[Key], set[Key], int]:
    seconds = draw(st.integers(1, 60))
    counts = draw(st.lists(st.integers(0, 12), min_size=seconds, max_size=seconds))
    rows = sorted((ts(s), f"{i:04x}") for s, n in enumerate(counts) for i in range(n))
    hidden = {k for k in rows if draw(st.integers(0, 9)) == 0}
    return rows, hidden, seconds


@settings(max_examples=200, deadline=None)
@given(
    tables(),
    st.integers(1, 6),
    st.integers(1, 5),
    st.integers(0, 40),
    st.integers(1, 3),
    st.randoms(use_true_random=False),
)
def test_random_schedules_keep_every_promise(  # noqa: PLR0917 - one argument per strategy
    table: tuple[list[Key], set[Key], int],
    slices: int,
    limit: int,
    max_ahead: int,
    per_slice: int,
    rnd: random.Random,
) -> None:
    rows, hidden, seconds = table
    visible = [k for k in rows if k not in hidden]
    b = Backfill(Position(ts(0), ""), ts(seconds - 1), slices=slices, max_ahead=max_ahead,
                 ranges_per_slice=per_slice)  # fmt: skip
    workers = [Slice(i) for i in range(slices)]
    read: list[Key] = []
    acked: set[Key] = set()
    last_prefix: Position | None = None
    checked = 0  # visible rows the prefix has passed, each found acknowledged
    left = 0
    for _ in range(20_000):
        if b.done():
            break
        moves = _moves(b, workers, limit)
        assert moves, f"no slice can move and the backfill is not done: {b.ranges}"
        kind, worker = rnd.choice(moves)
        if kind == "take":
            worker.range = b.take(worker.ident)
            if worker.range is None:
                workers.remove(worker)
        elif kind == "leave":
            assert worker.range is not None
            b.leave(worker.range)
            worker.range = None
            left += 1
        elif kind == "fetch":
            r = worker.range
            assert r is not None
            b.reserve(r, limit)
            try:
                worker.in_flight = (instance_page(rows, hidden, r.after, r.hi, limit), limit)
            except HiddenPageError:
                return  # the table FAILs naming the ACL problem; nothing more to check
        elif kind == "arrive":
            r, flight = worker.range, worker.in_flight
            assert r is not None
            assert flight is not None
            page, lim = flight
            worker.in_flight = None
            keep = b.arrived(r, page, lim)
            read.extend(page[:keep])
            if keep:
                worker.unacked.append((r, page[:keep]))
            if r.finished:
                worker.range = None if not worker.unacked else r
        else:  # ack
            r, keys = worker.unacked.pop(0)
            acked.update(keys)
            b.acked(r, Position(*keys[-1]))
            if worker.range is not None and worker.range.finished and not worker.unacked:
                worker.range = None
        prefix = b.prefix()
        if last_prefix is not None:
            assert prefix is not None
            assert prefix >= last_prefix, "the prefix moved back"
        last_prefix = prefix
        if prefix is not None:
            # The prefix only grows: check each visible row once, as the prefix passes it.
            while checked < len(visible) and Position(*visible[checked]) <= prefix:
                assert visible[checked] in acked, f"prefix {prefix} passes {visible[checked]}"
                checked += 1
        assert b.ahead() <= max_ahead, "rows ahead of the prefix passed the limit"
    assert b.done()
    assert sorted(read) == visible, "every visible row is read exactly once"
    assert b.prefix() == (Position(*visible[-1]) if visible else None)
    assert b.ahead() == 0


def _moves(b: Backfill, workers: list[Slice], limit: int) -> list[tuple[str, Slice]]:
    moves: list[tuple[str, Slice]] = []
    for w in workers:
        if w.unacked:
            moves.append(("ack", w))
        if w.in_flight is not None:
            moves.append(("arrive", w))
        elif w.range is None:
            moves.append(("take", w))
        elif not w.range.finished and b.should_leave(w.range):
            if not w.range.pending:
                moves.append(("leave", w))  # the engine fetches no more and leaves
        elif not w.range.finished and b.may_fetch(w.range, limit):
            moves.append(("fetch", w))
    return moves
