"""Schemas derived from the dictionary (SPEC §15.1) and values written in them, read back."""

from __future__ import annotations

import io
import string
from datetime import UTC, date, datetime
from typing import Any

import fastavro
import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snowsource.core.records import RegisteredShaper
from snowsource.core.value_encoding import SchemaWriter, WriterSlot, frame, text_of
from snowsource.core.value_schema import (
    Field,
    RecordSchema,
    UnsupportedSchemaError,
    avro_name,
    avro_schema,
    derive,
    field_type,
    from_registered,
    json_schema,
    schema_text,
    subject_name,
)

TYPES = {
    "sys_id": "GUID",
    "number": "string",
    "priority": "integer",
    "reassignment_count": "longint",
    "active": "boolean",
    "cost": "currency",
    "score": "decimal",
    "sys_updated_on": "glide_date_time",
    "due": "glide_date",
    "caller_id": "reference",
    "sys_mod_count": "integer",
}
COLUMNS = [*TYPES, "caller_id.name", "u_unknown"]


def avro_read(schema: RecordSchema, value: bytes) -> dict[str, Any]:
    assert value[:1] == b"\x00"
    parsed = fastavro.parse_schema(avro_schema(schema))
    out = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
    assert isinstance(out, dict)
    return out


def test_each_internal_type_maps_as_the_spec_says() -> None:
    expected = {
        "integer": "int",
        "longint": "long",
        "boolean": "boolean",
        "decimal": "double",
        "float": "double",
        "currency": "double",
        "price": "double",
        "glide_date_time": "timestamp",
        "glide_date": "date",
        "reference": "reference",
        "GUID": "string",
        "journal": "string",
        "choice": "string",
    }
    assert {t: field_type(t) for t in expected} == expected
    assert field_type(None) == "string"


def test_derived_avro_schema_is_sorted_optional_and_ends_with_unparsed() -> None:
    schema = derive("incident", COLUMNS, TYPES)
    rendered = avro_schema(schema)
    assert rendered["name"] == "incident"
    assert rendered["namespace"] == "servicenow"
    names = [f["name"] for f in rendered["fields"]]
    assert names[:-1] == sorted(names[:-1])
    assert names[-1] == "__unparsed"
    assert rendered["fields"][-1] == {
        "name": "__unparsed",
        "type": {"type": "map", "values": "string"},
        "default": {},
    }
    by_name = {f["name"]: f for f in rendered["fields"]}
    assert by_name["priority"]["type"] == ["null", "int"]
    assert by_name["priority"]["default"] is None
    assert by_name["sys_updated_on"]["type"] == [
        "null",
        {"type": "long", "logicalType": "timestamp-millis"},
    ]
    assert by_name["due"]["type"] == ["null", {"type": "int", "logicalType": "date"}]
    assert by_name["caller_id__name"]["doc"] == "caller_id.name"
    assert by_name["u_unknown"]["type"] == ["null", "string"]
    assert "doc" not in by_name["priority"]
    fastavro.parse_schema(rendered)  # a valid Avro schema


def test_forced_and_display_columns_are_strings() -> None:
    forced = derive("incident", COLUMNS, TYPES, as_string={"priority"})
    assert {f.column: f.type for f in forced.fields}["priority"] == "string"
    assert {f.column: f.type for f in forced.fields}["active"] == "boolean"
    every = derive("incident", COLUMNS, TYPES, all_strings=True)
    assert {f.type for f in every.fields} == {"string"}


def test_colliding_names_are_numbered() -> None:
    schema = derive("t", ["a.b", "a__b"], {})
    assert [(f.name, f.column) for f in schema.fields] == [("a__b", "a.b"), ("a__b_2", "a__b")]


@given(st.text(alphabet=string.ascii_letters + string.digits + "._-$ ", min_size=1))
def test_avro_names_are_always_valid(name: str) -> None:
    out = avro_name(name)
    fastavro.parse_schema({"type": "record", "name": "r", "fields": [{"name": out, "type": "int"}]})


@given(st.lists(st.text(alphabet="ab._", min_size=1, max_size=4), max_size=8))
def test_derived_fields_are_unique_and_sorted(columns: list[str]) -> None:
    schema = derive("t", columns, {})
    names = [f.name for f in schema.fields]
    assert names == sorted(set(names))
    assert schema.columns == set(columns)
    fastavro.parse_schema(avro_schema(schema))


def test_schema_text_is_canonical() -> None:
    one = schema_text(derive("t", ["b", "a"], {"a": "integer"}), "avro")
    two = schema_text(derive("t", ["a", "b", "a"], {"a": "integer"}), "avro")
    assert one == two
    assert orjson.loads(schema_text(derive("t", ["a"], {}), "json_schema"))["type"] == "object"


def test_subject_name_strategies() -> None:
    schema = derive("incident", ["a"], {})
    assert subject_name("topic", "snow.incident", schema) == "snow.incident-value"
    assert subject_name("record", "snow.incident", schema) == "servicenow.incident"
    assert (
        subject_name("topic_record", "snow.incident", schema) == "snow.incident-servicenow.incident"
    )


ROW = {
    "sys_id": "abc",
    "number": "INC1",
    "priority": "n/a",
    "reassignment_count": "",
    "active": "true",
    "cost": "12.50",
    "score": "-1e3",
    "sys_updated_on": "2026-09-29 07:30:42",
    "due": "2026-09-29",
    "caller_id": {"link": "https://x/api/now/table/sys_user/u1", "value": "u1"},
    "caller_id.name": "Fred",
    "sys_mod_count": "3",
}


def test_avro_values_round_trip_with_unparsed_text() -> None:
    schema = derive("incident", COLUMNS, TYPES)
    value, failed = SchemaWriter(schema, 7, "avro").encode(ROW)
    assert value[:5] == frame(7) == b"\x00\x00\x00\x00\x07"
    assert failed == ("priority",)
    back = avro_read(schema, value)
    assert back["priority"] is None
    assert back["__unparsed"] == {"priority": "n/a"}
    assert back["reassignment_count"] is None  # empty non-string: null, not unparsed
    assert back["active"] is True
    assert back["cost"] == 12.5
    assert back["score"] == -1000.0
    assert back["sys_updated_on"] == datetime(2026, 9, 29, 7, 30, 42, tzinfo=UTC)
    assert back["due"] == date(2026, 9, 29)
    assert back["caller_id"] == "u1"
    assert back["caller_id__name"] == "Fred"
    assert back["number"] == "INC1"
    assert back["u_unknown"] is None  # a field the row lacks
    assert back["sys_mod_count"] == 3


def test_json_values_validate_against_the_closed_schema() -> None:
    schema = derive("incident", COLUMNS, TYPES)
    value, failed = SchemaWriter(schema, 9, "json_schema").encode(ROW)
    assert failed == ("priority",)
    assert value[:5] == frame(9)
    doc = orjson.loads(value[5:])
    jsonschema.validate(doc, json_schema(schema))
    assert doc["sys_updated_on"] == "2026-09-29T07:30:42Z"
    assert doc["due"] == "2026-09-29"
    assert doc["caller_id.name"] == "Fred"
    assert doc["priority"] is None
    assert doc["__unparsed"] == {"priority": "n/a"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "extra": "x"}, json_schema(schema))


def test_int_out_of_32_bits_is_unparsed() -> None:
    schema = derive("t", ["n"], {"n": "integer"})
    _, failed = SchemaWriter(schema, 1, "avro").encode({"n": str(2**31)})
    assert failed == ("n",)


def test_columns_outside_a_registered_schema_keep_their_text() -> None:
    schema = derive("t", ["a"], {})
    back = avro_read(schema, SchemaWriter(schema, 1, "avro").encode({"a": "x", "b": "y"})[0])
    assert back == {"a": "x", "__unparsed": {"b": "y"}}


def test_text_of_shapes() -> None:
    assert text_of("x") == "x"
    assert text_of({"link": "l", "value": "v"}) == "v"
    assert text_of({"display_value": "d", "link": "l"}) == "d"


@pytest.mark.parametrize("value_format", ["avro", "json_schema"])
def test_registered_schema_reads_back_as_ours(value_format: Any) -> None:
    schema = derive("incident", COLUMNS, TYPES)
    back = from_registered("incident", schema_text(schema, value_format), value_format)
    # A reference reads back as the string it is written as; JSON has one integer type.
    widened = {"reference": "string", "int": "int" if value_format == "avro" else "long"}
    assert [(f.name, f.column, f.type) for f in back.fields] == [
        (f.name, f.column, widened.get(f.type, f.type)) for f in schema.fields
    ]


def test_foreign_registered_schemas_are_refused_or_read() -> None:
    with pytest.raises(UnsupportedSchemaError):
        from_registered("t", '"string"', "avro")
    with pytest.raises(UnsupportedSchemaError):
        from_registered(
            "t", '{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}', "avro"
        )
    text = '{"type":"record","name":"r","fields":[{"name":"a","type":["null","long"]}]}'
    assert from_registered("t", text, "avro") == RecordSchema(
        table="t", fields=(Field("a", "a", "long"),), unparsed=False
    )


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(sorted(TYPES)),
        st.one_of(
            st.text(max_size=80),
            st.sampled_from(
                ["", "1", "-7", "true", "2026-01-31", "2026-02-30", "1969-12-31 23:59:59", "1e3"]
            ),
            st.integers(-(2**63), 2**63 - 1).map(str),
        ),
    )
)
def test_any_row_encodes_and_loses_nothing(row: dict[str, str]) -> None:
    schema = derive("incident", COLUMNS, TYPES)
    writer = SchemaWriter(schema, 1, "avro")
    value, failed = writer.encode(row)
    # Our own binary encoding is byte for byte fastavro's for the same record.
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out, fastavro.parse_schema(avro_schema(schema)), writer.record(row)[0]
    )
    assert value[5:] == out.getvalue()
    back = avro_read(schema, value)
    for column, text in row.items():
        name = avro_name(column)
        if column in failed:
            assert back[name] is None
            assert back["__unparsed"][column] == text
        elif TYPES[column] in ("GUID", "string"):
            assert back[name] == text
        elif TYPES[column] == "reference":
            assert back[name] == (text or None)
    jsonschema.validate(
        orjson.loads(SchemaWriter(schema, 1, "json_schema").encode(row)[0][5:]), json_schema(schema)
    )


@pytest.mark.parametrize(
    "text",
    [
        "2026-02-30 00:00:00",
        "2026-01-01 24:00:00",
        "2026-01-01 00:60:00",
        "2026-01-01 00:00:60",
        "2026-01-01T00:00:00",
        "2026-01-01 00:00:0",
        "\uff12026-01-01 00:00:00",  # a full-width digit
        "2026-01-01 00:00:00 ",
    ],
)
def test_malformed_date_times_are_unparsed(text: str) -> None:
    schema = derive("t", ["d"], {"d": "glide_date_time"})
    for value_format in ("avro", "json_schema"):
        assert SchemaWriter(schema, 1, value_format).encode({"d": text})[1] == ("d",)


@given(st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)))
def test_date_times_are_epoch_milliseconds(moment: datetime) -> None:
    moment = moment.replace(microsecond=0)
    schema = derive("t", ["d"], {"d": "glide_date_time"})
    value, failed = SchemaWriter(schema, 1, "avro").encode({"d": f"{moment:%Y-%m-%d %H:%M:%S}"})
    assert failed == ()
    assert avro_read(schema, value)["d"] == moment.replace(tzinfo=UTC)


def test_registered_shaper_writes_display_values_as_strings() -> None:
    schema = derive(
        "incident", ["sys_id", "sys_updated_on", "priority", "caller_id"], TYPES, all_strings=True
    )
    slot = WriterSlot()
    slot.writer = SchemaWriter(schema, 3, "avro")
    shaper = RegisteredShaper(
        display_value="true",
        exclude_reference_link=False,
        timestamp_field="sys_updated_on",
        id_field="sys_id",
        slot=slot,
    )
    row = {
        "sys_id": {"display_value": "abc", "value": "abc"},
        "sys_updated_on": {"display_value": "29.09.2026 09:30", "value": "2026-09-29 07:30:42"},
        "priority": {"display_value": "1 - Critical", "value": "1"},
        "caller_id": {"display_value": "Fred", "link": "https://x/u1", "value": "u1"},
    }
    back = avro_read(schema, shaper.value_bytes(row))
    # The cursor stays raw; every other field is the display text, a string.
    assert back == {
        "sys_id": "abc",
        "sys_updated_on": "2026-09-29 07:30:42",
        "priority": "1 - Critical",
        "caller_id": "Fred",
        "__unparsed": {},
    }
