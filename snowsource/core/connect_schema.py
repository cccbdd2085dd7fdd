"""Kafka Connect's JsonConverter envelope for typed record values (``value.schema: connect``). Pure.

A Connect sink configured with ``value.converter.schemas.enable=true`` expects every value as
``{"schema": <schema>, "payload": <value>}``. The schema here is a struct of optional fields,
built per record from what each field actually holds: ``int64``, ``boolean``, ``double``, and
``string`` for everything else (dates are ISO strings). A value that did not parse as its column's
type is declared ``string`` in that record: declared ``int64``, the JsonConverter would read
``"n/a"`` as 0 instead of failing or keeping the text. Objects (a reference with its link, the
``display.value: all`` pairs) become nested structs of their members.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from snowsource.core.typed import TypedRow, ValueKind

_SCALAR_SCHEMA: Final[dict[ValueKind, str]] = {
    "int64": "int64",
    "boolean": "boolean",
    "double": "double",
    "string": "string",
    "reference": "string",
}


def _member_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "double"
    return "string"


def _object_schema(value: Mapping[str, Any], field: str | None) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "struct",
        "fields": [
            {"type": _member_type(member), "optional": True, "field": key}
            for key, member in value.items()
        ],
        "optional": True,
    }
    if field is not None:
        schema["field"] = field
    return schema


def field_schema(name: str, value: Any, kind: ValueKind) -> dict[str, Any]:
    """The optional field schema of one converted value."""
    if isinstance(value, Mapping):
        return _object_schema(value, name)
    return {"type": _SCALAR_SCHEMA[kind], "optional": True, "field": name}


def value_schema(typed: TypedRow, name: str | None = None) -> dict[str, Any]:
    """The struct schema describing ``typed`` (``name``: the struct's optional schema name)."""
    schema: dict[str, Any] = {
        "type": "struct",
        "fields": [
            field_schema(field, value, typed.kinds[field]) for field, value in typed.values.items()
        ],
        "optional": False,
    }
    if name is not None:
        schema["name"] = name
    return schema


def envelope(typed: TypedRow, name: str | None = None) -> dict[str, Any]:
    """``{"schema": ..., "payload": ...}`` for one record value."""
    return {"schema": value_schema(typed, name), "payload": typed.values}
