"""Typed record values: raw Table API strings converted by each column's internal type. Pure.

The Table API returns every value as a string. With ``value.format: typed`` a record's value
carries JSON integers, booleans, numbers and ISO-8601 dates instead, chosen by the column's
``sys_dictionary.internal_type`` (gathered by :mod:`snowsource.core.dictionary`):

- ``integer``, ``longint`` -> JSON integer (64-bit);
- ``boolean`` -> ``true``/``false``;
- ``decimal``, ``float`` -> JSON number;
- ``glide_date_time`` -> ``2026-09-29T07:30:42Z``; ``glide_date`` -> ``2026-09-29``;
- ``reference`` -> the sys_id string, or the ``{"link","value"}`` object as the API sent it;
- an empty value of any of these types -> ``null``;
- every other type (string, GUID, journal, choice, sys_class_name, domain_id, ...) and every
  column the dictionary does not know stay as they are, an empty string included.

A value that does not parse as its type stays the string it was and is reported in
:attr:`TypedRow.unparsed`, so the caller can count it and the schema can declare it a string.
Conversion builds a new mapping and never touches the row it was given: the cursor and the
record key are always read from the raw row.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Final, Literal

ValueKind = Literal["int64", "boolean", "double", "string", "reference"]

INTEGER_TYPES: Final = frozenset({"integer", "longint"})
BOOLEAN_TYPES: Final = frozenset({"boolean"})
NUMBER_TYPES: Final = frozenset({"decimal", "float"})
DATE_TIME_TYPES: Final = frozenset({"glide_date_time"})
DATE_TYPES: Final = frozenset({"glide_date"})
REFERENCE_TYPES: Final = frozenset({"reference"})
CONVERTED_TYPES: Final = (
    INTEGER_TYPES | BOOLEAN_TYPES | NUMBER_TYPES | DATE_TIME_TYPES | DATE_TYPES | REFERENCE_TYPES
)

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
# Python's int()/float() accept far more than ServiceNow emits ("1_000", " 3", "inf", Arabic
# digits); anything outside these plain forms is a value that did not parse.
_INTEGER_RE: Final = re.compile(r"[-+]?[0-9]+")
_NUMBER_RE: Final = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_DATE_TIME_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}")
_DATE_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class UnparsedValueError(Exception):
    """A value does not parse as its column's type (:func:`convert_text`)."""


def kind_of(internal_type: str | None) -> ValueKind:
    """The kind of value a column of ``internal_type`` converts to (unknown: ``string``)."""
    if internal_type in INTEGER_TYPES:
        return "int64"
    if internal_type in BOOLEAN_TYPES:
        return "boolean"
    if internal_type in NUMBER_TYPES:
        return "double"
    if internal_type in REFERENCE_TYPES:
        return "reference"
    return "string"


def _integer(text: str) -> int:
    if not _INTEGER_RE.fullmatch(text):
        raise UnparsedValueError
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise UnparsedValueError
    return value


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise UnparsedValueError


def _number(text: str) -> float:
    if not _NUMBER_RE.fullmatch(text):
        raise UnparsedValueError
    value = float(text)
    if not math.isfinite(value):  # "1e999": JSON has no infinity
        raise UnparsedValueError
    return value


def _date_time(text: str) -> str:
    if not _DATE_TIME_RE.fullmatch(text):
        raise UnparsedValueError
    try:
        datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise UnparsedValueError from None
    return text.replace(" ", "T") + "Z"


def _date(text: str) -> str:
    if not _DATE_RE.fullmatch(text):
        raise UnparsedValueError
    try:
        date.fromisoformat(text)
    except ValueError:
        raise UnparsedValueError from None
    return text


def convert_text(text: str, internal_type: str) -> Any:
    """One raw string as its type; raises :class:`UnparsedValueError`. Empty -> None for
    converted types. Schema Registry output (``core.value_encoding``) converts with it too."""
    if text == "":
        return None
    if internal_type in INTEGER_TYPES:
        return _integer(text)
    if internal_type in BOOLEAN_TYPES:
        return _boolean(text)
    if internal_type in NUMBER_TYPES:
        return _number(text)
    if internal_type in DATE_TIME_TYPES:
        return _date_time(text)
    if internal_type in DATE_TYPES:
        return _date(text)
    return text  # reference: the sys_id string as it is


@dataclass(frozen=True)
class TypedRow:
    """A converted record value, with what the schema and the metrics need to know.

    ``kinds`` gives, per field, the kind its value was converted as (``string`` for unknown
    columns, string types and values that did not parse); ``unparsed`` names the fields whose
    value did not parse as their column's type, in row order.
    """

    values: dict[str, Any]
    kinds: dict[str, ValueKind]
    unparsed: tuple[str, ...]


def convert_value(value: Any, internal_type: str | None) -> tuple[Any, bool]:
    """``(converted, parsed)`` for one field value as the Table API returned it.

    ``value`` is a raw string, a reference's ``{"link","value"}`` object, or the
    ``{"display_value","value"}`` object of ``display.value: all`` (then only ``value`` is
    converted; the display text stays as the instance formatted it). ``parsed`` is False when
    the value did not parse; the value is then returned unchanged.
    """
    if internal_type is None or internal_type not in CONVERTED_TYPES:
        return value, True
    if isinstance(value, str):
        try:
            return convert_text(value, internal_type), True
        except UnparsedValueError:
            return value, False
    if isinstance(value, Mapping) and isinstance(value.get("value"), str):
        raw = value["value"]
        if internal_type in REFERENCE_TYPES:
            # An empty reference is empty whatever shape it came in.
            return (None, True) if raw == "" and "display_value" not in value else (value, True)
        try:
            converted = convert_text(raw, internal_type)
        except UnparsedValueError:
            return value, False
        return {**value, "value": converted}, True
    return value, True


def convert_row(row: Mapping[str, Any], columns: Mapping[str, str]) -> TypedRow:
    """Convert every field of ``row`` by its column's internal type (``columns``: element ->
    internal type). Fields the dictionary does not list stay as they are."""
    values: dict[str, Any] = {}
    kinds: dict[str, ValueKind] = {}
    unparsed: list[str] = []
    for name, value in row.items():
        internal_type = columns.get(name)
        converted, parsed = convert_value(value, internal_type)
        values[name] = converted
        if parsed:
            kinds[name] = kind_of(internal_type)
        else:
            kinds[name] = "string"
            unparsed.append(name)
    return TypedRow(values=values, kinds=kinds, unparsed=tuple(unparsed))
