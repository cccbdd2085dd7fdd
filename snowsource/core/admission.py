"""The order in which backfills are admitted (SPEC §15.2 ``backfill.max.tables``): pure rules.

Explicit tables (``snow.tables``) first, then discovered ones, each by ascending row count (the
Aggregate API's; an unknown count goes last), then by alias so the order is total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["AdmissionKey", "admission_key", "grants"]


@dataclass(frozen=True, order=True)
class AdmissionKey:
    """Sorts waiting tables into admission order."""

    discovered: bool
    rows: float
    alias: str


def admission_key(alias: str, *, explicit: bool, rows: int | None) -> AdmissionKey:
    """The key of ``alias``: explicit before discovered, fewer rows first, unknown counts last."""
    return AdmissionKey(not explicit, math.inf if rows is None else float(rows), alias)


def grants(waiting: list[AdmissionKey], running: int, slots: int) -> list[AdmissionKey]:
    """Which waiting tables to admit now: the first of them in order, as many as slots are free."""
    free = max(slots - running, 0)
    return sorted(waiting)[:free]
