"""What to do with each row of a page (SPEC §5, §6): the poller's per-row decision, pure.

For one page this checks the ordering guard (every row strictly after the previous one and
inside the requested window, with a usable id and timestamp), asks the dedup cache whether the
row's value was already emitted, spots late commits below the cursor, and gives each emitted row
the offset it carries: the cursor after emitting it, which never moves back. The poller only
sends what this returns and counts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from snowsource.core.cursor import Position, in_window, is_valid_ts
from snowsource.core.dedup import DedupCache, digest
from snowsource.core.errors import TableFailedError
from snowsource.core.offsets_codec import SourceOffset, cursor_id_problem
from snowsource.core.records import RecordShaper
from snowsource.core.table import TableSpec


@dataclass(frozen=True)
class Emit:
    """A row to send: its key position, value bytes and the offset its record carries."""

    position: Position
    value: bytes
    offset: SourceOffset


@dataclass
class PagePlan:
    """The decision for one page, in row order."""

    emits: list[Emit] = field(default_factory=list)
    suppressed: int = 0
    late: int = 0
    last: Position | None = None  # position of the page's last row (where the next page starts)
    cursor: Position | None = None  # the cursor after the page (only emitted rows move it)


def row_position(spec: TableSpec, shaper: RecordShaper, row: dict[str, Any]) -> Position:
    """A row's cursor position; ``TableFailedError`` naming the row when it has none."""
    ident = shaper.raw(row, spec.id_field)
    stamp = shaper.raw(row, spec.timestamp_field)
    if not ident:
        raise TableFailedError(
            f"{spec.describe}: a row has no {spec.id_field!r} value "
            f"(row sys_id={shaper.raw(row, 'sys_id')!r}, "
            f"{spec.id_field}={row.get(spec.id_field)!r}); "
            f"check fields / ACLs of the integration user"
        )
    if stamp is None or not is_valid_ts(stamp):
        raise TableFailedError(
            f"{spec.describe}: row {spec.id_field}={ident} has field "
            f"{spec.timestamp_field!r} = {row.get(spec.timestamp_field)!r}, not a "
            f"YYYY-MM-DD HH:MM:SS timestamp"
        )
    if problem := cursor_id_problem(ident, spec.id_field):
        # Emitting it would commit an offset that no restart could load again.
        raise TableFailedError(f"{spec.describe}: a row's {spec.id_field}: {problem}")
    return Position(stamp, ident)


def page_positions(
    spec: TableSpec,
    shaper: RecordShaper,
    rows: Sequence[dict[str, Any]],
    *,
    after: Position,
    hi: str,
    previous: Position | None,
) -> list[Position]:
    """Positions of a page's rows, enforcing the ordering guard: never emit silently out of
    order, because the cursor would then skip rows."""
    positions: list[Position] = []
    for row in rows:
        pos = row_position(spec, shaper, row)
        if (previous is not None and pos <= previous) or not in_window(pos, after, hi):
            raise TableFailedError(
                f"{spec.describe}: rows out of cursor order: the instance did not honour "
                f"ORDERBY, or the query was rewritten (row {pos.id} at {pos.ts} after "
                f"{previous.ts + '/' + previous.id if previous else '-'}, window after "
                f"{after.ts}/{after.id or '-'} up to {hi})"
            )
        positions.append(pos)
        previous = pos
    return positions


def plan_page(
    spec: TableSpec,
    shaper: RecordShaper,
    rows: Sequence[dict[str, Any]],
    positions: Sequence[Position],
    *,
    phase: str,
    cursor: Position,
    late_floor: Position,
    dedup: DedupCache,
) -> PagePlan:
    """Decide every row of a page (positions from :func:`page_positions`).

    ``dedup`` remembers each emitted row. ``late_floor`` is where this incarnation's cursor
    started: rows below it may have been emitted before a restart (the cache started empty), so
    only rows between it and ``cursor`` are told apart as late commits.
    """
    plan = PagePlan(last=positions[-1] if positions else None, cursor=cursor)
    fingerprint = spec.partition.query_fingerprint
    for row, pos in zip(rows, positions, strict=True):
        value = shaper.value_bytes(row)
        value_digest = digest(value)
        if not dedup.should_emit(pos.id, pos.ts, value_digest):
            plan.suppressed += 1
            continue
        if late_floor <= pos < cursor and not dedup.contains(pos.id):
            plan.late += 1
        dedup.remember(pos.id, pos.ts, value_digest)
        cursor = max(cursor, pos)
        offset = SourceOffset(
            timestamp=cursor.ts, sys_id=cursor.id, phase=phase, fingerprint=fingerprint
        )
        plan.emits.append(Emit(pos, value, offset))
    plan.cursor = cursor
    return plan
