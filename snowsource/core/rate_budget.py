"""How fast the process may send ServiceNow requests under an hourly rate budget (SPEC §15.3).

Pure: the caller passes the time. A real instance enforces rate-limit rules per user and per
hour (``sys_rate_limit_rules``) and, when a rule applies, sends ``X-RateLimit-Limit`` (requests
per hour) and ``X-RateLimit-Reset`` (the epoch at which the window ends) with every answer.
Over the limit it answers 429 until the reset, and those answers count too. So the client paces
itself to spend at most ``1 - headroom`` of the budget, evenly:

- With the headers, the window ends at ``X-RateLimit-Reset`` (the header is trusted, not an
  assumed hour) and the allowance still unspent in it is spread evenly until then. Requests this
  process sent earlier in the same window count as spent; requests of other clients of the
  same user cannot be seen, which is what the headroom is for.
- With only ``snow.http.max.requests.per.hour``, a rolling hour at an even rate.
- Both: the smaller rate wins. In group mode each member takes ``1 / members`` of it.

"Evenly" is a token bucket: tokens accrue at the paced rate up to ``burst`` (the concurrency
limit), one per request, so in any interval at most ``rate * length + burst`` requests start.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

__all__ = ["BudgetStatus", "RateBudget"]

HOUR = 3600.0
#: A ``Date`` header's resolution: a window's end on the local clock is known to this much.
DATE_RESOLUTION = 1.0
# How long request start times are kept: a window's end is known to DATE_RESOLUTION, and an
# answer naming the next window may come a few seconds after it.
_RECENT_SECONDS = 30.0


@dataclass(frozen=True)
class BudgetStatus:
    """The budget now, as ``/status`` and the metrics show it (None: no budget applies)."""

    per_hour: float | None  # this process's paced share, requests per hour
    limit_per_hour: int | None  # the instance's X-RateLimit-Limit, when it sent one
    window_ends: float | None  # X-RateLimit-Reset (epoch seconds), when known
    used_in_window: int  # requests this process sent in the current window
    waited_seconds: float  # total time requests waited for the budget

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready."""
        return {
            "per_hour": None if self.per_hour is None else round(self.per_hour, 1),
            "limit_per_hour": self.limit_per_hour,
            "window_ends": self.window_ends,
            "used_in_window": self.used_in_window,
            "waited_seconds": round(self.waited_seconds, 3),
        }


@dataclass
class RateBudget:
    """The pacing state of one process. ``max_per_hour``: ``snow.http.max.requests.per.hour``."""

    max_per_hour: int | None = None
    headroom: float = 0.1
    burst: int = 8
    members: int = 1
    _limit: int | None = field(default=None, init=False)
    _window: float | None = field(default=None, init=False)  # X-RateLimit-Reset as sent
    _reset: float | None = field(default=None, init=False)  # when it ends, on our clock
    _used: int = field(default=0, init=False)  # sent in the header window ending at _reset
    # When the latest requests started: the ones near a window's end may belong to the next.
    _recent: deque[float] = field(default_factory=deque, init=False)
    _tokens: float = field(default=0.0, init=False)
    _last: float | None = field(default=None, init=False)
    _waited: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not 0 <= self.headroom < 1:
            raise ValueError(f"headroom must be in [0, 1), got {self.headroom}")
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1, got {self.burst}")
        if self.max_per_hour is not None and self.max_per_hour < 1:
            raise ValueError(f"max_per_hour must be >= 1, got {self.max_per_hour}")
        self._tokens = float(self.burst)

    # ---- what the instance says -----------------------------------------------------------

    def observe(
        self, limit: int | None, window: float | None, now: float, *, ends: float | None = None
    ) -> None:
        """An answer's ``X-RateLimit-Limit`` and ``X-RateLimit-Reset`` (``window``, as sent: it
        names the window). ``ends``: when that is on this process's clock (default: the same
        value). A new ``window`` starts a new count; of the answers of one window, the earliest
        end estimate is kept (each reads late by up to the ``Date`` header's one second, which
        errs on the side of a slower pace)."""
        if limit is None or window is None or limit < 1:
            return
        self._refill(now)
        end = window if ends is None else ends
        if window != self._window:
            if self._window is not None and window < self._window:
                return  # a late answer from the window before: ignore it
            # The old window's end was known to a second at best (its answers' Date headers):
            # requests sent in its last second may be the new window's already, so they count
            # there too (counted twice rather than not at all).
            since = (self._reset if self._reset is not None else now) - DATE_RESOLUTION
            self._used = sum(1 for started in self._recent if started >= since)
            self._window, self._reset = window, end
        elif self._reset is None or end < self._reset:
            self._reset = end
        self._limit = limit

    def set_members(self, members: int) -> None:
        """How many processes share the budget (group members alive now)."""
        self.members = max(1, members)

    # ---- pacing ---------------------------------------------------------------------------

    def rate(self, now: float) -> float | None:
        """Requests per second this process may send now; None when no budget applies."""
        rates: list[float] = []
        share = (1 - self.headroom) / self.members
        if self.max_per_hour is not None:
            rates.append(self.max_per_hour * share / HOUR)
        if self._limit is not None and self._reset is not None and now < self._reset:
            # The allowance still unspent, spread evenly until the window's end. Once that end
            # has passed the rule counts afresh: nothing binds until an answer names the next.
            allowance = self._limit * share - self._used
            rates.append(max(0.0, allowance) / (self._reset - now))
        return min(rates) if rates else None

    def delay(self, now: float) -> float:
        """Seconds before the next request may start (0: now)."""
        self._refill(now)
        if self._tokens >= 1:
            return 0.0
        rate = self.rate(now)
        if rate is None:
            return 0.0
        if rate <= 0:
            # Nothing left in this window: wait for its end (then the next answer says more).
            assert self._reset is not None
            return max(self._reset - now, 0.001)
        return (1 - self._tokens) / rate

    def spend(self, now: float) -> None:
        """One request starts now."""
        self._refill(now)
        self._tokens -= 1
        self._recent.append(now)
        while self._recent and self._recent[0] < now - _RECENT_SECONDS:
            self._recent.popleft()
        if self._reset is not None and now < self._reset:
            self._used += 1

    def waited(self, seconds: float) -> None:
        """Requests waited ``seconds`` for the budget (for the metrics)."""
        self._waited += max(0.0, seconds)

    def status(self, now: float) -> BudgetStatus:
        """The budget now."""
        rate = self.rate(now)
        return BudgetStatus(
            per_hour=None if rate is None else rate * HOUR,
            limit_per_hour=self._limit,
            window_ends=self._reset,
            used_in_window=self._used,
            waited_seconds=self._waited,
        )

    def _refill(self, now: float) -> None:
        last, self._last = self._last, now
        if last is None or now <= last:
            return
        rate = self.rate(now)
        if rate is None:
            self._tokens = float(self.burst)
        elif not math.isinf(rate):
            self._tokens = min(float(self.burst), self._tokens + rate * (now - last))
