"""One table's counters: its status and its Prometheus series, updated together.

The poller says what happened (a page was read, a page was delivered, the sweep caught up);
this is the one place that turns that into ``TableStatus`` fields and metric samples, the way
Kafka Connect's ``SourceTaskMetricsGroup`` sits beside its ``WorkerSourceTask``.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from snowsource.core.cursor import Position
from snowsource.core.offsets_codec import SourceOffset
from snowsource.core.outbound import PageAck
from snowsource.core.page import PagePlan
from snowsource.core.slices import SliceProgress
from snowsource.core.table_status import TableState, TableStatus
from snowsource.observability import metrics


@dataclass
class SweepCounts:
    """What one sweep did, for its log line."""

    emitted: int = 0
    suppressed: int = 0
    late: int = 0
    pages: int = 0


class TableRecorder:
    """Writes one table's status and metrics; nothing else writes either."""

    def __init__(self, alias: str, status: TableStatus, log: structlog.typing.FilteringBoundLogger):
        self._alias = alias
        self.status = status
        self._log = log

    def state(self, state: TableState) -> None:
        self.status.state = state
        metrics.set_state(self._alias, state.value)

    def generation_began(
        self, committed: SourceOffset | None, cursor: Position, window_start: Position
    ) -> None:
        """A fresh generation: what the last one knew about position and progress is gone."""
        status = self.status
        status.committed = committed
        status.cursor = cursor
        status.window_start = window_start.ts
        status.caught_up = False
        status.lag_seconds = None
        status.hi = None
        status.unfinished = None
        self.phase(committed.phase if committed else "backfill")

    def phase(self, phase: str) -> None:
        self.status.phase = phase
        metrics.set_phase(self._alias, phase)

    def lag(self, seconds: float) -> None:
        self.status.lag_seconds = seconds
        metrics.LAG_SECONDS.labels(table=self._alias).set(seconds)

    def sweep_began(self, hi: str) -> None:
        self.status.hi = hi

    def sweep_ended(self, *, caught_up: bool) -> None:
        self.status.sweeps += 1
        if caught_up:
            self.status.caught_up = True

    def swept(
        self, counts: SweepCounts, seconds: float, *, lag: float, cursor: Position, hi: str
    ) -> None:
        """A sweep read its range to the end: its lag, and one log line for it."""
        self.lag(lag)
        self._log.info(
            "sweep",
            rows_emitted=counts.emitted,
            rows_suppressed=counts.suppressed,
            rows_late=counts.late,
            pages=counts.pages,
            duration_s=round(seconds, 3),
            lag_s=round(lag, 1),
            phase=self.status.phase,
            cursor=f"{cursor.ts}/{cursor.id or '-'}",
            hi=hi,
        )

    def page_read(self, counts: SweepCounts) -> None:
        counts.pages += 1
        self.status.pages += 1
        metrics.PAGES.labels(table=self._alias).inc()

    def page_delivered(
        self, counts: SweepCounts, cursor: Position, plan: PagePlan, ack: PageAck | None
    ) -> int:
        """A page was decided and its acknowledged prefix handed to the committer; the
        records acknowledged (those Kafka refused count as produce errors)."""
        status, alias = self.status, self._alias
        emitted = ack.acked if ack is not None else 0
        suppressed, late = plan.suppressed, plan.late
        status.cursor = cursor
        counts.emitted += emitted
        counts.suppressed += suppressed
        counts.late += late
        status.rows_emitted += emitted
        status.rows_suppressed += suppressed
        status.rows_late += late
        metrics.ROWS_EMITTED.labels(table=alias).inc(emitted)
        if suppressed:
            metrics.ROWS_SUPPRESSED.labels(table=alias).inc(suppressed)
        if late:
            metrics.ROWS_LATE.labels(table=alias).inc(late)
        if ack is not None and ack.failure is not None:
            metrics.PRODUCE_ERRORS.labels(table=alias).inc(ack.records - ack.acked)
        return emitted

    def backfilling(self, lag: float, cursor: Position | None = None) -> None:
        """A full page (or a sliced backfill's prefix moved to ``cursor``): more rows wait."""
        if cursor is not None:
            self.status.cursor = cursor
        self.status.caught_up = False
        self.phase("backfill")
        self.lag(max(lag, 0.0))

    def slices(self, progress: SliceProgress | None) -> None:
        """The sliced backfill's progress (``None`` once it ended): status and gauges."""
        self.status.backfill = progress
        alias = self._alias
        metrics.BACKFILL_SLICES_ACTIVE.labels(table=alias).set(
            progress.slices_active if progress else 0
        )
        metrics.BACKFILL_ROWS_AHEAD.labels(table=alias).set(progress.rows_ahead if progress else 0)

    def committed(self, offset: SourceOffset) -> None:
        self.status.committed = offset
        metrics.OFFSETS_COMMITTED.labels(table=self._alias).inc()

    def unfinished(self, reason: str) -> None:
        self.status.unfinished = reason
        self._log.warning("drain incomplete", reason=reason)

    def evicted(self, evicted: int, max_entries: int) -> None:
        if evicted:
            metrics.DEDUP_EVICTIONS.labels(table=self._alias).inc(evicted)
            self._log.warning(
                "dedup cache full: oldest entries evicted; overlap rows may be re-emitted "
                "(raise dedup.max.entries above the rows changed per overlap window)",
                evicted=evicted,
                max_entries=max_entries,
            )
