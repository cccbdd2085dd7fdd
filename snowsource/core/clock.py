"""Instance time: the local clock corrected by the drift seen in ServiceNow ``Date`` headers.

Pure bookkeeping, no I/O: the HTTP client feeds every response's ``Date`` header in, the poller
reads ``now()`` to fix a sweep's high-water mark (SPEC §5).

Which drift: behind a load balancer every application node has its own clock, and a row is
stamped by the clock of the node that wrote it. A row can only be visible once that node's clock
has passed its timestamp, so the *slowest* node seen recently bounds what can exist. Taking the
smallest drift of the last minute therefore never puts HI ahead of a node that may still be
writing rows below it; a larger drift would let the cursor move past rows not yet written.

Resolution: a ``Date`` header has one-second resolution and is stamped before the response
travels back. Drift is computed as ``header - local wall clock at receipt`` with the header taken
as the *start* of its second, so the estimate is at most ~1 s plus transit latency *below* the
true drift and never above it: instance time reads early, HI is early, and rows it leaves out
are read by the next sweep. The safety lag (``safety.lag.seconds``) absorbs this bias.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# SPEC §5: "the smallest drift seen in the last minute".
DRIFT_WINDOW_SECONDS = 60.0


class InstanceClock:
    """Local wall clock plus the smallest drift observed in the last ``DRIFT_WINDOW_SECONDS``.

    ``wall`` returns epoch seconds and ``mono`` a monotonic reading; both are injectable for
    tests. Window membership uses ``mono`` so a wall-clock step cannot expire or revive
    observations. When nothing was observed in the window, the newest observation still counts
    (an old estimate beats none). Before any observation ``now()`` is the bare local clock:
    callers computing HI must check ``has_observation`` first (SPEC §5).
    """

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall = wall
        self._mono = mono
        # Monotonic queue of (mono, drift): oldest first, drifts strictly increasing. An
        # observation is dropped as soon as a newer one has a drift <= its own, since it can
        # never be the minimum again; this keeps the sliding-window minimum O(1) amortised
        # and memory bounded no matter how many responses arrive per minute.
        self._window: deque[tuple[float, float]] = deque()

    @property
    def has_observation(self) -> bool:
        """True once at least one ``Date`` header was parsed."""
        return bool(self._window)

    @property
    def drift(self) -> float | None:
        """Seconds to add to the local clock (None before any observation)."""
        self._expire()
        return self._window[0][1] if self._window else None

    def observe_date_header(self, value: str) -> None:
        """Record the drift implied by an RFC 7231 ``Date`` header; ignore unparseable values."""
        try:
            stamped = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        if stamped.tzinfo is None:  # "-0000" parses naive; RFC 7231 dates are GMT anyway
            stamped = stamped.replace(tzinfo=UTC)
        self.observe(stamped.timestamp())

    def observe(self, instance_epoch: float) -> None:
        """Record an instance clock reading (epoch seconds) taken at the current local time."""
        drift = instance_epoch - self._wall()
        now = self._mono()
        while self._window and self._window[-1][1] >= drift:
            self._window.pop()
        self._window.append((now, drift))
        self._expire()

    def now(self) -> datetime:
        """Instance time: local wall clock plus the current drift, as an aware UTC datetime."""
        drift = self.drift
        return datetime.fromtimestamp(self._wall() + (drift or 0.0), tz=UTC)

    def _expire(self) -> None:
        horizon = self._mono() - DRIFT_WINDOW_SECONDS
        # The newest observation stays even when expired: nothing fresher exists to replace it.
        while len(self._window) > 1 and self._window[0][0] < horizon:
            self._window.popleft()
