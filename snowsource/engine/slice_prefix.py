"""The offsets of a sliced backfill (SPEC §14.2): its contiguous acknowledged prefix, committed.

Slices produce out of cursor order, but the table keeps one Connect offset with §4's bytes: the
end of the prefix of the window every row of which Kafka acknowledged. The plan
(``core.backfill_plan.BackfillPlan``) is the one home of that prefix and of "it never moves
back" (``advance``); this module only turns what the plan says into the table's offsets:
committed through the generation's committer whenever the prefix moved (in cursor order with
every other offset of the table), and, with exactly-once, the offset each page's transaction
carries.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from snowsource.core.backfill_plan import BackfillPlan
from snowsource.core.cursor import Position, parse_ts
from snowsource.core.offsets_codec import SourceOffset
from snowsource.core.slices import SliceRange
from snowsource.core.table import TableSpec
from snowsource.engine.recorder import TableRecorder
from snowsource.engine.table_generation import TableGeneration

__all__ = ["SliceOffsets"]


class SliceOffsets:
    """Where a sliced backfill's table stands, as offsets: one per backfill sweep."""

    def __init__(
        self,
        spec: TableSpec,
        gen: TableGeneration,
        recorder: TableRecorder,
        now: Callable[[], datetime],
        plan: BackfillPlan,
    ) -> None:
        self._spec = spec
        self._gen = gen
        self._recorder = recorder
        self._now = now  # instance time, for the lag while backfilling
        self._plan = plan

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

    def for_transaction(self, r: SliceRange, last: Position) -> SourceOffset | None:
        """The offset a page of ``r`` ending at ``last`` commits in its transaction: the prefix
        with this page in, never below the offset committed last. Asked by the transactional
        delivery only when the transactions before this one are committed; it writes no offset
        that is not past what a committed transaction holds."""
        return self.offset(self._plan.for_transaction(r, last))

    def moved(self) -> None:
        """After an event: commit the prefix when it moved, and record the slices' progress."""
        prefix = self._plan.advance()
        if prefix is not None:
            offset = self.offset(prefix)
            assert offset is not None
            self._gen.commit(offset)
            self._gen.cursor = prefix
            lag = (self._now() - parse_ts(prefix.ts)).total_seconds()
            self._recorder.backfilling(lag, cursor=prefix)
        self._recorder.slices(self._plan.progress())
