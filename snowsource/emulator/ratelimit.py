"""Inbound REST rate-limit rules (``sys_rate_limit_rules``), counted per user per clock hour.

No I/O. Precedence follows ``servicenow-table-api.md`` §3.3: a rule for the user beats a role
rule (the lowest limit among the user's roles wins), which beats an all-users rule. Windows are
whole hours of the emulator clock; ``X-RateLimit-Reset`` is the epoch of the next window.
"""

from __future__ import annotations

import dataclasses
import math

from snowsource.emulator.auth import User


@dataclasses.dataclass(frozen=True)
class RateLimitRule:
    """``limit_per_hour`` requests for a user, a role, or everyone; optionally one table."""

    sys_id: str
    limit_per_hour: int
    user: str | None = None
    role: str | None = None
    table: str | None = None


@dataclasses.dataclass(frozen=True)
class RateDecision:
    """The rule that applies to a request and whether the request may proceed."""

    rule: RateLimitRule
    reset_epoch: int
    allowed: bool
    retry_after: int

    def headers(self) -> dict[str, str]:
        """The ``X-RateLimit-*`` headers sent with every request a rule applies to."""
        return {
            "X-RateLimit-Limit": str(self.rule.limit_per_hour),
            "X-RateLimit-Reset": str(self.reset_epoch),
            "X-RateLimit-Rule": self.rule.sys_id,
        }


class RateLimiter:
    """Rules plus per-(rule, user, window) counters.

    ``window_seconds`` is an hour on a real instance; tests compress it (a rule of N requests
    "per hour" then allows N per window, and ``X-RateLimit-Reset`` names the window's end)."""

    def __init__(self, window_seconds: float = 3600.0) -> None:
        if window_seconds <= 0:
            raise ValueError("window_seconds must be > 0")
        self.window_seconds = window_seconds
        self.rules: list[RateLimitRule] = []
        self._counts: dict[tuple[str, str, int], int] = {}

    def add(self, rule: RateLimitRule) -> None:
        """Add a rule."""
        self.rules.append(rule)

    def clear(self) -> None:
        """Remove every rule and counter."""
        self.rules.clear()
        self._counts.clear()

    def _rule_for(self, user: User, table: str) -> RateLimitRule | None:
        applicable = [r for r in self.rules if r.table is None or r.table == table]
        own = [r for r in applicable if r.user == user.name]
        if own:
            return min(own, key=lambda r: r.limit_per_hour)
        roles = [r for r in applicable if r.role is not None and r.role in user.roles]
        if roles:
            return min(roles, key=lambda r: r.limit_per_hour)
        everyone = [r for r in applicable if r.user is None and r.role is None]
        if everyone:
            return min(everyone, key=lambda r: r.limit_per_hour)
        return None

    def check(self, user: User, table: str, now: float) -> RateDecision | None:
        """Count one request; None when no rule applies (then no headers are sent)."""
        rule = self._rule_for(user, table)
        if rule is None:
            return None
        window = int(now // self.window_seconds)
        reset = math.ceil((window + 1) * self.window_seconds)
        key = (rule.sys_id, user.name, window)
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        return RateDecision(
            rule=rule,
            reset_epoch=reset,
            allowed=count <= rule.limit_per_hour,
            retry_after=max(1, math.ceil(reset - now)),
        )
