"""A sliced backfill's offsets: the prefix committed as it moves, a transaction's offset.

With exactly-once a page's transaction commits the page and the prefix with it together, before
the plan hears of the page's acks; it never carries an offset below the one committed last (the
plan's ``advance`` is the one place the offset moves), and the transactional delivery keeps a
later, lower offset from moving the offsets topic back (``tests/unit/test_txn_delivery.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import structlog

from snowsource.core.backfill_plan import BackfillPlan
from snowsource.core.cursor import Position
from snowsource.core.offsets_codec import SourceOffset, SourcePartition
from snowsource.core.slices import Backfill, SliceRange, shift_ts
from snowsource.core.table_status import TableStatus
from snowsource.engine.recorder import TableRecorder
from snowsource.engine.slice_prefix import SliceOffsets
from snowsource.engine.table_generation import TableGeneration
from snowsource.runtime.deadline import Deadline, StopSignal
from tests.fakes import make_spec

T0 = "2026-01-01 00:00:00"


def ts(second: int) -> str:
    return shift_ts(T0, second)


class _NoOffsets:
    async def commit(
        self, partition: SourcePartition, offset: SourceOffset, *, deadline: Deadline | None
    ) -> None:
        raise AssertionError("the committer does not run in these tests")


def _prefix() -> tuple[SliceOffsets, TableGeneration, Backfill, SliceRange, SliceRange]:
    spec = make_spec(backfill_slices=2, start_timestamp=T0)
    recorder = TableRecorder(spec.alias, TableStatus(), structlog.get_logger("test"))
    gen = TableGeneration(spec, None, offsets=_NoOffsets(), stop=StopSignal(), recorder=recorder)
    board = Backfill(Position(ts(0), ""), ts(39), slices=2, max_ahead=100, committed=gen.cursor,
                     ranges_per_slice=1)  # fmt: skip
    first, second = board.take(0), board.take(1)
    assert first is not None
    assert second is not None
    plan = BackfillPlan(board, page_rows=2)
    prefix = SliceOffsets(spec, gen, recorder, lambda: datetime(2026, 1, 2, tzinfo=UTC), plan)
    return prefix, gen, board, first, second


def _page(board: Backfill, r: SliceRange, *keys: tuple[str, str]) -> Position | None:
    """A page of ``keys`` for ``r``, asked for 2 rows (a page of 2 keeps ``r`` open)."""
    board.reserve(r, 2)
    board.arrived(r, list(keys), 2)
    return Position(*keys[-1]) if keys else None


def _at(offset: SourceOffset | None) -> tuple[str, str] | None:
    return None if offset is None else (offset.timestamp, offset.sys_id)


def test_a_transaction_carries_the_prefix_with_its_own_page_in() -> None:
    prefix, _, board, first, second = _prefix()
    ahead = _page(board, second, (ts(25), "x"), (ts(26), "y"))
    assert ahead is not None
    # The first range holds it back: the offset stays at the sweep's start.
    assert _at(prefix.for_transaction(second, ahead)) == (ts(0), "")
    last = _page(board, first, (ts(3), "a"), (ts(7), "b"))
    assert last is not None
    offset = prefix.for_transaction(first, last)
    assert offset is not None
    assert (offset.timestamp, offset.sys_id, offset.phase) == (ts(7), "b", "backfill")
    assert first.pending == 1, "asking must not count the page as acknowledged"


def test_a_later_transaction_never_carries_less_than_the_committed_offset() -> None:
    prefix, _, board, first, second = _prefix()
    last = _page(board, first, (ts(3), "a"), (ts(7), "b"))
    assert last is not None
    assert _at(prefix.for_transaction(first, last)) == (ts(7), "b")
    # The second range's page commits before the plan heard of the first page's acks: its
    # prefix is the start again, and the delivery (which knows whether the first transaction
    # committed; an aborted one must not raise a floor) writes no offset that low.
    ahead = _page(board, second, (ts(25), "x"), (ts(26), "y"))
    assert ahead is not None
    assert _at(prefix.for_transaction(second, ahead)) == (ts(0), "")
    # Once the first page's acks moved the committed offset, no transaction carries less.
    board.acked(first, last)
    prefix.moved()
    assert _at(prefix.for_transaction(second, ahead)) == (ts(7), "b")


def test_the_prefix_is_committed_once_each_time_it_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, gen, board, first, second = _prefix()
    committed: list[SourceOffset] = []
    monkeypatch.setattr(gen, "commit", committed.append)
    ahead = _page(board, second, (ts(25), "x"), (ts(26), "y"))
    board.acked(second, ahead)
    prefix.moved()
    assert committed == []  # the first range holds it back
    last = _page(board, first, (ts(3), "a"), (ts(7), "b"))
    board.acked(first, last)
    prefix.moved()
    prefix.moved()
    assert [_at(o) for o in committed] == [(ts(7), "b")]
    assert gen.cursor == last
    _page(board, first)  # the first range ends: the second one's page joins the prefix
    prefix.moved()
    assert [_at(o) for o in committed] == [(ts(7), "b"), (ts(26), "y")]
    assert gen.cursor == ahead
