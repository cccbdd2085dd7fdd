"""The committed offset reaches the end of every completed sweep (issue 27).

``TableGeneration.sweep_read`` is the one place that moves the offset past rows a sweep left
out: these tests drive it with a recording committer target, no Kafka involved (the real
broker tests are in ``tests/integration/test_restart_dedup.py`` and ``test_races_deletes.py``).
"""

from __future__ import annotations

import asyncio

import structlog

from snowsource.core.cursor import Position
from snowsource.core.offsets_codec import SourceOffset, SourcePartition
from snowsource.core.table_status import TableStatus
from snowsource.engine.recorder import TableRecorder
from snowsource.engine.table_generation import TableGeneration
from snowsource.runtime.deadline import Deadline, StopSignal
from tests.fakes import make_spec

ROW = Position("2026-09-29 07:00:10", "b" * 32)


class Written:
    """An ``OffsetCommits`` that records what the committer writes."""

    def __init__(self) -> None:
        self.offsets: list[SourceOffset] = []

    async def commit(
        self, partition: SourcePartition, offset: SourceOffset, *, deadline: Deadline | None
    ) -> None:
        del partition, deadline
        self.offsets.append(offset)


def _generation(
    committed: SourceOffset | None, written: Written, stop: StopSignal
) -> TableGeneration:
    spec = make_spec("incident")
    recorder = TableRecorder("incident", TableStatus(), structlog.get_logger("test"))
    return TableGeneration(spec, committed, offsets=written, stop=stop, recorder=recorder)


def _offset(position: Position, phase: str) -> SourceOffset:
    fingerprint = make_spec("incident").partition.query_fingerprint
    return SourceOffset(position.ts, position.id, phase, fingerprint)


async def _run(gen: TableGeneration) -> None:
    """Let the committer write everything queued (a closed committer writes what is
    committable, then ends)."""
    gen.committer.close()
    await asyncio.wait_for(gen.committer.run(), timeout=5)


async def test_a_sweep_that_emitted_nothing_commits_its_last_row_read() -> None:
    written, stop = Written(), StopSignal()
    earlier = Position("2026-09-29 07:00:05", "a" * 32)
    gen = _generation(_offset(earlier, "stream"), written, stop)
    gen.sweep_read(ROW, phase="stream")
    await _run(gen)
    assert written.offsets == [_offset(ROW, "stream")]
    assert gen.cursor == ROW


async def test_a_sweep_that_moved_nothing_writes_nothing() -> None:
    written, stop = Written(), StopSignal()
    gen = _generation(_offset(ROW, "stream"), written, stop)
    gen.sweep_read(Position("2026-09-29 07:00:09", "c" * 32), phase="stream")  # the overlap
    gen.sweep_read(ROW, phase="stream")
    gen.sweep_read(None, phase="stream")
    await _run(gen)
    assert written.offsets == []
    assert gen.cursor == ROW


async def test_the_stream_mark_still_comes_when_only_the_phase_moved() -> None:
    written, stop = Written(), StopSignal()
    gen = _generation(_offset(ROW, "backfill"), written, stop)
    gen.sweep_read(ROW, phase="stream")
    await _run(gen)
    assert written.offsets == [_offset(ROW, "stream")]


async def test_a_sliced_backfills_end_keeps_saying_backfill() -> None:
    written, stop = Written(), StopSignal()
    gen = _generation(None, written, stop)
    gen.sweep_read(ROW, phase="backfill")
    await _run(gen)
    assert written.offsets == [_offset(ROW, "backfill")]


async def test_a_member_whose_lease_is_gone_commits_nothing_at_a_sweeps_end() -> None:
    written = Written()
    stop = StopSignal(lambda: "the group gave the table to another member")
    gen = _generation(None, written, stop)
    gen.sweep_read(ROW, phase="stream")
    await _run(gen)
    assert written.offsets == []
