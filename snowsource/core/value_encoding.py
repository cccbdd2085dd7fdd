"""Record values in a registered schema, with Confluent's framing (SPEC §15.1). Pure.

Every value is framed as Confluent's serializers frame it: byte ``0`` (magic), the schema id as
4 big-endian bytes, then the Avro binary encoding (no container header) or the JSON document's
UTF-8 bytes. Any Confluent-compatible deserializer reads it.

Values are converted by their *field's* type (not the dictionary's directly: a field forced to
a string stays a string, and a schema read back from the registry may differ from ours). An
empty value of a non-string field is null; a value that does not convert is null with its raw
text under ``__unparsed`` (and reported, for the metric); a column the schema has no field for
(possible only when writing with a registered schema that is not our latest) keeps its text
under ``__unparsed`` too.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any, Final

import fastavro
import orjson

from snowsource.core.typed import UnparsedValueError, convert_text
from snowsource.core.value_schema import (
    UNPARSED,
    FieldType,
    RecordSchema,
    ValueFormat,
    avro_schema,
)

MAGIC: Final = b"\x00"
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()

Converter = Callable[[str], Any]


def _int(text: str) -> int | None:
    value: int | None = convert_text(text, "integer")
    if value is not None and not _INT32_MIN <= value <= _INT32_MAX:
        raise UnparsedValueError  # ServiceNow's integer is 32-bit; Avro's int is too
    return value


def _epoch_millis(text: str) -> int | None:
    if convert_text(text, "glide_date_time") is None:  # validates the shape and the calendar
        return None
    days = date(int(text[0:4]), int(text[5:7]), int(text[8:10])).toordinal() - _EPOCH_ORDINAL
    seconds = int(text[11:13]) * 3600 + int(text[14:16]) * 60 + int(text[17:19])
    return (days * 86400 + seconds) * 1000


def _epoch_days(text: str) -> int | None:
    if convert_text(text, "glide_date") is None:
        return None
    return date.fromisoformat(text).toordinal() - _EPOCH_ORDINAL


def _by_internal_type(internal_type: str) -> Converter:
    return lambda text: convert_text(text, internal_type)


def _string(text: str) -> str:
    return text


def _reference(text: str) -> str | None:
    return text or None


def converter(kind: FieldType, value_format: ValueFormat) -> Converter:
    """The function converting a raw text to a ``kind`` field's value in ``value_format``
    (raises :class:`UnparsedValueError`; empty text of a non-string field -> None)."""
    avro = value_format == "avro"
    if kind == "int":
        return _int
    if kind == "long":
        return _by_internal_type("longint")
    if kind == "boolean":
        return _by_internal_type("boolean")
    if kind == "double":
        return _by_internal_type("decimal")
    if kind == "timestamp":
        return _epoch_millis if avro else _by_internal_type("glide_date_time")
    if kind == "date":
        return _epoch_days if avro else _by_internal_type("glide_date")
    if kind == "reference":
        return _reference
    return _string


def text_of(value: Any) -> str:
    """The text of a shaped field value: a raw string, a reference's ``{"link","value"}`` (its
    sys_id) or a ``display.value: true`` reference's ``{"display_value","link"}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        inner = value.get("value", value.get("display_value"))
        return inner if isinstance(inner, str) else ""
    return orjson.dumps(value).decode()


def frame(schema_id: int) -> bytes:
    """Confluent's 5-byte header for values written with schema ``schema_id``."""
    return MAGIC + schema_id.to_bytes(4, "big")


class SchemaWriter:
    """Writes shaped rows as framed values of one registered schema (id ``schema_id``)."""

    def __init__(self, schema: RecordSchema, schema_id: int, value_format: ValueFormat) -> None:
        self.schema = schema
        self.schema_id = schema_id
        self.value_format = value_format
        self._prefix = frame(schema_id)
        avro = value_format == "avro"
        # Avro records are keyed by field name, JSON documents by the column (as typed JSON is).
        self._fields = [
            (
                field.column,
                field.name if avro else field.column,
                converter(field.type, value_format),
            )
            for field in schema.fields
        ]
        self._columns = schema.columns
        self._parsed = fastavro.parse_schema(avro_schema(schema)) if avro else None

    def record(self, row: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """``(record, columns that did not convert)`` for a shaped row."""
        record: dict[str, Any] = {}
        unparsed: dict[str, str] = {}
        failed: list[str] = []
        for column, key, convert in self._fields:
            value = row.get(column)
            if value is None:
                record[key] = None
                continue
            text = text_of(value)
            try:
                record[key] = convert(text)
            except UnparsedValueError:
                record[key] = None
                unparsed[column] = text
                failed.append(column)
        if not self._columns.issuperset(row):
            for column in row.keys() - self._columns:
                unparsed[column] = text_of(row[column])
        if self.schema.unparsed:
            record[UNPARSED] = unparsed
        return record, tuple(failed)

    def encode(self, row: Mapping[str, Any]) -> tuple[bytes, tuple[str, ...]]:
        """``(framed value, columns that did not convert)`` for a shaped row."""
        record, failed = self.record(row)
        if self._parsed is None:
            return b"".join((self._prefix, orjson.dumps(record))), failed
        out = io.BytesIO()
        out.write(self._prefix)
        fastavro.schemaless_writer(out, self._parsed, record)
        return out.getvalue(), failed


class WriterSlot:
    """The schema a table writes with now: set by the engine before a page's rows are shaped
    (registration happens first), read by the shaper for every row."""

    def __init__(self) -> None:
        self.writer: SchemaWriter | None = None
