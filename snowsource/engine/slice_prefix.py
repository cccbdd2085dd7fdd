"""The offset of a sliced backfill (SPEC §14.2): its contiguous acknowledged prefix.

Slices produce out of cursor order, but the table keeps one Connect offset with §4's bytes: the
end of the prefix of the window every row of which Kafka acknowledged (``Backfill.prefix``).
This module turns that prefix into the table's offsets: committed through the generation's
committer whenever it moves (in cursor order with every other offset of the table), and, with
exactly-once, the offset each page's transaction carries.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from snowsource.core.cursor import Position, parse_ts
from snowsource.core.offsets_codec import SourceOffset
from snowsource.core.slices import Backfill, SliceRange
from snowsource.core.table import TableSpec
from snowsource.engine.recorder import TableRecorder
from snowsource.engine.table_generation import TableGeneration

__all__ = ["SlicePrefix"]


class SlicePrefix:
    """Where a sliced backfill's table stands, as offsets: one per backfill sweep."""

    def __init__(
        self,
        spec: TableSpec,
        gen: TableGeneration,
        recorder: TableRecorder,
        now: Callable[[], datetime],
    ) -> None:
        self._spec = spec
        self._gen = gen
        self._recorder = recorder
        self._now = now  # instance time, for the lag while backfilling
        self._committed = gen.cursor  # the last prefix committed (the sweep's start at first)

    def offset(self, position: Position | None) -> SourceOffset | None:
        """The backfill offset of ``position`` (``None`` for none)."""
        if position is None:
            return None
        return SourceOffset(
            timestamp=position.ts,
            sys_id=position.id,
            phase="backfill",
            fingerprint=self._spec.partition.query_fingerprint,
        )

    def for_transaction(
        self, board: Backfill, r: SliceRange, last: Position
    ) -> SourceOffset | None:
        """The offset a page of ``r`` ending at ``last`` commits in its transaction: the prefix
        with this page in. It may be below what an earlier transaction committed, whose page
        the board may not count as acknowledged yet: the transactional delivery then writes no
        offset (it knows which transactions committed; an aborted one must not raise a floor)."""
        return self.offset(board.prefix_if_acked(r, last))

    def moved(self, board: Backfill) -> None:
        """After a page: commit the prefix when it moved, and record the slices' progress."""
        prefix = board.prefix()
        if prefix is not None and prefix != self._committed:
            self._committed = prefix
            offset = self.offset(prefix)
            assert offset is not None
            self._gen.commit(offset)
            self._gen.cursor = prefix
            lag = (self._now() - parse_ts(prefix.ts)).total_seconds()
            self._recorder.backfilling(lag, cursor=prefix)
        self._recorder.slices(board.progress())
