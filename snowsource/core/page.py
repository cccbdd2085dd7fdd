"""What to do with each row of a page (SPEC §5, §6): the poller's per-row decision, pure.

For one page this checks the ordering guard (every row strictly after the previous one and
inside the requested window, with a usable id and timestamp), asks the dedup cache whether the
row's value was already emitted, spots late commits below the cursor, and gives each emitted row
the offset it carries: the cursor after emitting it, which never moves back. The poller only
sends what this returns and counts it.

It runs for every row the daemon reads, so it works on plain ``(ts, id)`` string tuples:
timestamps have a fixed zero-padded format, so string order is time order, and each distinct
timestamp is validated once. Offsets and ``Position`` objects are only built when asked for
(the poller commits one offset per page). Rows older than the dedup window (``keep_from``)
get no digest and no cache entry: they are never read again, so nothing could be suppressed
by remembering them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from snowsource.core.cursor import Position, is_valid_ts
from snowsource.core.dedup import DedupCache, digest
from snowsource.core.errors import TableFailedError
from snowsource.core.offsets_codec import SourceOffset, cursor_id_problem, is_sys_id_field
from snowsource.core.records import RecordShaper
from snowsource.core.table import TableSpec

Key = tuple[str, str]  # (ts, id): a row's cursor position, compared as a string tuple

# Fast paths for the common row, each exactly as strict as the rule it stands in for: a
# timestamp whose time of day is in range and whose date was already found valid, and a sys_id
# that is 32 lowercase hex characters. Anything else takes the full check and its message.
_TS_FAST = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} (?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]")
_SYS_ID_FAST = re.compile(r"[0-9a-f]{32}")


class Emit:
    """A row to send: its key position, value bytes and the cursor its record carries."""

    __slots__ = ("_context", "_cursor", "id", "ts", "value")

    def __init__(
        self, context: tuple[str, str], ts: str, id: str, value: bytes, cursor: Key
    ) -> None:
        # (phase, fingerprint), shared by the page; never the plan itself, which would make a
        # reference cycle per page that only the cyclic collector frees (with the page's values).
        self._context = context
        self.ts = ts
        self.id = id
        self.value = value
        self._cursor = cursor

    @property
    def key(self) -> bytes:
        """The record key: the row's id."""
        return self.id.encode()

    @property
    def position(self) -> Position:
        """The row's own cursor position."""
        return Position(self.ts, self.id)

    @property
    def offset(self) -> SourceOffset:
        """The offset a commit up to and including this record writes."""
        ts, ident = self._cursor
        phase, fingerprint = self._context
        return SourceOffset(timestamp=ts, sys_id=ident, phase=phase, fingerprint=fingerprint)


@dataclass
class PagePlan:
    """The decision for one page, in row order."""

    phase: str = "backfill"
    fingerprint: str = ""
    emits: list[Emit] = field(default_factory=list)
    suppressed: int = 0
    late: int = 0
    last: Position | None = None  # position of the page's last row (where the next page starts)
    cursor: Position | None = None  # the cursor after the page (only emitted rows move it)
    # The offset a transaction carrying this page commits, asked for at its commit; when unset,
    # the last record's (a sliced backfill commits its prefix instead, SPEC §14.2).
    commit_offset: Callable[[], SourceOffset | None] | None = None


def _field(shaper: RecordShaper, row: dict[str, Any], name: str) -> str | None:
    value = row.get(name)
    # The raw response shape (plain strings) is the common one; dicts come with display values.
    return value if type(value) is str else shaper.raw(row, name)


def _valid_ts(stamp: str, valid_dates: set[str]) -> bool:
    if _TS_FAST.fullmatch(stamp) is not None and stamp[:10] in valid_dates:
        return True
    if not is_valid_ts(stamp):
        return False
    valid_dates.add(stamp[:10])
    return True


def _row_key(
    spec: TableSpec, shaper: RecordShaper, row: dict[str, Any], valid_dates: set[str]
) -> Key:
    """``(ts, id)`` of a row, validated; ``valid_dates`` holds dates already found valid."""
    ident = _field(shaper, row, spec.id_field)
    stamp = _field(shaper, row, spec.timestamp_field)
    if not ident:
        raise TableFailedError(
            f"{spec.describe}: a row has no {spec.id_field!r} value "
            f"(row sys_id={shaper.raw(row, 'sys_id')!r}, "
            f"{spec.id_field}={row.get(spec.id_field)!r}); "
            f"check fields / ACLs of the integration user"
        )
    if stamp is None or not _valid_ts(stamp, valid_dates):
        raise TableFailedError(
            f"{spec.describe}: row {spec.id_field}={ident} has field "
            f"{spec.timestamp_field!r} = {row.get(spec.timestamp_field)!r}, not a "
            f"YYYY-MM-DD HH:MM:SS timestamp"
        )
    if is_sys_id_field(spec.id_field) and _SYS_ID_FAST.fullmatch(ident) is not None:
        return stamp, ident
    if problem := cursor_id_problem(ident, spec.id_field):
        # Emitting it would commit an offset that no restart could load again.
        raise TableFailedError(f"{spec.describe}: a row's {spec.id_field}: {problem}")
    return stamp, ident


def page_positions(
    spec: TableSpec,
    shaper: RecordShaper,
    rows: Sequence[dict[str, Any]],
    *,
    after: Position,
    hi: str,
    previous: Position | None,
) -> list[Key]:
    """``(ts, id)`` of a page's rows, enforcing the ordering guard: never emit silently out of
    order, because the cursor would then skip rows."""
    keys: list[Key] = []
    prev: Key | None = (previous.ts, previous.id) if previous is not None else None
    # Rows of the window: strictly after ``after``, or from second ``after.ts`` on when its id
    # is empty (the query then says ``ts>=T``); ``("T", "")`` sorts before every row of T.
    floor: Key = (after.ts, after.id)
    valid_dates: set[str] = set()
    for row in rows:
        key = _row_key(spec, shaper, row, valid_dates)
        if key == prev:
            # Not a misordered instance: the id is not unique (a view that joins several rows
            # to one row of its base table). Keyset paging would skip the repeats.
            raise TableFailedError(
                f"{spec.describe}: two rows share the cursor key {key[0]}/{key[1]}: "
                f"{spec.id_field} is not unique (a database view that joins several rows to one "
                "row of its base table?); read such a view by a table with one row per view "
                "row: list it under snow.tables with that table's prefixed timestamp.field "
                "and id.field"
            )
        if (
            (prev is not None and key <= prev)
            or key[0] > hi
            or key < floor
            or (key == floor and floor[1] != "")
        ):
            raise TableFailedError(
                f"{spec.describe}: rows out of cursor order: the instance did not honour "
                f"ORDERBY, or the query was rewritten (row {key[1]} at {key[0]} after "
                f"{prev[0] + '/' + prev[1] if prev else '-'}, window after "
                f"{after.ts}/{after.id or '-'} up to {hi})"
            )
        keys.append(key)
        prev = key
    return keys


def rows_before(
    spec: TableSpec, shaper: RecordShaper, rows: Sequence[dict[str, Any]], end: str
) -> int:
    """How many leading rows lie before second ``end`` by their timestamps (a parallel backfill
    range's end). A row whose timestamp is not readable counts as before: it is validated,
    never skipped."""
    for index, row in enumerate(rows):
        stamp = _field(shaper, row, spec.timestamp_field)
        if stamp is not None and is_valid_ts(stamp) and stamp >= end:
            return index
    return len(rows)


def plan_page(
    spec: TableSpec,
    shaper: RecordShaper,
    rows: Sequence[dict[str, Any]],
    positions: Sequence[Key],
    *,
    phase: str,
    cursor: Position,
    late_floor: Position,
    dedup: DedupCache,
    keep_from: str | None = None,
    skip: Collection[str] = frozenset(),
) -> PagePlan:
    """Decide every row of a page (positions from :func:`page_positions`).

    ``dedup`` remembers each emitted row from ``keep_from`` on (all of them when ``None``).
    ``late_floor`` is where this incarnation's cursor started: rows below it may have been
    emitted before a restart (the cache started empty), so only rows between it and ``cursor``
    are told apart as late commits. Rows whose id is in ``skip`` are left out like
    suppressed repeats (the stream's hooks said not to emit them).
    """
    plan = PagePlan(phase=phase, fingerprint=spec.partition.query_fingerprint)
    if positions:
        plan.last = Position(*positions[-1])
    cur: Key = (cursor.ts, cursor.id)
    floor: Key = (late_floor.ts, late_floor.id)
    value_bytes = shaper.value_bytes
    emits = plan.emits
    context = (phase, plan.fingerprint)
    known = dedup.contains
    for row, key in zip(rows, positions, strict=True):
        ts, ident = key
        if ident in skip:
            plan.suppressed += 1
            continue
        value = value_bytes(row)
        if keep_from is not None and ts < keep_from and not known(ident):
            # Outside the re-read window and never emitted in this incarnation: it is new.
            if floor <= key < cur:
                plan.late += 1
        else:
            value_digest = digest(value)
            if not dedup.should_emit(ident, ts, value_digest):
                plan.suppressed += 1
                shaper.forget(ident)
                continue
            if floor <= key < cur and not known(ident):
                plan.late += 1
            dedup.remember(ident, ts, value_digest)
        cur = max(cur, key)
        emits.append(Emit(context, ts, ident, value, cur))
    plan.cursor = cursor if cur == (cursor.ts, cursor.id) else Position(*cur)
    return plan
