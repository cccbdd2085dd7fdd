"""Versioned record storage: what a query can see at a given instant.

No I/O. Each row keeps a short list of versions ``(visible_from, values)``; ``values`` is an
immutable-by-convention ``dict[str, str]`` (``None`` marks a delete). A read at time ``t`` sees,
per row, the newest version whose ``visible_from <= t``. That one rule gives three behaviours the
emulator needs: late-visible writes (``visible_from`` in the future), a lagging read replica
(read at ``now - lag``) and consistent dot-walks within one request (everything read at one
``t``). Old versions are pruned once no replica read can need them.

Rows are stored per concrete table; reading a parent table (``task``) also reads its children
(``incident``, ``change_request``), as on a real instance.
"""

from __future__ import annotations

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

    def count(self, table: str) -> int:
        """Stored rows of exactly ``table`` (including not-yet-visible and pruned-later deletes)."""
        return len(self._rows[table])


def _visible(versions: list[Version], at: float) -> Values | None:
    for visible_from, values in reversed(versions):
        if visible_from <= at:
            return values
    return None
