"""Retry timing as small policy objects (SPEC §9, STYLE habit 4).

Pure, no I/O and no sleeping: the caller asks how long to wait and sleeps on its own stop event,
so shutdown wakes it at once.

- ``RetryPolicy``: full-jitter exponential backoff, honouring a server's ``Retry-After``.
- ``PageSizer``: a table's adaptive page size after "maximum execution time exceeded".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

# A Retry-After longer than this is not obeyed as such: a hostile or buggy header ("come back in
# a day") must not park a table silently. Five minutes still respects any realistic rate-limit
# window; when max_backoff is configured larger, that larger value is the cap.
RETRY_AFTER_CAP_SECONDS = 300.0

# Past this exponent the doubling has long saturated any sane max_backoff; stopping here keeps
# 2**attempt from overflowing a float on a table that has been retrying for days.
_MAX_EXPONENT = 62


@dataclass(frozen=True)
class KafkaRetries:
    """The retry policies of Kafka work, each its own (``kafka.retry.*``)."""

    offsets: RetryPolicy
    transactions: RetryPolicy
    tail: RetryPolicy


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff knobs in seconds (``snow.http.retry.initial/max.backoff.ms`` divided by 1000)."""

    initial_backoff: float
    max_backoff: float

    def __post_init__(self) -> None:
        for name in ("initial_backoff", "max_backoff"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    @property
    def retry_after_cap(self) -> float:
        """The longest wait a ``Retry-After`` can impose: ``max(max_backoff, 300 s)``."""
        return max(self.max_backoff, RETRY_AFTER_CAP_SECONDS)

    def next_delay(
        self,
        attempt: int,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Seconds to wait before retry number ``attempt`` (0 for the first retry).

        Without ``retry_after``: full jitter, ``uniform(0, min(max_backoff, initial * 2**attempt))``
        — spreads many tables' retries apart instead of letting them hit the instance in step.

        With ``retry_after`` (a 429's header, in seconds): wait what the instance asked, at least
        ``initial_backoff`` and at most ``retry_after_cap``. The floor exists because SPEC §9 says
        a 429 is never a hot loop, and ``Retry-After: 0`` (or a negative value from a skewed
        clock) repeated by a saturated instance would otherwise be one. A NaN is treated as
        absent.
        """
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        if retry_after is not None and not math.isnan(retry_after):
            return min(self.retry_after_cap, max(retry_after, self.initial_backoff))
        ceiling = min(self.max_backoff, self.initial_backoff * 2.0 ** min(attempt, _MAX_EXPONENT))
        return (rng or random).uniform(0.0, ceiling)


# SPEC §9: never ask for fewer rows than this; the caller backs off instead.
MIN_PAGE_SIZE = 10
# SPEC §9: consecutive good pages needed before the page size doubles again.
GROW_AFTER_SUCCESSES = 20


@dataclass
class PageSizer:
    """A table's current ``sysparm_limit`` (SPEC §9).

    Starts at ``batch_size``. ``shrink()`` halves it after a 500 "maximum execution time
    exceeded", down to ``MIN_PAGE_SIZE``; ``success()`` after each good page doubles it back
    (capped at ``batch_size``) once ``GROW_AFTER_SUCCESSES`` pages in a row succeeded.
    """

    batch_size: int
    _size: int = field(init=False)
    _streak: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        self._size = self.batch_size

    @property
    def size(self) -> int:
        """Rows to ask for in the next page."""
        return self._size

    @property
    def floor(self) -> int:
        """The smallest page: ``MIN_PAGE_SIZE``, or ``batch_size`` when that is already smaller."""
        return min(MIN_PAGE_SIZE, self.batch_size)

    def shrink(self) -> bool:
        """Halve the page (not below ``floor``). False when already at the floor: back off."""
        self._streak = 0
        if self._size <= self.floor:
            return False
        self._size = max(self.floor, self._size // 2)
        return True

    def success(self) -> None:
        """Count a good page; the 20th in a row doubles a shrunk page size (up to batch_size)."""
        if self._size >= self.batch_size:
            self._streak = 0
            return
        self._streak += 1
        if self._streak >= GROW_AFTER_SUCCESSES:
            self._size = min(self.batch_size, self._size * 2)
            self._streak = 0

    def failure(self) -> None:
        """Another failed request breaks the run of consecutive good pages (size unchanged)."""
        self._streak = 0
