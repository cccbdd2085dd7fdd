"""The Avro row writer generated per schema (``core/avro_rows.py``): fastavro's bytes, or None
for a row it leaves to the general writer, which then writes fastavro's bytes too."""

from __future__ import annotations

import importlib.util
import io
import shutil
import string
import sysconfig
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snowsource.core.avro_binary import unsigned, varint
from snowsource.core.avro_rows import RowEncoder, compile_encoder
from snowsource.core.avro_timestamps import LOW_28_INLINE, branch_and_low_28
from snowsource.core.records import RegisteredShaper
from snowsource.core.value_encoding import (
    SchemaWriter,
    WriterSlot,
    frame,
    kind_writer,
    timestamp_writer,
)
from snowsource.core.value_schema import RecordSchema, avro_schema, derive

TYPES = {
    "sys_id": "GUID",
    "number": "string",
    "priority": "integer",
    "reassignment_count": "longint",
    "active": "boolean",
    "cost": "currency",
    "sys_updated_on": "glide_date_time",
    "opened_at": "glide_date_time",
    "due": "glide_date",
    "caller_id": "reference",
    "caller_id.name": "string",
}
SCHEMA = derive("incident", TYPES, TYPES)

_DATE_TIMES = st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31))
_VALID: dict[str, st.SearchStrategy[str]] = {
    "GUID": st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    "string": st.text(max_size=200),
    "integer": st.integers(-(2**31), 2**31 - 1).map(str),
    "longint": st.integers(-(2**63), 2**63 - 1).map(str),
    "boolean": st.sampled_from(["true", "false"]),
    "currency": st.floats(allow_nan=False, allow_infinity=False).map(repr),
    "glide_date_time": _DATE_TIMES.map(lambda d: f"{d:%Y-%m-%d %H:%M:%S}"),
    "glide_date": st.dates().map(date.isoformat),
    "reference": st.text(alphabet="0123456789abcdef", max_size=32),
}
# Texts that do not convert, or only just: they must never be written by the generated code.
_ODD = st.one_of(
    st.text(alphabet=string.digits + " -:.eE+TZ", max_size=21),
    st.sampled_from(["", "n/a", "2026-02-30 00:00:00", "2026-01-01 24:00:00", str(2**31)]),
)


COMPILED = importlib.util.find_spec("snowsource.core._avro_rows_c") is not None
# Both writers of the common row: the generated Python code and, where setup.py built it, the
# compiled one; each is held to fastavro's bytes.
IMPLEMENTATIONS = [
    pytest.param(False, id="python"),
    pytest.param(
        True,
        id="compiled",
        marks=pytest.mark.skipif(not COMPILED, reason="no compiled writer was built"),
    ),
]


def generated(schema: RecordSchema, compiled: bool = False) -> RowEncoder:
    return compile_encoder(
        schema.fields,
        frame(1),
        unparsed=schema.unparsed,
        writer=kind_writer,
        timestamps=timestamp_writer(),
        compiled=compiled,
    )


def test_the_compiled_writer_is_built_where_a_compiler_is() -> None:
    # setup.py's extension is optional: a failing build would otherwise go unnoticed.
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    if shutil.which("gcc") is None or not headers.exists():
        pytest.skip("no C compiler or no Python headers: the generated Python code is used")
    assert COMPILED, "make install did not build snowsource/core/_avro_rows_c.c"


def fastavro_value(schema: RecordSchema, row: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    record = SchemaWriter(schema, 1, "avro").record(row)[0]
    fastavro.schemaless_writer(out, fastavro.parse_schema(avro_schema(schema)), record)
    return frame(1) + out.getvalue()


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=300)
@given(
    st.fixed_dictionaries({column: st.one_of(_VALID[kind], _ODD) for column, kind in TYPES.items()})
)
@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_every_complete_row_is_fastavros_bytes_by_either_writer(
    compiled: bool, row: dict[str, str]
) -> None:
    value, failed = SchemaWriter(SCHEMA, 1, "avro").encode(row)
    assert value == fastavro_value(SCHEMA, row)
    fast = generated(SCHEMA, compiled)(row)
    # The generated code writes every row whose values all convert, and no other.
    assert (fast is None) == bool(failed)
    if fast is not None:
        assert fast == value


@settings(deadline=None)
@given(_DATE_TIMES, st.lists(st.integers(0, 3599), min_size=1, max_size=8))
def test_date_times_of_a_remembered_hour_are_fastavros_bytes(
    moment: datetime, offsets: list[int]
) -> None:
    schema = derive("t", ["d"], {"d": "glide_date_time"})
    hour = moment.replace(minute=0, second=0, microsecond=0)
    for offset in [*offsets, *offsets]:  # the second time round, every hour is remembered
        text = f"{hour + timedelta(seconds=offset):%Y-%m-%d %H:%M:%S}"
        value, failed = SchemaWriter(schema, 1, "avro").encode({"d": text})
        assert failed == ()
        assert value == fastavro_value(schema, {"d": text})


@pytest.mark.parametrize(
    "change",
    [
        {"priority": None},  # JSON null
        {"caller_id": {"link": "https://x/u1", "value": "u1"}},  # a reference object
        {"number": 7},
        {"sys_updated_on": ["2026-01-01 00:00:00"]},
        {"u_new": "x"},  # a column the schema lacks
        {"priority": "n/a"},  # does not convert
    ],
)
@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_other_rows_are_left_to_the_general_writer(compiled: bool, change: dict[str, Any]) -> None:
    row: dict[str, Any] = {
        column: "1" if kind in ("integer", "longint") else "" for column, kind in TYPES.items()
    }
    assert generated(SCHEMA, compiled)(row) is not None
    odd = {**row, **change}
    assert generated(SCHEMA, compiled)(odd) is None
    value, _ = SchemaWriter(SCHEMA, 1, "avro").encode(odd)
    assert value == fastavro_value(SCHEMA, odd)


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_a_missing_column_is_left_to_the_general_writer(compiled: bool) -> None:
    row = dict.fromkeys((c for c in TYPES if c != "due"), "")
    assert generated(SCHEMA, compiled)(row) is None
    assert SchemaWriter(SCHEMA, 1, "avro").encode(row)[0] == fastavro_value(SCHEMA, row)


def test_remembered_texts_stay_bounded() -> None:
    writer = kind_writer("long")
    for n in range(10_000):
        assert writer[str(n)] == b"\x02" + varint(n)
    assert 0 < len(writer) <= 8192


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_a_schema_without_fields_writes_the_unparsed_map_only(compiled: bool) -> None:
    schema = RecordSchema("t", ())
    assert generated(schema, compiled)({}) == frame(1) + b"\x00"
    assert generated(schema, compiled)({"a": "x"}) is None
    assert SchemaWriter(schema, 1, "avro").encode({"a": "x"})[0] == fastavro_value(
        schema, {"a": "x"}
    )


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_values_read_back_as_the_typed_row(compiled: bool) -> None:
    row = {
        "sys_id": "a" * 32,
        "number": "INC0010001",
        "priority": "3",
        "reassignment_count": "12",
        "active": "true",
        "cost": "12.5",
        "sys_updated_on": "2026-09-29 07:30:42",
        "opened_at": "2026-09-29 07:30:42",
        "due": "2026-09-30",
        "caller_id": "",
        "caller_id.name": "Fred",
    }
    for _ in range(2):  # the second row's hour is remembered
        value = generated(SCHEMA, compiled)(row)
        assert value is not None
        parsed = fastavro.parse_schema(avro_schema(SCHEMA))
        back = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
        assert back == {
            "active": True,
            "caller_id": None,
            "caller_id__name": "Fred",
            "cost": 12.5,
            "due": date(2026, 9, 30),
            "number": "INC0010001",
            "opened_at": datetime(2026, 9, 29, 7, 30, 42, tzinfo=UTC),
            "priority": 3,
            "reassignment_count": 12,
            "sys_id": "a" * 32,
            "sys_updated_on": datetime(2026, 9, 29, 7, 30, 42, tzinfo=UTC),
            "__unparsed": {},
        }


@pytest.mark.skipif(not COMPILED, reason="no compiled writer was built")
@pytest.mark.parametrize(
    "text",
    [
        "x" * 10_000,  # beyond the generated code's table of string headers
        "é" * 5000 + "\U0001f600",  # UTF-8 longer than the text
        "",
    ],
)
def test_the_compiled_writer_writes_long_and_non_ascii_strings(text: str) -> None:
    row = {
        "sys_id": "a" * 32,
        "number": text,
        "caller_id": text,
        "opened_at": "0001-01-01 00:00:00",
    }
    schema = derive("t", row, {**TYPES, "opened_at": "glide_date_time"})
    value = generated(schema, compiled=True)(row)
    assert value == SchemaWriter(schema, 1, "avro").encode(row)[0] == fastavro_value(schema, row)


@given(st.integers(1 << 28, 1 << 62))
def test_the_low_28_bits_of_a_long_inline_or_called_are_its_varints(n: int) -> None:
    expected = b"\x02" + unsigned(n)[:4]
    assert branch_and_low_28(n) == expected
    assert eval(LOW_28_INLINE, {}, {"n": n}) == expected


def test_the_registered_shaper_writes_common_and_other_rows() -> None:
    slot = WriterSlot()
    slot.writer = SchemaWriter(SCHEMA, 1, "avro")
    shaper = RegisteredShaper(
        display_value="false",
        exclude_reference_link=False,
        timestamp_field="sys_updated_on",
        id_field="sys_id",
        slot=slot,
    )
    common: dict[str, Any] = dict.fromkeys(TYPES, "") | {"sys_id": "r1"}
    other = common | {"sys_id": "r2", "priority": "n/a", "caller_id": {"link": "l", "value": "u"}}
    for row in (common, other):
        assert shaper.value_bytes(row) == fastavro_value(SCHEMA, row)
    assert shaper.unparsed == {"r2": ("priority",)}
