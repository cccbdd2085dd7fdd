"""Row writes and raw reads of the emulated instance: the half of :class:`Emulator` that mutates.

Every write stamps the system fields from the emulator clock, so tests get the same
``sys_updated_on``/``sys_mod_count`` behaviour a real instance shows. Kept apart from the
facade in :mod:`snowsource.emulator.emulator` (users, schema, seeding, access rules) so each
stays readable, and so :mod:`snowsource.emulator.seeding` can write through it without
importing the facade; :class:`Emulator` inherits these methods unchanged.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import UTC, datetime

import orjson

from snowsource.emulator.clock import Clock, stamp
from snowsource.emulator.schema import TableDef
from snowsource.emulator.store import Store
from snowsource.emulator.views import ViewDef, view_rows


def _text(value: object) -> str:
    """Store any Python value the way ServiceNow would show it: as a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return stamp(value if value.tzinfo else value.replace(tzinfo=UTC))
    return str(value)


class RowWrites:
    """Insert, update, delete and raw reads over the emulator's store (mixed into Emulator)."""

    # Set by Emulator.__init__; declared here so the methods type-check on their own.
    clock: Clock
    store: Store
    tables: dict[str, TableDef]
    views: dict[str, ViewDef]
    _rng: random.Random
    _numbers: dict[str, int]
    _ids: dict[str, list[str]]
    _templates: dict[str, tuple[TableDef, tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]]]

    def new_sys_id(self) -> str:
        """A fresh 32-hex lowercase sys_id (deterministic for the emulator's seed)."""
        return f"{self._rng.getrandbits(128):032x}"

    def _writable(self, table: str) -> TableDef:
        if table in self.views:
            raise ValueError(f"{table} is a database view: views are read-only")
        tdef = self.tables.get(table)
        if tdef is None:
            raise KeyError(f"unknown table {table}")
        return tdef

    def insert(
        self,
        table: str,
        values: Mapping[str, object] | None = None,
        *,
        at: datetime | None = None,
        visible_at: datetime | None = None,
        by: str = "system",
    ) -> dict[str, str]:
        """Insert a row stamped ``at`` (default: now), invisible to queries before ``visible_at``.

        Unset fields are ``""``; ``number``, ``active``, ``opened_at`` and the system fields get
        defaults. Explicit values win, so back-dated ``sys_updated_on`` rows can be written.
        Returns the stored row.
        """
        given = {k: v if type(v) is str else _text(v) for k, v in (values or {}).items()}
        return dict(self.insert_texts(table, given, at=at, visible_at=visible_at, by=by))

    def insert_texts(
        self,
        table: str,
        given: dict[str, str],
        *,
        at: datetime | None = None,
        visible_at: datetime | None = None,
        by: str = "system",
    ) -> Mapping[str, str]:
        """``insert`` for values that are strings already, returning the stored row itself
        (read-only): seeding writes a million rows through here."""
        tdef = self._writable(table)
        now = self.clock.now()
        when = at or now
        if not given.keys() <= tdef.fields.keys():
            unknown = given.keys() - tdef.fields.keys()
            raise ValueError(f"unknown field(s) for {table}: {', '.join(sorted(unknown))}")
        sys_id = given.get("sys_id") or self.new_sys_id()
        where = self.store.table_of(sys_id)
        # A deleted row's sys_id may be inserted again into its table, as an import set
        # coalescing on sys_id does on a real instance.
        recreated = where == table and self.store.latest(table, sys_id) is None
        if where is not None and not recreated:
            raise ValueError(f"sys_id {sys_id} already exists")
        template, stamped, authored = self._template(tdef)
        row = template.copy()
        when_text = stamp(when)
        for key in stamped:
            row[key] = when_text
        for key in authored:
            row[key] = by
        if "sys_id" in row:
            row["sys_id"] = sys_id
        if tdef.number_prefix and "number" in row and not given.get("number"):
            counter = self._numbers.get(tdef.number_prefix, 10000) + 1
            self._numbers[tdef.number_prefix] = counter
            row["number"] = f"{tdef.number_prefix}{counter:07d}"
        row.update(given)
        now_ts = now.timestamp()
        visible_from = visible_at.timestamp() if visible_at is not None else now_ts
        self.store.put(table, sys_id, row, visible_from=visible_from, now=now_ts)
        if not recreated:
            self._ids[table].append(sys_id)
        return row

    def _template(self, tdef: TableDef) -> tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]:
        """A new row of ``tdef`` with its constant defaults, and the fields that take the write
        instant and the writer (only the fields the table has)."""
        cached = self._templates.get(tdef.name)
        if cached is not None and cached[0] is tdef:
            return cached[1]
        row = dict.fromkeys(tdef.fields, "")
        constant = {
            "sys_mod_count": "0",
            "sys_class_name": tdef.name,
            "sys_domain": "global",
            "sys_domain_path": "/",
            "active": "true",
        }
        for key, default in constant.items():
            if key in row:
                row[key] = default
        stamped = tuple(k for k in ("sys_created_on", "sys_updated_on", "opened_at") if k in row)
        authored = tuple(k for k in ("sys_created_by", "sys_updated_by") if k in row)
        made = (row, stamped, authored)
        self._templates[tdef.name] = (tdef, made)
        return made

    def update(
        self,
        table: str,
        sys_id: str,
        values: Mapping[str, object],
        *,
        at: datetime | None = None,
        visible_at: datetime | None = None,
        auto_sys_fields: bool = True,
        by: str = "system",
    ) -> dict[str, str]:
        """Update a row: ``sys_updated_on`` = ``at`` (default now), ``sys_mod_count`` + 1.

        ``auto_sys_fields=False`` is GlideRecord's ``autoSysFields(false)``: no system field
        moves, so timestamp readers never see the change. Until ``visible_at`` queries still
        see the previous version. Returns the new stored row.
        """
        self._writable(table)
        now = self.clock.now()
        current = self.store.latest(table, sys_id)
        concrete = self.store.table_of(sys_id)
        if current is None or concrete is None:
            raise KeyError(f"no row {sys_id} in {table}")
        tdef = self.tables[concrete]
        given = {k: _text(v) for k, v in values.items()}
        unknown = set(given) - set(tdef.fields)
        if unknown:
            raise ValueError(f"unknown field(s) for {concrete}: {', '.join(sorted(unknown))}")
        if given.get("sys_id", sys_id) != sys_id:
            raise ValueError("sys_id cannot change")
        row = dict(current)
        if auto_sys_fields and "sys_updated_on" in row:
            row["sys_updated_on"] = stamp(at or now)
            row["sys_updated_by"] = by
            row["sys_mod_count"] = str(int(row.get("sys_mod_count") or "0") + 1)
        row.update(given)
        visible_from = (visible_at or now).timestamp()
        self.store.put(concrete, sys_id, row, visible_from=visible_from, now=now.timestamp())
        return dict(row)

    def delete(
        self, table: str, sys_id: str, *, at: datetime | None = None, by: str = "system"
    ) -> None:
        """Delete a row; writes a ``sys_audit_delete`` row unless the table is no_audit_delete."""
        self._writable(table)
        now = self.clock.now()
        current = self.store.latest(table, sys_id)
        concrete = self.store.table_of(sys_id)
        if current is None or concrete is None:
            raise KeyError(f"no row {sys_id} in {table}")
        tdef = self.tables[concrete]
        self.store.put(concrete, sys_id, None, visible_from=now.timestamp(), now=now.timestamp())
        if not tdef.no_audit_delete:
            self.insert(
                "sys_audit_delete",
                {
                    "tablename": concrete,
                    "documentkey": sys_id,
                    "display_value": current.get(tdef.display_field, ""),
                    "payload": orjson.dumps(current).decode(),
                },
                at=at,
                by=by,
            )

    def get(self, table: str, sys_id: str) -> dict[str, str] | None:
        """The newest stored version of one row (visible or not), None when absent or deleted."""
        row = self.store.latest(table, sys_id)
        return dict(row) if row is not None else None

    def rows(self, table: str) -> list[dict[str, str]]:
        """Raw stored values of every row of ``table`` and its child tables, visible or not."""
        view = self.views.get(table)
        if view is not None:
            return view_rows(view, self.store.latest_rows, self.tables)
        if table not in self.tables:
            raise KeyError(f"unknown table {table}")
        return [dict(r) for r in self.store.latest_rows(table)]

    def random_sys_id(self, table: str, rng: random.Random) -> str | None:
        """A random existing sys_id of ``table`` (None when it is empty); used by activity."""
        ids = self._ids.get(table, [])
        for _ in range(8):
            if not ids:
                return None
            sys_id = ids[rng.randrange(len(ids))]
            if self.store.latest(table, sys_id) is not None:
                return sys_id
        return None
