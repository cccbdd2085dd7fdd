"""A table's record schema for Schema Registry output (SPEC §15.1). Pure.

The schema is derived from the instance's own dictionary, not guessed from values: one field per
column the records carry, typed by the column's ``sys_dictionary.internal_type``:

================================================  =========================================
internal type                                     Avro type (always ``["null", T]``, default null)
================================================  =========================================
``integer``                                       ``int``
``longint``                                       ``long``
``boolean``                                       ``boolean``
``decimal``, ``float``, ``currency``, ``price``   ``double``
``glide_date_time``                               ``long`` / ``timestamp-millis`` (UTC)
``glide_date``                                    ``int`` / ``date``
``reference``                                     ``string`` (empty: null)
anything else, unknown columns, forced columns    ``string``
================================================  =========================================

Fields are sorted by name; a column whose name is not a valid Avro name (a dot-walked
``caller_id.name``) becomes a valid one (``caller_id__name``) with the original in ``doc``. The
last field is ``__unparsed`` (``map<string>``, default ``{}``): a value that does not convert to
its field's type is written null and its text kept there, so nothing is lost to the schema.

The same :class:`RecordSchema` renders as Avro (:func:`avro_schema`) or as a closed draft-07
JSON Schema (:func:`json_schema`, properties keyed by the original column names, as the typed
JSON values are), and is read back from a registered Avro or JSON schema
(:func:`from_registered`) when the registry refused ours and the subject's latest version is the
one to write with.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

FieldType = Literal["int", "long", "boolean", "double", "timestamp", "date", "string", "reference"]
ValueFormat = Literal["avro", "json_schema"]

NAMESPACE: Final = "servicenow"
UNPARSED: Final = "__unparsed"

_TYPE_OF: Final[dict[str, FieldType]] = {
    "integer": "int",
    "longint": "long",
    "boolean": "boolean",
    "decimal": "double",
    "float": "double",
    "currency": "double",
    "price": "double",
    "glide_date_time": "timestamp",
    "glide_date": "date",
    # A string, but an empty reference is null (SPEC §13.7), not an empty string.
    "reference": "reference",
}
_AVRO_TYPE: Final[dict[FieldType, Any]] = {
    "int": "int",
    "long": "long",
    "boolean": "boolean",
    "double": "double",
    "timestamp": {"type": "long", "logicalType": "timestamp-millis"},
    "date": {"type": "int", "logicalType": "date"},
    "string": "string",
    "reference": "string",
}
_JSON_TYPE: Final[dict[FieldType, dict[str, Any]]] = {
    "int": {"type": ["null", "integer"]},
    "long": {"type": ["null", "integer"]},
    "boolean": {"type": ["null", "boolean"]},
    "double": {"type": ["null", "number"]},
    "timestamp": {"type": ["null", "string"], "format": "date-time"},
    "date": {"type": ["null", "string"], "format": "date"},
    "string": {"type": ["null", "string"]},
    "reference": {"type": ["null", "string"]},
}
_AVRO_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INVALID_CHAR: Final = re.compile(r"[^A-Za-z0-9_]")


def field_type(internal_type: str | None) -> FieldType:
    """The field type of a column of ``internal_type`` (None: not in the dictionary)."""
    return _TYPE_OF.get(internal_type or "", "string")


def avro_name(name: str) -> str:
    """``name`` as a valid Avro name: ``.`` -> ``__``, any other invalid character -> ``_``, a
    leading digit prefixed with ``_``."""
    if _AVRO_NAME.fullmatch(name):
        return name
    out = _INVALID_CHAR.sub("_", name.replace(".", "__")) or "_"
    return out if not out[0].isdigit() else f"_{out}"


@dataclass(frozen=True, order=True)
class Field:
    """One column's field: its Avro ``name``, the ``column`` it carries, its type."""

    name: str
    column: str
    type: FieldType


@dataclass(frozen=True)
class RecordSchema:
    """A table's record: ``fields`` sorted by name; ``unparsed``: it has the ``__unparsed`` map
    (every schema snowsource derives has; a registered one read back may not)."""

    table: str
    fields: tuple[Field, ...]
    unparsed: bool = True

    @property
    def columns(self) -> frozenset[str]:
        """The columns the schema has a field for."""
        return frozenset(field.column for field in self.fields)

    @property
    def record_name(self) -> str:
        """The Avro record's name (without its namespace)."""
        return avro_name(self.table)

    @property
    def full_name(self) -> str:
        """``servicenow.<table>``: what the record and topic_record subject strategies use."""
        return f"{NAMESPACE}.{self.record_name}"


def derive(
    table: str,
    columns: Iterable[str],
    types: Mapping[str, str],
    *,
    as_string: Collection[str] = (),
    all_strings: bool = False,
) -> RecordSchema:
    """The schema of records of ``table`` carrying ``columns``.

    ``types`` maps column -> ``internal_type`` (the dictionary; a column it lacks is a string);
    ``as_string`` names columns forced to strings (hashed or masked by governance);
    ``all_strings``: every field is a string (``display.value: true``).
    """
    taken: set[str] = {UNPARSED}
    fields: list[Field] = []
    for column in sorted(set(columns)):
        name = avro_name(column)
        suffix = 2
        while name in taken:  # "a.b" and a real "a__b" column: the later one is numbered
            name = f"{avro_name(column)}_{suffix}"
            suffix += 1
        taken.add(name)
        forced = all_strings or column in as_string
        fields.append(Field(name, column, "string" if forced else field_type(types.get(column))))
    return RecordSchema(table=table, fields=tuple(sorted(fields)))


def carried_columns(
    fields: Iterable[str], cursor: Iterable[str], dictionary: Iterable[str]
) -> set[str]:
    """The columns a table's records carry: its ``fields`` projection when set, else every
    column of the ``dictionary``; the ``cursor`` fields and ``sys_mod_count`` always."""
    projection = set(fields)
    return (projection or set(dictionary)) | set(cursor) | {"sys_mod_count"}


def avro_schema(schema: RecordSchema) -> dict[str, Any]:
    """The Avro record schema (as JSON data) of ``schema``."""
    fields: list[dict[str, Any]] = []
    for field in schema.fields:
        entry: dict[str, Any] = {
            "name": field.name,
            "type": ["null", _AVRO_TYPE[field.type]],
            "default": None,
        }
        if field.name != field.column:
            entry["doc"] = field.column
        fields.append(entry)
    if schema.unparsed:
        fields.append(
            {"name": UNPARSED, "type": {"type": "map", "values": "string"}, "default": {}}
        )
    return {"type": "record", "name": schema.record_name, "namespace": NAMESPACE, "fields": fields}


def json_schema(schema: RecordSchema) -> dict[str, Any]:
    """The closed draft-07 JSON Schema of ``schema``: registries treat a property added to an
    open object as incompatible under BACKWARD, and accept it on a closed one."""
    properties: dict[str, Any] = {
        field.column: dict(_JSON_TYPE[field.type]) for field in schema.fields
    }
    if schema.unparsed:
        properties[UNPARSED] = {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
        }
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": schema.full_name,
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }


def schema_text(schema: RecordSchema, value_format: ValueFormat) -> str:
    """The schema string sent to the registry: canonical (sorted keys), so equal schemas are
    equal strings and a registry's content cache (and ours) sees them as one."""
    rendered = avro_schema(schema) if value_format == "avro" else json_schema(schema)
    return orjson.dumps(rendered, option=orjson.OPT_SORT_KEYS).decode()


def schema_type(value_format: ValueFormat) -> str:
    """The registry's ``schemaType`` of ``value_format``."""
    return "AVRO" if value_format == "avro" else "JSON"


def subject_name(strategy: str, topic: str, schema: RecordSchema) -> str:
    """The subject of ``topic``'s values under a subject name strategy (topic, record,
    topic_record), as Kafka clients name them."""
    if strategy == "record":
        return schema.full_name
    if strategy == "topic_record":
        return f"{topic}-{schema.full_name}"
    return f"{topic}-value"


class UnsupportedSchemaError(ValueError):
    """A registered schema is not one snowsource can write records with."""


def from_registered(table: str, text: str, value_format: ValueFormat) -> RecordSchema:
    """A schema registered under a subject (the registry's ``schema`` string) as a
    :class:`RecordSchema`; raises :class:`UnsupportedSchemaError` for a shape other than a
    record (object) of optional fields of the types above."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UnsupportedSchemaError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UnsupportedSchemaError("not a record schema")
    if value_format == "avro":
        return _from_avro(table, data)
    return _from_json(table, data)


def _from_avro(table: str, data: Mapping[str, Any]) -> RecordSchema:
    if data.get("type") != "record" or not isinstance(data.get("fields"), list):
        raise UnsupportedSchemaError("not an Avro record")
    fields: list[Field] = []
    unparsed = False
    for entry in data["fields"]:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            raise UnsupportedSchemaError("a field without a name")
        if name == UNPARSED:
            unparsed = True
            continue
        kind = _avro_field_type(entry.get("type"))
        if kind is None:
            raise UnsupportedSchemaError(f"field {name!r} is not an optional type we write")
        doc = entry.get("doc")
        fields.append(Field(name, doc if isinstance(doc, str) and doc else name, kind))
    return RecordSchema(table=table, fields=tuple(sorted(fields)), unparsed=unparsed)


def _avro_field_type(declared: Any) -> FieldType | None:
    if not isinstance(declared, list) or len(declared) != 2 or declared[0] != "null":
        return None
    branch = declared[1]
    for kind, avro in _AVRO_TYPE.items():
        if branch == avro and kind not in ("timestamp", "date"):
            return kind
        if isinstance(branch, dict) and isinstance(avro, dict) and branch == avro:
            return kind
    if isinstance(branch, dict) and branch.get("type") in ("int", "long", "string"):
        return _avro_field_type(["null", branch["type"]])  # an unknown logical type
    return None


def _from_json(table: str, data: Mapping[str, Any]) -> RecordSchema:
    properties = data.get("properties")
    if data.get("type") != "object" or not isinstance(properties, dict):
        raise UnsupportedSchemaError("not a JSON Schema object")
    fields: list[Field] = []
    for column, declared in properties.items():
        if column == UNPARSED:
            continue
        kind = next((k for k, v in _JSON_TYPE.items() if v == declared), None)
        if kind is None:
            raise UnsupportedSchemaError(f"property {column!r} is not a nullable type we write")
        fields.append(Field(avro_name(column), column, "long" if kind == "int" else kind))
    return RecordSchema(table=table, fields=tuple(sorted(fields)), unparsed=UNPARSED in properties)


@dataclass(frozen=True)
class Registered:
    """A schema as the registry holds it: its global ``id``, its ``version`` under the subject
    (None when the answer did not say) and its text."""

    id: int
    version: int | None = None
    schema: str = ""
