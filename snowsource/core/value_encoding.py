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

import functools
import re
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any, Final

import orjson

from snowsource.core import avro_binary
from snowsource.core.avro_rows import Remembered, RowEncoder, compile_encoder
from snowsource.core.avro_timestamps import TimestampWriter
from snowsource.core.typed import UnparsedValueError, convert_text
from snowsource.core.value_schema import (
    UNPARSED,
    FieldType,
    RecordSchema,
    ValueFormat,
)

MAGIC: Final = b"\x00"
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
# Texts remembered per converted field kind (integers, booleans, numbers, dates: their values
# repeat across a table's rows; a look-up costs a fraction of a conversion). When full, a
# cache starts again empty: it follows what the tables write now. About 1 MB each at most.
_CACHED_TEXTS: Final = 8192
_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# "hh:mm" -> seconds into the day, "ss" -> seconds: only valid times of day are keys.
_CLOCK_SECONDS: Final = {f"{h:02}:{m:02}": h * 3600 + m * 60 for h in range(24) for m in range(60)}
_SECONDS: Final = {f"{s:02}": s for s in range(60)}
# Date-times remembered per text: nearly all differ, but a row's often repeat one another.
_RECENT_DATE_TIMES: Final = 256

Converter = Callable[[str], Any]


def _int(text: str) -> int | None:
    value: int | None = convert_text(text, "integer")
    if value is not None and not _INT32_MIN <= value <= _INT32_MAX:
        raise UnparsedValueError  # ServiceNow's integer is 32-bit; Avro's int is too
    return value


@functools.lru_cache(maxsize=4096)
def _day_seconds(day: str) -> int:
    """``YYYY-MM-DD`` as seconds since the epoch at its midnight (UTC); raises
    :class:`UnparsedValueError`. Remembered: a table's date-times share few days."""
    if _DATE.fullmatch(day) is None:
        raise UnparsedValueError
    try:
        days = date(int(day[0:4]), int(day[5:7]), int(day[8:10])).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        raise UnparsedValueError from None
    return days * 86400


def _epoch_seconds(text: str) -> int | None:
    """``YYYY-MM-DD hh:mm:ss`` (UTC) as seconds since the epoch. The day is checked (calendar
    included) and remembered by :func:`_day_seconds`; the time of day is looked up (hours and
    minutes, then seconds): ``strptime`` costs ten times as much, and a table has several
    date-time columns per row."""
    if text == "":
        return None
    if len(text) != 19 or text[10] != " " or text[16] != ":":
        raise UnparsedValueError
    try:
        return _day_seconds(text[:10]) + _CLOCK_SECONDS[text[11:16]] + _SECONDS[text[17:]]
    except KeyError:
        raise UnparsedValueError from None


def _epoch_millis(text: str) -> int | None:
    seconds = _epoch_seconds(text)
    return None if seconds is None else seconds * 1000


def _iso_date_time(text: str) -> str | None:
    return None if _epoch_seconds(text) is None else text.replace(" ", "T") + "Z"


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
        return _epoch_millis if avro else _iso_date_time
    if kind == "date":
        return _epoch_days if avro else _by_internal_type("glide_date")
    if kind == "reference":
        return _reference
    return _string


@functools.cache
def kind_writer(kind: FieldType) -> Remembered:
    """The Avro bytes of a converted ``kind``'s raw texts (null for an empty value); one per
    kind, shared by every table. Date-times (:func:`timestamp_writer`) are remembered only
    briefly: nearly all differ, but a row's often repeat one another (opened_at,
    sys_created_on) and many are empty."""
    if kind == "timestamp":
        return Remembered(timestamp_writer().write, _RECENT_DATE_TIMES)
    convert = converter(kind, "avro")
    put = avro_binary.put(kind)
    null = avro_binary.NULL

    def write(text: str) -> bytes:
        value = convert(text)
        return null if value is None else put(value)

    return Remembered(write, _CACHED_TEXTS)


@functools.cache
def timestamp_writer() -> TimestampWriter:
    """The process's date-time writer (its remembered hours shared by every table)."""
    return TimestampWriter(_epoch_seconds)


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
            (f.column, f.name if avro else f.column, converter(f.type, value_format))
            for f in schema.fields
        ]
        # Avro: the common row (every column present, every value converting) by a function
        # generated for the schema; any other row by ``_encode_avro``, with per field its
        # column and, for a converted kind, its writer (None: a string).
        self.common: RowEncoder | None = (
            compile_encoder(
                schema.fields,
                self._prefix,
                unparsed=schema.unparsed,
                writer=kind_writer,
                timestamps=timestamp_writer(),
            )
            if avro
            else None
        )
        self._avro = [
            (f.column, None if f.type == "string" else kind_writer(f.type))
            for f in (schema.fields if avro else ())
        ]
        self._columns = schema.columns

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
        if self.common is not None:
            value = self.common(row)
            if value is not None:
                return value, ()
        return self.encode_other(row)

    def encode_other(self, row: Mapping[str, Any]) -> tuple[bytes, tuple[str, ...]]:
        """:meth:`encode` for a row that :attr:`common` (the writer of Avro's common row,
        generated for the schema; None for JSON) did not write."""
        if self.common is None:
            record, failed = self.record(row)
            return b"".join((self._prefix, orjson.dumps(record))), failed
        return self._encode_avro(row)

    def _encode_avro(self, row: Mapping[str, Any]) -> tuple[bytes, tuple[str, ...]]:
        # The same values as ``record`` gives, written straight to Avro's binary encoding: any
        # row (missing or extra columns, reference objects, values that do not convert).
        parts = [self._prefix]
        append = parts.append
        unparsed: dict[str, str] = {}
        null = avro_binary.NULL
        for column, writer in self._avro:
            value = row.get(column)
            if value is None:
                append(null)
                continue
            text = value if type(value) is str else text_of(value)
            if writer is None:
                append(avro_binary.string(text))
                continue
            try:
                append(writer[text])
            except UnparsedValueError:
                unparsed[column] = text
                append(null)
        failed = tuple(unparsed)
        if not self._columns.issuperset(row):
            for column in row.keys() - self._columns:
                unparsed[column] = text_of(row[column])
        if self.schema.unparsed:
            append(avro_binary.string_map(unparsed))
        return b"".join(parts), failed


class WriterSlot:
    """The schema a table writes with now: set by the engine before a page's rows are shaped
    (registration happens first), read by the shaper for every row."""

    def __init__(self) -> None:
        self.writer: SchemaWriter | None = None
