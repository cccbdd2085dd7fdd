"""Versioned record storage: what a query can see at a given instant.

No I/O. Each row keeps a short list of versions ``(visible_from, values)``; ``values`` is an
immutable-by-convention ``dict[str, str]`` (``None`` marks a delete). A read at time ``t`` sees,
per row, the newest version whose ``visible_from <= t``. That one rule gives three behaviours the
emulator needs: late-visible writes (``visible_from`` in the future), a lagging read replica
(read at ``now - lag``) and consistent dot-walks within one request (everything read at one
``t``). Old versions are pruned once no replica read can need them.

Rows are stored per concrete table; reading a parent table (``task``) also reads its children
(``incident``, ``change_request``), as on a real instance.

Keyset page reads (``ORDERBY<ts>^ORDERBYsys_id``) walk a per-table index sorted by ``(ts,
sys_id)`` instead of reading and sorting every row, so a page costs the same at a thousand rows
and at a million. The index holds one entry per stored version; an entry counts only while its
version is the one visible at the read instant, which keeps late-visible writes and replica
reads exact without re-sorting on every write.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import itertools
from collections.abc import Iterator

from snowsource.emulator.schema import TableDef

Values = dict[str, str]
Version = tuple[float, Values | None]


class Store:
    """Rows of every concrete table, with their version history."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, list[Version]]] = {}
        self._tables: dict[str, TableDef] = {}
        # sys_id -> concrete table, so a reference to ``task`` finds the incident it points at.
        self._where: dict[str, str] = {}
        self._family: dict[str, tuple[str, ...]] = {}
        self._indexes: dict[str, dict[str, _KeysetIndex]] = {}
        self.retention = 60.0

    def add_table(self, table: TableDef) -> None:
        """Register a table (idempotent for the same name)."""
        self._tables[table.name] = table
        self._rows.setdefault(table.name, {})
        self._family.clear()

    def family(self, name: str) -> tuple[str, ...]:
        """``name`` and every table that extends it, directly or not."""
        cached = self._family.get(name)
        if cached is not None:
            return cached
        out = tuple(
            t.name for t in self._tables.values() if any(a.name == name for a in t.lineage())
        )
        self._family[name] = out
        return out

    def table_of(self, sys_id: str) -> str | None:
        """The concrete table a sys_id lives in (deleted rows included until pruned)."""
        return self._where.get(sys_id)

    def put(
        self, table: str, sys_id: str, values: Values | None, *, visible_from: float, now: float
    ) -> None:
        """Append a version (``None`` = delete) and prune versions no read can need any more."""
        versions = self._rows[table].get(sys_id)
        if versions is None:
            if values is None:
                return
            versions = []
            self._rows[table][sys_id] = versions
            self._where[sys_id] = table
        versions.append((visible_from, values))
        if values is not None:
            for index in self._indexes.get(table, {}).values():
                index.add(values)
        cutoff = now - self.retention
        while len(versions) >= 2 and versions[1][0] <= cutoff:
            del versions[0]
        if len(versions) == 1 and versions[0][1] is None and versions[0][0] <= cutoff:
            del self._rows[table][sys_id]
            self._where.pop(sys_id, None)

    def latest(self, table: str, sys_id: str) -> Values | None:
        """The newest version of a row in ``table`` or a child table, visible or not."""
        where = self._where.get(sys_id)
        if where is None or where not in self.family(table):
            return None
        return self._rows[where][sys_id][-1][1]

    def latest_rows(self, table: str) -> Iterator[Values]:
        """Newest non-deleted version of every row of ``table`` and its children."""
        for name in self.family(table):
            for versions in self._rows[name].values():
                values = versions[-1][1]
                if values is not None:
                    yield values

    def get(self, table: str, sys_id: str, at: float) -> Values | None:
        """The version of one row visible at ``at`` (``table`` may be a parent table)."""
        where = self._where.get(sys_id)
        if where is None or where not in self.family(table):
            return None
        return _visible(self._rows[where][sys_id], at)

    def read(self, table: str, at: float) -> Iterator[Values]:
        """Every row of ``table`` (and its children) as visible at ``at``."""
        for name in self.family(table):
            for versions in self._rows[name].values():
                last = versions[-1]
                if last[0] <= at:
                    if last[1] is not None:
                        yield last[1]
                else:
                    values = _visible(versions, at)
                    if values is not None:
                        yield values

    def read_ordered(
        self, table: str, ts_field: str, at: float, low: tuple[str, ...] | None
    ) -> Iterator[Values]:
        """Rows of ``table`` (and its children) visible at ``at``, in ``(ts, sys_id)`` order.

        Starts at the first key ``>= low`` (everything when ``None``); the caller stops reading
        when it has enough. Rows missing ``ts_field`` sort first, as ``""``.
        """
        walks = [self._index(name, ts_field).walk(low) for name in self.family(table)]
        entries = walks[0] if len(walks) == 1 else heapq.merge(*walks)
        for _ts, _sys_id, _seq, values, versions in entries:
            last = versions[-1]
            if last[1] is values:
                if last[0] <= at:
                    yield values
            elif last[0] > at and _visible(versions, at) is values:
                yield values
            # Otherwise the entry's version is not the one visible at ``at``; the row's
            # visible version has an entry of its own.

    def _index(self, table: str, ts_field: str) -> _KeysetIndex:
        per_field = self._indexes.setdefault(table, {})
        index = per_field.get(ts_field)
        if index is None:
            index = _KeysetIndex(ts_field, self._rows[table])
            per_field[ts_field] = index
        return index

    def count(self, table: str) -> int:
        """Stored rows of exactly ``table`` (including not-yet-visible and pruned-later deletes)."""
        return len(self._rows[table])


def _visible(versions: list[Version], at: float) -> Values | None:
    for visible_from, values in reversed(versions):
        if visible_from <= at:
            return values
    return None


_Entry = tuple[str, str, int, Values, list[Version]]
_SEQUENCE = itertools.count()


class _KeysetIndex:
    """Every version of one table's rows, sorted by ``(ts, sys_id)``; built on first use.

    Entries are ``(ts, sys_id, seq, values, versions)``: ``seq`` makes keys unique so a sort
    never compares dictionaries, and ``versions`` is the row's live history list, so a reader
    tells at once whether the entry's version is the visible one. Writes are buffered and
    merged at the next read; entries of pruned versions are dropped when they outnumber the
    live ones.
    """

    # Up to this many buffered writes are placed one by one (a memmove each); more, and one
    # sort of the whole list (nearly sorted already, so Timsort runs in linear time) is cheaper.
    _INSORT_LIMIT = 64

    def __init__(self, ts_field: str, rows: dict[str, list[Version]]) -> None:
        self._ts_field = ts_field
        self._rows = rows
        self._entries: list[_Entry] = []
        self._pending: list[_Entry] = []
        self._rebuild()

    def add(self, values: Values) -> None:
        """Record a newly stored version."""
        sys_id = values.get("sys_id", "")
        self._pending.append(
            (values.get(self._ts_field, ""), sys_id, next(_SEQUENCE), values, self._rows[sys_id])
        )

    def walk(self, low: tuple[str, ...] | None) -> Iterator[_Entry]:
        """Entries from the first key ``>= low``, in key order."""
        self._settle()
        entries = self._entries
        start = 0 if low is None else bisect.bisect_left(entries, low)
        return itertools.islice(entries, start, None)

    def _settle(self) -> None:
        pending, self._pending = self._pending, []
        if len(pending) <= self._INSORT_LIMIT:
            for entry in pending:
                bisect.insort(self._entries, entry)
        else:
            self._entries.extend(pending)
            self._entries.sort()
        # Entries of pruned versions (and of deleted rows) only cost reading time; rebuild
        # when they make up half the list.
        if len(self._entries) > 2 * len(self._rows) + 1024:
            self._rebuild()

    def _rebuild(self) -> None:
        ts_field = self._ts_field
        # A million new tuples would set off full collections over every stored row; tuples of
        # existing objects create no cycles, so the collector has nothing to find here.
        collecting = gc.isenabled()
        gc.disable()
        try:
            entries: list[_Entry] = [
                (values.get(ts_field, ""), sys_id, next(_SEQUENCE), values, versions)
                for sys_id, versions in self._rows.items()
                for _visible_from, values in versions
                if values is not None
            ]
            entries.sort()
        finally:
            if collecting:
                gc.enable()
        self._entries = entries
        self._pending = []
