"""What the outside world may read about a table at any time (``status``, REST, metrics).

Plain data: the engine's recorder (``engine.recorder``) is the only writer; REST, the health
checks and the CLI read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from snowsource.core.cursor import Position
from snowsource.core.offsets_codec import SourceOffset
from snowsource.core.slices import SliceProgress


class TableState(StrEnum):
    """Per-table state, as shown by ``status`` and the ``snowsource_table_state`` metric."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    # A discovered table the integration user cannot read; probed again at the next discovery.
    SKIPPED = "SKIPPED"
    # Waiting for one of the backfill.max.tables backfill slots (SPEC §15.2).
    QUEUED = "QUEUED"


@dataclass
class TableStatus:
    """A table's state, position, counters and current trouble."""

    state: TableState = TableState.STARTING
    phase: str | None = None
    cursor: Position | None = None
    committed: SourceOffset | None = None
    lag_seconds: float | None = None
    last_error: str | None = None
    # Retried errors too, until what failed works again (``engine.failures``).
    consecutive_failures: int = 0
    failing_since: datetime | None = None
    rows_emitted: int = 0
    rows_suppressed: int = 0
    rows_late: int = 0
    pages: int = 0
    sweeps: int = 0
    caught_up: bool = False
    window_start: str | None = None  # where this generation started reading, for progress bars
    backfill: SliceProgress | None = None  # the sliced backfill's progress while it runs
    hi: str | None = None  # high-water mark of the current sweep
    # Set when a drain ended before every acknowledged offset was written (deadline, outage).
    unfinished: str | None = None
    # While QUEUED: the table's 1-based place in the backfill queue, asked when shown.
    queue_position: Callable[[], int | None] | None = field(default=None, repr=False)

    def queue_place(self) -> int | None:
        """The place in the backfill queue while QUEUED, else None."""
        if self.state != TableState.QUEUED or self.queue_position is None:
            return None
        return self.queue_position()

    def committed_text(self) -> str | None:
        """The committed offset as ``ts/sys_id/phase`` for log lines and diagnostics."""
        c = self.committed
        return f"{c.timestamp}/{c.sys_id or '-'}/{c.phase}" if c else None
