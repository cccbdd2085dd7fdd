"""Access rules of the emulated instance: table, row and field ACLs (mixed into Emulator).

Row ACLs are applied after the page limit and field ACLs after rendering, as on a real
instance; the HTTP layer asks :meth:`AccessRules.row_acl` and :meth:`AccessRules.hidden_fields`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from snowsource.emulator.auth import User
from snowsource.emulator.schema import TableDef

RowPredicate = Callable[[Mapping[str, str]], bool]


class AccessRules:
    """Table, row and field ACLs (state set by Emulator.__init__)."""

    tables: dict[str, TableDef]
    _denied: set[tuple[str, str]]
    _row_acls: list[tuple[str, str | None, RowPredicate]]
    _field_acls: list[tuple[str, str | None, str]]

    def deny_table(self, user: str, table: str) -> None:
        """Table-level ACL: every read of ``table`` by ``user`` gets 403."""
        self._denied.add((user, table))

    def is_denied(self, user: User, table: str) -> bool:
        """Whether a table-level ACL refuses ``table`` to ``user``."""
        return (user.name, table) in self._denied

    def hide_rows(self, table: str, predicate: RowPredicate, *, user: str | None = None) -> None:
        """Row-level ACL: rows where ``predicate(raw_row)`` is true are dropped AFTER the limit.

        ``user=None`` applies to everyone. The count (``X-Total-Count``) still includes them.
        """
        self._row_acls.append((table, user, predicate))

    def hide_field(self, table: str, field: str, *, user: str | None = None) -> None:
        """Field-level ACL: ``field`` is omitted from responses (for ``user``, or everyone)."""
        self._field_acls.append((table, user, field))

    def clear_acls(self) -> None:
        """Remove every table, row and field ACL."""
        self._denied.clear()
        self._row_acls.clear()
        self._field_acls.clear()

    def row_acl(self, table: str, user: User) -> RowPredicate | None:
        """One predicate hiding rows of ``table`` from ``user`` (None when nothing is hidden)."""
        family = {t.name for t in self.tables[table].lineage()} if table in self.tables else {table}
        preds = [p for t, u, p in self._row_acls if t in family and u in (None, user.name)]
        if not preds:
            return None
        if len(preds) == 1:
            return preds[0]
        return lambda row: any(p(row) for p in preds)

    def hidden_fields(self, table: str, user: User) -> frozenset[str]:
        """Fields of ``table`` hidden from ``user`` by field ACLs."""
        family = {t.name for t in self.tables[table].lineage()} if table in self.tables else {table}
        return frozenset(
            f for t, u, f in self._field_acls if t in family and u in (None, user.name)
        )
