"""Typed conversion by internal type, and the Connect JsonConverter envelope built from it."""

from __future__ import annotations

import copy
import inspect
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.connect_schema import envelope, value_schema
from snowsource.core.offsets_codec import partition_for
from snowsource.core.records import RecordShaper
from snowsource.core.typed import CONVERTED_TYPES, convert_row, convert_value

COLUMNS = {
    "sys_id": "GUID",
    "number": "string",
    "priority": "integer",
    "sys_mod_count": "integer",
    "big": "longint",
    "active": "boolean",
    "cost": "decimal",
    "ratio": "float",
    "sys_updated_on": "glide_date_time",
    "due": "glide_date",
    "caller_id": "reference",
    "comments": "journal",
    "category": "choice",
    "sys_class_name": "sys_class_name",
    "sys_domain": "domain_id",
}


@pytest.mark.parametrize(
    ("internal_type", "raw", "expected"),
    [
        ("integer", "3", 3),
        ("integer", "-5", -5),
        ("integer", "0", 0),
        ("longint", "9223372036854775807", 2**63 - 1),
        ("longint", "-9223372036854775808", -(2**63)),
        ("boolean", "true", True),
        ("boolean", "false", False),
        ("boolean", "TRUE", True),
        ("decimal", "1234.56", 1234.56),
        ("decimal", "-0.5", -0.5),
        ("decimal", "12", 12.0),
        ("float", "1.5e3", 1500.0),
        ("float", ".25", 0.25),
        ("glide_date_time", "2026-09-29 07:30:42", "2026-09-29T07:30:42Z"),
        ("glide_date", "2026-09-29", "2026-09-29"),
        ("reference", "8f4bc0d1c611227a0100e2d3f8a6b9e1", "8f4bc0d1c611227a0100e2d3f8a6b9e1"),
    ],
)
def test_each_converted_type(internal_type: str, raw: str, expected: Any) -> None:
    value, parsed = convert_value(raw, internal_type)
    assert parsed
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("internal_type", sorted(CONVERTED_TYPES))
def test_empty_value_of_a_non_string_type_is_null(internal_type: str) -> None:
    assert convert_value("", internal_type) == (None, True)


@pytest.mark.parametrize(
    "internal_type",
    ["string", "GUID", "journal", "journal_input", "choice", "sys_class_name", "domain_id", None],
)
@pytest.mark.parametrize("raw", ["", "1", "true", "2026-09-29 07:30:42", "n/a"])
def test_string_types_and_unknown_columns_stay_as_they_are(
    internal_type: str | None, raw: str
) -> None:
    assert convert_value(raw, internal_type) == (raw, True)


@pytest.mark.parametrize(
    ("internal_type", "raw"),
    [
        ("integer", "n/a"),
        ("integer", "1.5"),
        ("integer", " 3"),
        ("integer", "1_000"),
        ("integer", "٣"),  # an Arabic-Indic digit: int() would take it
        ("longint", "9223372036854775808"),  # one past int64
        ("boolean", "yes"),
        ("boolean", "1"),
        ("decimal", "1,5"),
        ("decimal", "inf"),
        ("decimal", "nan"),
        ("float", "1e999"),
        ("glide_date_time", "2026-09-29T07:30:42Z"),
        ("glide_date_time", "2026-02-30 07:30:42"),
        ("glide_date_time", "2026-09-29"),
        ("glide_date", "2026-13-01"),
        ("glide_date", "09/29/2026"),
    ],
)
def test_a_value_that_does_not_parse_stays_a_string(internal_type: str, raw: str) -> None:
    assert convert_value(raw, internal_type) == (raw, False)


def test_reference_objects_are_kept_and_display_pairs_convert_their_value() -> None:
    link = {"link": "https://x/api/now/table/sys_user/abc", "value": "abc"}
    assert convert_value(link, "reference") == (link, True)
    assert convert_value({"link": "https://x", "value": ""}, "reference") == (None, True)
    pair = {"display_value": "2 - High", "value": "2"}
    assert convert_value(pair, "integer") == ({"display_value": "2 - High", "value": 2}, True)
    bad = {"display_value": "?", "value": "n/a"}
    assert convert_value(bad, "integer") == (bad, False)
    empty = {"display_value": "", "value": ""}
    assert convert_value(empty, "glide_date") == ({"display_value": "", "value": None}, True)


def _row() -> dict[str, Any]:
    return {
        "sys_id": "8f4bc0d1c611227a0100e2d3f8a6b9e1",
        "number": "INC0010001",
        "priority": "2",
        "sys_mod_count": "4",
        "big": "",
        "active": "true",
        "cost": "n/a",
        "ratio": "0.5",
        "sys_updated_on": "2026-09-29 07:30:42",
        "due": "2026-10-01",
        "caller_id": "",
        "comments": "",
        "category": "network",
        "sys_class_name": "incident",
        "sys_domain": "global",
        "u_unknown": "42",
    }


def test_convert_row_converts_counts_and_leaves_the_raw_row_alone() -> None:
    row = _row()
    before = copy.deepcopy(row)
    typed = convert_row(row, COLUMNS)
    assert row == before
    assert typed.values == {
        **before,
        "priority": 2,
        "sys_mod_count": 4,
        "big": None,
        "active": True,
        "ratio": 0.5,
        "sys_updated_on": "2026-09-29T07:30:42Z",
        "caller_id": None,
    }
    assert typed.unparsed == ("cost",)
    assert list(typed.values) == list(row)  # field order kept
    assert typed.kinds["cost"] == "string"
    assert typed.kinds["u_unknown"] == "string"


def test_shape_options_change_neither_partition_nor_cursor() -> None:
    # The partition is a function of identity fields only: nothing about the value's shape.
    assert set(inspect.signature(partition_for).parameters) == {
        "snow_url",
        "table",
        "query",
        "query_domain",
        "timestamp_field",
    }
    row = _row()
    shaper = RecordShaper("false", True, "sys_updated_on", "sys_id")
    cursor = (shaper.raw(row, "sys_updated_on"), shaper.raw(row, "sys_id"))
    typed = convert_row(row, COLUMNS)
    envelope(typed, "servicenow.incident")
    # The cursor is read from the raw row, which conversion and the envelope never touch.
    assert (shaper.raw(row, "sys_updated_on"), shaper.raw(row, "sys_id")) == cursor
    assert cursor == ("2026-09-29 07:30:42", "8f4bc0d1c611227a0100e2d3f8a6b9e1")


def test_envelope_schema_matches_payload() -> None:
    typed = convert_row(_row(), COLUMNS)
    env = envelope(typed, "servicenow.incident")
    assert env["payload"] == typed.values
    schema = env["schema"]
    assert schema["type"] == "struct"
    assert schema["optional"] is False
    assert schema["name"] == "servicenow.incident"
    types = {f["field"]: f["type"] for f in schema["fields"]}
    assert types == {
        "sys_id": "string",
        "number": "string",
        "priority": "int64",
        "sys_mod_count": "int64",
        "big": "int64",  # null, but declared by its column
        "active": "boolean",
        "cost": "string",  # did not parse: declared a string in this record
        "ratio": "double",
        "sys_updated_on": "string",
        "due": "string",
        "caller_id": "string",
        "comments": "string",
        "category": "string",
        "sys_class_name": "string",
        "sys_domain": "string",
        "u_unknown": "string",
    }
    assert all(f["optional"] is True for f in schema["fields"])
    assert [f["field"] for f in schema["fields"]] == list(env["payload"])
    assert orjson.loads(orjson.dumps(envelope(typed, "servicenow.incident"))) == env


def test_envelope_nested_objects_become_structs() -> None:
    row = {
        "caller_id": {"link": "https://x/api/now/table/sys_user/abc", "value": "abc"},
        "priority": {"display_value": "2 - High", "value": "2"},
    }
    schema = value_schema(convert_row(row, {"caller_id": "reference", "priority": "integer"}))
    assert schema["fields"] == [
        {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": True, "field": "link"},
                {"type": "string", "optional": True, "field": "value"},
            ],
            "optional": True,
            "field": "caller_id",
        },
        {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": True, "field": "display_value"},
                {"type": "int64", "optional": True, "field": "value"},
            ],
            "optional": True,
            "field": "priority",
        },
    ]


_TYPES = st.sampled_from(
    [*sorted(CONVERTED_TYPES), "string", "GUID", "journal", "choice", "domain_id"]
)
_JSON_KIND = {bool: "boolean", int: "int64", float: "double", str: "string"}


@given(
    st.dictionaries(
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
        st.tuples(_TYPES, st.one_of(st.text(max_size=20), st.from_regex(r"-?[0-9]{1,20}"))),
        max_size=12,
    )
)
def test_every_declared_type_matches_its_payload_value(
    spec: dict[str, tuple[str, str]],
) -> None:
    row = {name: raw for name, (_, raw) in spec.items()}
    columns = {name: internal_type for name, (internal_type, _) in spec.items()}
    typed = convert_row(row, columns)
    schema = value_schema(typed)
    for field in schema["fields"]:
        value = typed.values[field["field"]]
        if value is not None:
            assert _JSON_KIND[type(value)] == field["type"], (field, value)
        if field["field"] in typed.unparsed:
            assert field["type"] == "string"
            assert value == row[field["field"]]
    # The envelope survives a JSON round trip unchanged (no NaN, no int beyond int64).
    assert orjson.loads(orjson.dumps(envelope(typed))) == envelope(typed)
