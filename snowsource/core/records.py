"""From a Table API row to a Kafka record (SPEC §3, §13.6, §13.7). Pure.

The daemon asks for raw values (``sysparm_display_value=false``) or for both
(``all``). With ``display.value: true`` it still asks for ``all`` and keeps each field's display
value, except the cursor fields and ``sys_mod_count``: a display-formatted timestamp is in the
integration user's time zone and format and must never drive the cursor.

The shapers share one interface (``raw``, ``value_bytes``), so the page decision and the dedup
cache treat every stream alike: :class:`RecordShaper` (the Table API's strings),
:class:`TypedShaper` (``value.format: typed`` and/or ``value.schema: connect``),
:class:`RegisteredShaper` (``avro``/``json_schema``, SPEC §15.1) and :class:`TombstoneShaper`
(a delete stream's audit rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from snowsource.core.connect_schema import envelope
from snowsource.core.deletes import tombstone
from snowsource.core.typed import TypedRow, convert_row
from snowsource.core.value_encoding import WriterSlot

RAW_FIELDS_EXTRA = ("sys_mod_count",)


def compact_json(obj: Any) -> bytes:
    """``orjson.dumps(obj)`` in a bytes object of its own size.

    orjson (3.12 on) hands back its whole output buffer, at least 4 KiB and rounded up to a
    power of two: a 1 KiB row value would hold 16 KiB until the page is acknowledged, which is
    most of the daemon's memory with many tables. Joining with an empty string copies it into
    an exact allocation for about 0.1 µs.
    """
    return b"".join((orjson.dumps(obj), b""))


@dataclass(frozen=True)
class RecordShaper:
    """Shapes rows of one table for its ``display.value`` and ``exclude.reference.link``."""

    display_value: str  # "false" | "true" | "all"
    exclude_reference_link: bool
    timestamp_field: str
    id_field: str

    def raw(self, row: Mapping[str, Any], field: str) -> str | None:
        """The raw (stored) value of ``field``, whatever the response shape; None when absent."""
        value = row.get(field)
        if isinstance(value, dict):
            value = value.get("value")
        return value if isinstance(value, str) else None

    def shape(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The record value object for ``row``."""
        if self.display_value != "true":
            return dict(row)
        keep_raw = {self.timestamp_field, self.id_field, *RAW_FIELDS_EXTRA}
        shaped: dict[str, Any] = {}
        for name, value in row.items():
            if not isinstance(value, dict):
                shaped[name] = value
            elif name in keep_raw:
                shaped[name] = value.get("value", "")
            elif "link" in value:
                # A reference with links on: the "true" shape keeps display value and link.
                shaped[name] = {
                    "display_value": value.get("display_value", ""),
                    "link": value["link"],
                }
            else:
                shaped[name] = value.get("display_value", "")
        return shaped

    def forget(self, row_id: str) -> None:
        """A row shaped by ``value_bytes`` was not emitted (the dedup cache suppressed it)."""

    def value_bytes(self, row: Mapping[str, Any]) -> bytes:
        """Compact UTF-8 JSON of the shaped row."""
        if self.display_value != "true":
            return compact_json(row)  # the value is the row itself: no copy per row
        return compact_json(self.shape(row))


@dataclass(frozen=True)
class TypedShaper(RecordShaper):
    """Values converted by column type (``typed``) and/or wrapped in the Connect envelope.

    ``columns`` (element -> internal type) is filled, and refilled when an unknown column
    appears, by the engine; with ``typed`` False it stays empty and every value keeps its
    string. ``unparsed`` collects, per row id, the fields that did not parse of the rows shaped
    and not yet taken (at delivery) or forgotten (suppressed by the dedup cache): pages of a
    table are planned while earlier ones are still being delivered (slices, fetch-ahead), so
    the entries live until their own row is counted or dropped.
    """

    typed: bool = True
    connect_envelope: bool = False
    schema_name: str | None = None
    columns: dict[str, str] = field(default_factory=dict)
    unparsed: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def typed_row(self, row: Mapping[str, Any]) -> TypedRow:
        """The shaped row converted by its columns' types."""
        return convert_row(self.shape(row), self.columns if self.typed else {})

    def value_bytes(self, row: Mapping[str, Any]) -> bytes:
        converted = self.typed_row(row)
        if converted.unparsed:
            self.unparsed[self.raw(row, self.id_field) or ""] = converted.unparsed
        if self.connect_envelope:
            return compact_json(envelope(converted, self.schema_name))
        return compact_json(converted.values)

    def take_unparsed(self, row_id: str) -> tuple[str, ...]:
        """The fields of row ``row_id`` that did not parse, forgotten once taken."""
        return self.unparsed.pop(row_id, ())

    def forget(self, row_id: str) -> None:
        self.unparsed.pop(row_id, None)


@dataclass(frozen=True)
class RegisteredShaper(TypedShaper):
    """Values in the table's registered schema (``value.format: avro | json_schema``), framed.

    ``slot`` holds the schema writer; the engine fills it (registering the schema) before the
    rows of a page are shaped, so a value is never written in a schema the registry lacks.
    ``columns`` is still the dictionary, which the schema is derived from.
    """

    slot: WriterSlot = field(default_factory=WriterSlot)

    def value_bytes(self, row: Mapping[str, Any]) -> bytes:
        writer = self.slot.writer
        assert writer is not None, "a page is shaped only after its schema is registered"
        if self.display_value == "true":
            value, unparsed = writer.encode(self.shape(row))
        elif writer.common is not None:
            # The common row straight from the schema's generated writer (once per row of a
            # wide table: bench/avro.py); the writer reads the row and never changes it.
            common = writer.common(row)
            if common is not None:
                return common
            value, unparsed = writer.encode_other(row)
        else:
            value, unparsed = writer.encode(row)
        if unparsed:
            self.unparsed[self.raw(row, self.id_field) or ""] = unparsed
        return value


@dataclass(frozen=True)
class TombstoneShaper(RecordShaper):
    """A delete stream's audit rows: ``value_bytes`` is the deleted row's key.

    A tombstone's value is null, so what tells two audit rows apart for the dedup cache (and
    what the record is keyed by) is the ``documentkey``; the poller sends it as the key and a
    null value. ``table`` is the base table, whose name every audit row must carry.
    """

    table: str = ""

    def value_bytes(self, row: Mapping[str, Any]) -> bytes:
        return tombstone(row, self.table).key.encode()
