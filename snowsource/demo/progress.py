"""What one table's line says: state, backfill progress and ETA, lag, the last warning.

Pure: fed with what the demo read back from Kafka (rows, backlog) and from the daemon's log
lines (``apply_event``), tested without processes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

BAR_WIDTH: Final = 24
# Records in the topic the demo has not read back yet, below which it has seen them all (the
# ongoing activity keeps a few in flight).
CAUGHT_UP_BACKLOG: Final = 50


class RateEstimate:
    """Rows per second over a sliding window, exponentially smoothed.

    ``None`` until ``min_seconds`` of history and ``min_rows`` delivered: the first page or two
    of a backfill say little about its speed, and an ETA extrapolated from them reads like
    ``1h 40m`` for a table that finishes in half a minute.
    """

    def __init__(
        self,
        *,
        window: float = 10.0,
        min_seconds: float = 3.0,
        min_rows: int = 200,
        smoothing: float = 0.3,
    ) -> None:
        self._window = window
        self._min_seconds = min_seconds
        self._min_rows = min_rows
        self._smoothing = smoothing
        self._samples: deque[tuple[float, int]] = deque()
        self._first: tuple[float, int] | None = None
        self.value: float | None = None

    def add(self, now: float, rows: int) -> None:
        """Record that ``rows`` had been delivered at monotonic time ``now``."""
        if self._first is None:
            self._first = (now, rows)
        self._samples.append((now, rows))
        # Keep one sample older than the window as its left edge.
        while len(self._samples) > 2 and self._samples[1][0] <= now - self._window:
            self._samples.popleft()
        t0, r0 = self._samples[0]
        started, first_rows = self._first
        if now - started < self._min_seconds or rows - first_rows < self._min_rows:
            return
        if now - t0 <= 0:
            return
        raw = (rows - r0) / (now - t0)
        self.value = (
            raw
            if self.value is None
            else (self._smoothing * raw + (1 - self._smoothing) * self.value)
        )


@dataclass
class TableView:
    """Everything the demo knows about one table."""

    alias: str
    topic: str
    query: str
    total: int | None = None  # rows matching the base query (the backfill's target)
    rows: int = 0  # records that reached Kafka during this run, read back
    backlog: int | None = None  # records in the topic not read back yet
    phase: str = "starting"  # the daemon's, from its sweep lines
    lag_s: float | None = None
    cursor: str | None = None
    sweeps: int = 0
    failed: str | None = None
    warning: str | None = None  # the last warning the daemon logged for this table
    warnings: int = 0
    rate: RateEstimate = field(default_factory=RateEstimate)

    @property
    def state(self) -> str:
        """FAILED; stream once the daemon caught up *and* the demo has read back what it
        produced (before that, thousands of rows may still be arriving); backfill while rows
        arrive; starting before the first one."""
        if self.failed:
            return "FAILED"
        if (
            self.phase == "stream"
            and self.backlog is not None
            and self.backlog <= CAUGHT_UP_BACKLOG
        ):
            return "stream"
        return "backfill" if self.rows else "starting"

    def eta(self) -> float | None:
        """Seconds until the backfill reaches ``total``, once the rate is trustworthy."""
        rate = self.rate.value
        if self.total is None or not rate or rate <= 0:
            return None
        return max(self.total - self.rows, 0) / rate


def human_seconds(seconds: float | None) -> str:
    """``2.1s``, ``4m 10s``, ``3h 05m``, ``12d 04h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def progress_bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[█████░░░░░]``."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    return "[" + "█" * filled + "░" * (width - filled) + "]"


def table_line(view: TableView, width: int) -> str:
    """One table's status line, cut to ``width``."""
    state = view.state
    head = f"{view.alias:<15} {state:<9}"
    if state == "FAILED":
        return f"{head} {view.failed}"[:width]
    if state == "stream":
        body = f"{view.rows:>7,} rows  sweeps {view.sweeps}  lag {human_seconds(view.lag_s)}"
    elif state == "backfill":
        rate = view.rate.value
        speed = f"{rate:>6,.0f} rows/s" if rate else "     - rows/s"
        eta = view.eta()
        when = f"ETA {human_seconds(eta)}" if eta is not None else "ETA estimating"
        if view.total:
            fraction = min(view.rows / view.total, 0.99)
            body = (
                f"{progress_bar(fraction)} {fraction * 100:3.0f}%  "
                f"{view.rows:>7,}/{view.total:,} rows  {speed}  {when}"
            )
        else:
            body = f"{view.rows:>7,} rows  {speed}"
    else:
        body = "waiting for the first rows"
    if view.warning:
        body += f"  ! {view.warning}"
    return f"{head} {body}"[:width]


def summary_line(views: list[TableView]) -> str:
    """All tables in one line (the headless mode's periodic summary)."""
    parts = []
    for view in views:
        state = view.state
        if state == "backfill" and view.total:
            eta = view.eta()
            extra = f"{min(view.rows / view.total, 0.99) * 100:.0f}%"
            extra += f", ETA {human_seconds(eta)}" if eta is not None else ""
        elif state == "stream":
            extra = f"stream, lag {human_seconds(view.lag_s)}"
        else:
            extra = state
        parts.append(f"{view.alias} {view.rows:,} ({extra})")
    return "rows to Kafka: " + "; ".join(parts)


def _compact(event: dict[str, Any]) -> str:
    text = str(event.get("event") or "warning")
    error = event.get("error")
    if error:
        text += f": {error}"
    return " ".join(text.split())


def apply_event(views: dict[str, TableView], event: dict[str, Any]) -> str | None:
    """Update the views from one daemon log line; a message worth showing above them, if any."""
    name = event.get("event")
    level = event.get("level")
    view = views.get(str(event.get("table")))
    if name == "sweep" and view is not None:
        view.sweeps += 1
        view.phase = str(event.get("phase") or view.phase)
        lag = event.get("lag_s")
        view.lag_s = float(lag) if isinstance(lag, int | float) else view.lag_s
        view.cursor = str(event.get("cursor") or view.cursor or "")
        return None
    if name == "table FAILED" and view is not None:
        view.failed = str(event.get("error") or "failed")
        return f"{view.alias} FAILED: {view.failed}"
    if level == "warning" and view is not None:
        view.warning = _compact(event)
        view.warnings += 1
        return None
    if level in ("warning", "error", "critical") and view is None:
        return f"snowsource {level}: {_compact(event)}"
    return None
