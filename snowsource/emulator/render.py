"""Turning stored rows into Table API JSON: projection, dot-walks, references, display values.

Pure code. The shapes follow ``servicenow-table-api.md`` §1.3-1.4 exactly:

=============  ===================  ===================================  =========================
display_value  plain field          reference (links on)                 reference (links off)
=============  ===================  ===================================  =========================
false          ``"raw"``            ``{"link", "value"}``                ``"sys_id"``
true           ``"display"``        ``{"display_value", "link"}``        ``"display"``
all            ``{"display_value",  ``{"display_value", "link", "value"}``  ``{"display_value",
               "value"}``                                                 "value"}``
=============  ===================  ===================================  =========================

An empty reference has no link: ``""`` (or ``{"display_value": "", "value": ""}`` under ``all``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Literal
from zoneinfo import ZoneInfo

from snowsource.emulator.datefmt import display_datetime
from snowsource.emulator.schema import Field, TableDef

DisplayMode = Literal["false", "true", "all"]
JSONValue = str | dict[str, str]
Lookup = Callable[[str, str], Mapping[str, str] | None]
"""``lookup(table, sys_id)``: the referenced row as visible to this request, or None."""


@dataclasses.dataclass(frozen=True)
class Column:
    """One output key and the chain of fields that reaches it (length > 1 for dot-walks)."""

    key: str
    path: tuple[Field, ...]

    @property
    def field(self) -> Field:
        """The field whose value is shown."""
        return self.path[-1]


def resolve_path(
    table: TableDef, name: str, tables: Mapping[str, TableDef]
) -> tuple[Field, ...] | None:
    """The field chain for ``name`` (``caller_id.name``), or None when any step is unknown."""
    path: list[Field] = []
    current: TableDef | None = table
    for part in name.split("."):
        if current is None:
            return None
        found = current.fields.get(part)
        if found is None:
            return None
        path.append(found)
        current = tables.get(found.reference) if found.reference else None
    return tuple(path)


def columns_for(
    table: TableDef,
    requested: Iterable[str] | None,
    tables: Mapping[str, TableDef],
    hidden: frozenset[str] = frozenset(),
) -> list[Column]:
    """The output columns: every field, or the requested ones (unknown names silently ignored).

    ``hidden`` holds field-ACL-protected names: they are left out, also as a dot-walk's first step.
    """
    if requested is None:
        return [Column(f.name, (f,)) for f in table.fields.values() if f.name not in hidden]
    out: list[Column] = []
    seen: set[str] = set()
    for raw in requested:
        name = raw.strip()
        if not name or name in seen or name.split(".")[0] in hidden:
            continue
        path = resolve_path(table, name, tables)
        if path is not None:
            seen.add(name)
            out.append(Column(name, path))
    return out


@dataclasses.dataclass(frozen=True)
class Renderer:
    """Renders rows for one request: display mode, link base URL and the caller's preferences."""

    mode: DisplayMode
    exclude_reference_link: bool
    base_url: str
    tz: ZoneInfo
    date_format: str
    time_format: str
    tables: Mapping[str, TableDef]
    lookup: Lookup

    def row(self, values: Mapping[str, str], columns: list[Column]) -> dict[str, JSONValue]:
        """One record as the Table API returns it."""
        out: dict[str, JSONValue] = {}
        for column in columns:
            out[column.key] = self.value(column.field, self._walk(values, column.path))
        return out

    def rows(
        self, rows: Iterable[Mapping[str, str]], columns: list[Column]
    ) -> list[dict[str, JSONValue]]:
        """Many records, as :meth:`row` renders each one.

        Raw values of plain columns (``display_value=false``, no dot-walk) are copied without a
        call per field: a 1000-row page has tens of thousands of them, and this is the
        emulator's hot path when a client pages through a large table.
        """
        if self.mode != "false" or any(len(c.path) != 1 for c in columns):
            return [self.row(values, columns) for values in rows]
        order = tuple(c.key for c in columns)
        links = [
            (c.key, f"{self.base_url}/api/now/table/{c.field.reference}/")
            for c in columns
            if c.field.type == "reference"
        ]
        if self.exclude_reference_link:
            links = []  # a raw reference is its sys_id, like any plain value
        out: list[dict[str, JSONValue]] = []
        for values in rows:
            # A stored row keeps its table's field order, so when every column is asked for
            # the record is a plain copy.
            record: dict[str, JSONValue] = (
                dict(values) if tuple(values) == order else {k: values.get(k, "") for k in order}
            )
            for key, prefix in links:
                raw = values.get(key, "")
                if raw:
                    record[key] = {"link": prefix + raw, "value": raw}
            out.append(record)
        return out

    def _walk(self, values: Mapping[str, str], path: tuple[Field, ...]) -> str:
        current: Mapping[str, str] | None = values
        for step in path[:-1]:
            assert current is not None
            ref = current.get(step.name, "")
            current = self.lookup(step.reference or "", ref) if ref else None
            if current is None:
                return ""
        assert current is not None
        return current.get(path[-1].name, "")

    def value(self, f: Field, raw: str) -> JSONValue:
        """One field value in the shape the display mode asks for."""
        if f.type == "reference":
            return self._reference(f, raw)
        if self.mode == "false":
            return raw
        display = self.display(f, raw)
        if self.mode == "true":
            return display
        return {"display_value": display, "value": raw}

    def _reference(self, f: Field, raw: str) -> JSONValue:
        if raw == "":
            return {"display_value": "", "value": ""} if self.mode == "all" else ""
        if self.mode == "false":
            if self.exclude_reference_link:
                return raw
            return {"link": self.link(f, raw), "value": raw}
        display = self.display(f, raw)
        if self.mode == "true":
            if self.exclude_reference_link:
                return display
            return {"display_value": display, "link": self.link(f, raw)}
        if self.exclude_reference_link:
            return {"display_value": display, "value": raw}
        return {"display_value": display, "link": self.link(f, raw), "value": raw}

    def link(self, f: Field, sys_id: str) -> str:
        """The ``link`` URL of a reference value."""
        return f"{self.base_url}/api/now/table/{f.reference}/{sys_id}"

    def display(self, f: Field, raw: str) -> str:
        """The display value of a stored value for this caller."""
        if raw == "":
            return ""
        if f.type == "choice":
            return f.choices.get(raw, raw)
        if f.type == "datetime":
            return display_datetime(raw, self.tz, self.date_format, self.time_format)
        if f.type == "integer":
            try:
                return f"{int(raw):,}"
            except ValueError:
                return raw
        if f.type == "decimal":
            try:
                return f"{Decimal(raw):,}"
            except InvalidOperation:
                return raw
        if f.type == "reference":
            if f.display_is_value:
                return raw
            target_table = self.tables.get(f.reference or "")
            target = self.lookup(f.reference or "", raw)
            if target is None or target_table is None:
                return ""
            shown = target_table.fields.get(target_table.display_field)
            if shown is None or shown.type == "reference":
                return target.get(target_table.display_field, "")
            return self.display(shown, target.get(shown.name, ""))
        return raw
