"""Offsets-topic bytes: shared vectors, connect-offsets §9.2 and golden output of real Java.

The golden HashMap orders, hash codes, escapes and doubles below were produced once by
``java.util.HashMap`` + Jackson 2.16.2 (Kafka 3.9.2's classpath) on JDK 25, so CI needs no JVM.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.errors import OffsetError, SnowsourceError
from snowsource.core.offsets_codec import (
    PHASES,
    SourceOffset,
    SourcePartition,
    cursor_id_problem,
    decode_value,
    encode_connect_json,
    encode_key,
    encode_value,
    instance_from_url,
    jackson_string,
    java_hashmap_order,
    java_string_hash,
    kafka_partition_for_key,
    legacy_partition_for,
    parse_key,
    partition_for,
    validate_offset,
)
from tests.vectors import vector

OFFSET_KEYS = vector("offset_keys.json")["cases"]
FINGERPRINTS = vector("fingerprints.json")["cases"]


def _case_id(case: dict[str, Any]) -> str:
    return f"{case['connector']}|{case['snow_url']}|{case['table']}|{case['query']}"


# ------------------------------------------------------------------------------------------
# Shared vectors: offset_keys.json, byte for byte


@pytest.mark.parametrize("case", OFFSET_KEYS, ids=_case_id)
def test_offset_keys_vector(case: dict[str, Any]) -> None:
    partition = partition_for(
        snow_url=case["snow_url"],
        table=case["table"],
        query=case["query"],
        query_domain=case["query_domain"],
        timestamp_field=case["timestamp_field"],
    )
    assert partition.as_dict() == case["partition"]
    key = case["key_utf8"].encode("utf-8")
    assert encode_key(case["connector"], partition) == key
    # The vector's own dict is in another key order: the key bytes must not depend on it.
    assert list(case["partition"]) != list(partition.as_dict())
    assert encode_key(case["connector"], case["partition"]) == key
    assert kafka_partition_for_key(key, 25) == case["kafka_partition_of_25"]
    assert parse_key(key) == (case["connector"], case["partition"])
    assert SourcePartition.from_mapping(case["partition"]) == partition

    offset = SourceOffset(**case["offset"])
    value = case["value_utf8"].encode("utf-8")
    assert encode_value(offset) == value
    assert list(offset.as_dict()) == list(case["offset"])
    assert (
        validate_offset(decode_value(value), partition, id_field=None, describe="vector") == offset
    )


def test_partition_keys_are_in_hashmap_order() -> None:
    partition = SourcePartition("i", "ts", "fp", "t")
    keys = list(partition.as_dict())
    assert keys == ["instance", "timestamp_field", "query_fingerprint", "table"]
    for permutation in itertools.permutations(keys):
        assert java_hashmap_order(permutation) == keys


@pytest.mark.parametrize("case", FINGERPRINTS, ids=lambda c: repr(c["query"]))
def test_partition_fingerprints(case: dict[str, Any]) -> None:
    common: dict[str, Any] = {
        "snow_url": "https://acme.service-now.com",
        "table": case["table"],
        "query": case["query"],
        "query_domain": case["query_domain"],
        "timestamp_field": "sys_updated_on",
    }
    current = partition_for(**common)
    legacy = legacy_partition_for(**common)
    assert current.query_fingerprint == case["fingerprint"]
    assert legacy.query_fingerprint == case["legacy_fingerprint"]
    assert (current.instance, current.table, current.timestamp_field) == (
        legacy.instance,
        legacy.table,
        legacy.timestamp_field,
    )
    assert (current == legacy) == (case["fingerprint"] == case["legacy_fingerprint"])


# ------------------------------------------------------------------------------------------
# connect-offsets §9.2 worked examples


WorkedExample = tuple[str, dict[str, object], bytes, dict[str, object] | None, bytes, int]

WORKED_EXAMPLES: list[WorkedExample] = [
    (
        "local-file-source",
        {"filename": "/tmp/test.txt"},
        b'["local-file-source",{"filename":"/tmp/test.txt"}]',
        {"position": 30},
        b'{"position":30}',
        21,
    ),
    (
        "jdbc-orders",
        {"table": "mydb.public.orders", "protocol": "1"},
        b'["jdbc-orders",{"protocol":"1","table":"mydb.public.orders"}]',
        {"incrementing": 42, "timestamp": 1700000000000, "timestamp_nanos": 0},
        b'{"timestamp_nanos":0,"incrementing":42,"timestamp":1700000000000}',
        19,
    ),
    (
        "pg-cdc",
        {"table": "orders", "schema": "public"},
        b'["pg-cdc",{"schema":"public","table":"orders"}]',
        {"txid": 991, "lsn": 123456789},
        b'{"lsn":123456789,"txid":991}',
        20,
    ),
    (
        "dbz-sql",
        {"server": "srv1", "database": "testDB"},
        b'["dbz-sql",{"server":"srv1","database":"testDB"}]',
        {"commit_lsn": "00000025:00000d98:0002"},
        b'{"commit_lsn":"00000025:00000d98:0002"}',
        5,
    ),
    (
        "c",
        {"s": "\x1f\x7f\u2028\u00e9\U0001f600"},
        b'["c",{"s":"\\u001F' + bytes.fromhex("7fe280a8c3a9") + b'\\uD83D\\uDE00"}]',
        None,
        b"",
        22,
    ),
]


@pytest.mark.parametrize("example", WORKED_EXAMPLES, ids=[row[0] for row in WORKED_EXAMPLES])
def test_worked_examples(example: WorkedExample) -> None:
    connector, partition, key, value, value_bytes, p25 = example
    assert encode_key(connector, partition) == key
    # Any input order of the same map gives the same key (no two of these keys share a bucket).
    reordered = dict(reversed(list(partition.items())))
    assert encode_key(connector, reordered) == key
    assert kafka_partition_for_key(key, 25) == p25
    assert parse_key(key) == (connector, partition)
    if value is not None:
        assert encode_connect_json(value) == value_bytes


def test_tombstone_is_a_null_value() -> None:
    assert encode_value(None) is None


@pytest.mark.parametrize(
    ("wrong", "connector", "partition"),
    [
        (b'["jdbc-orders",{"table":"mydb.public.orders","protocol":"1"}]', "jdbc-orders", None),
        (b'["c", {"a": "b"}]', "c", {"a": "b"}),
        (b'["c",{"s":"\\u001f"}]', "c", {"s": "\x1f"}),
        ('["c",{"s":"\U0001f600"}]'.encode(), "c", {"s": "\U0001f600"}),
    ],
)
def test_wrong_spellings_parse_but_are_not_canonical(
    wrong: bytes, connector: str, partition: dict[str, object] | None
) -> None:
    parsed = parse_key(wrong)
    assert parsed is not None
    name, mapping = parsed
    assert name == connector
    if partition is not None:
        assert mapping == partition
    canonical = encode_key(name, mapping)
    assert canonical != wrong
    assert parse_key(canonical) == parsed


# ------------------------------------------------------------------------------------------
# Jackson escaping and String.hashCode


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("", '""'),
        ("plain", '"plain"'),
        ('"', '"\\""'),
        ("\\", '"\\\\"'),
        ("/", '"/"'),
        ("\b\t\n\f\r", '"\\b\\t\\n\\f\\r"'),
        ("\x00", '"\\u0000"'),
        ("\x0b", '"\\u000B"'),
        ("\x1a\x1f", '"\\u001A\\u001F"'),
        ("\x7f", '"\x7f"'),
        ("\x80\xa0", '"\x80\xa0"'),
        ("\u2028\u2029", '"\u2028\u2029"'),
        ("\u00e9", '"\u00e9"'),
        ("\ufeff\uffff", '"\ufeff\uffff"'),
        ("\U0001f600", '"\\uD83D\\uDE00"'),
        ("a\U0010ffffb", '"a\\uDBFF\\uDFFFb"'),
        ("\ud800", '"\\uD800"'),
        ("x\udc00y", '"x\\uDC00y"'),
    ],
)
def test_jackson_string(text: str, literal: str) -> None:
    assert jackson_string(text) == literal


def test_jackson_escapes_every_control_character_in_upper_case() -> None:
    short = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
    for code in range(0x20):
        expected = short.get(code, f"\\u{code:04X}")
        assert jackson_string(chr(code)) == f'"{expected}"'
    for code in range(0x20, 0x80):
        if chr(code) not in '"\\':
            assert jackson_string(chr(code)) == f'"{chr(code)}"'


_LOWER_HEX_ESCAPE = re.compile(r"\\u[0-9A-F]{0,3}[a-f]")


@given(st.text())
def test_jackson_string_round_trips_as_json(text: str) -> None:
    literal = jackson_string(text)
    assert orjson.loads(literal) == text
    assert not _LOWER_HEX_ESCAPE.search(literal)
    assert all(ord(ch) <= 0xFFFF for ch in literal)
    assert all(ord(ch) >= 0x20 for ch in literal)


@pytest.mark.parametrize(
    ("text", "hash_code"),
    [
        ("", 0),
        ("Aa", 2112),
        ("BB", 2112),
        ("instance", 555127957),
        ("\u00e9", 233),
        ("\u540d\u524d", 688096),
        ("\U0001f600", 1772899),
        ("\ud83d", 55357),
        ("polygenelubricants", -2147483648),
    ],
)
def test_java_string_hash(text: str, hash_code: int) -> None:
    assert java_string_hash(text) == hash_code


@given(st.text())
def test_java_string_hash_is_int32(text: str) -> None:
    assert -(2**31) <= java_string_hash(text) < 2**31


# ------------------------------------------------------------------------------------------
# java.util.HashMap iteration order

K13 = [
    "sys_id",
    "number",
    "short_description",
    "priority",
    "state",
    "assigned_to",
    "opened_at",
    "closed_at",
    "category",
    "impact",
    "urgency",
    "caller_id",
    "active",
]
K25 = [
    *K13,
    "cl\u00e9",
    "\u540d\u524d",
    "\U0001f600emoji",
    "\u03a9mega",
    "a\u2028b",
    "x",
    "y",
    "z",
    "table",
    "schema",
    "server",
    "database",
]
K49 = [f"field_{i:02d}" for i in range(36)] + K13
AABB = ["".join(p) for p in itertools.product(["Aa", "BB"], repeat=3)]  # all hash to one code

# (keys in insertion order, Java's iteration order)
HASHMAP_GOLDEN: list[tuple[list[str], list[str]]] = [
    (["table"], ["table"]),
    (["table", "protocol"], ["protocol", "table"]),
    (["table", "schema", "database"], ["schema", "database", "table"]),
    (
        K13,
        [
            "short_description",
            "closed_at",
            "impact",
            "active",
            "priority",
            "sys_id",
            "number",
            "opened_at",
            "urgency",
            "caller_id",
            "state",
            "category",
            "assigned_to",
        ],
    ),
    (
        K13[::-1],
        [
            "short_description",
            "closed_at",
            "impact",
            "active",
            "priority",
            "opened_at",
            "number",
            "sys_id",
            "urgency",
            "caller_id",
            "state",
            "category",
            "assigned_to",
        ],
    ),
    (
        K25,
        [
            "schema",
            "short_description",
            "server",
            "sys_id",
            "number",
            "database",
            "urgency",
            "state",
            "\u03a9mega",
            "a\u2028b",
            "table",
            "assigned_to",
            "cl\u00e9",
            "closed_at",
            "impact",
            "active",
            "\u540d\u524d",
            "priority",
            "opened_at",
            "\U0001f600emoji",
            "caller_id",
            "x",
            "y",
            "z",
            "category",
        ],
    ),
    (
        K25[::-1],
        [
            "schema",
            "server",
            "short_description",
            "number",
            "sys_id",
            "database",
            "urgency",
            "state",
            "\u03a9mega",
            "table",
            "a\u2028b",
            "assigned_to",
            "cl\u00e9",
            "closed_at",
            "impact",
            "active",
            "\u540d\u524d",
            "priority",
            "opened_at",
            "\U0001f600emoji",
            "caller_id",
            "x",
            "y",
            "z",
            "category",
        ],
    ),
    (
        K49,
        [
            *[f"field_{i}" for i in range(20, 30)],
            "number",
            "state",
            "closed_at",
            "field_10",
            "field_11",
            "field_12",
            "field_13",
            "impact",
            "field_14",
            "field_15",
            "active",
            "field_16",
            "field_17",
            "field_18",
            "priority",
            "field_19",
            "opened_at",
            "caller_id",
            "short_description",
            *[f"field_0{i}" for i in range(10)],
            "sys_id",
            "urgency",
            "assigned_to",
            *[f"field_{i}" for i in range(30, 36)],
            "category",
        ],
    ),
    (
        K49[::-1],
        [
            *[f"field_{i}" for i in range(20, 30)],
            "number",
            "state",
            "closed_at",
            "field_10",
            "field_11",
            "field_12",
            "impact",
            "field_13",
            "field_14",
            "active",
            "field_15",
            "field_16",
            "field_17",
            "priority",
            "field_18",
            "field_19",
            "opened_at",
            "caller_id",
            "short_description",
            *[f"field_0{i}" for i in range(10)],
            "sys_id",
            "urgency",
            "assigned_to",
            *[f"field_{i}" for i in range(30, 36)],
            "category",
        ],
    ),
    # Equal hash codes: one bucket, insertion order kept.
    (AABB, AABB),
    (AABB[::-1], AABB[::-1]),
]


@pytest.mark.parametrize(
    ("keys", "expected"), HASHMAP_GOLDEN, ids=[f"{len(k)}-{k[0]}" for k, _ in HASHMAP_GOLDEN]
)
def test_java_hashmap_order_golden(keys: list[str], expected: list[str]) -> None:
    assert java_hashmap_order(keys) == expected


def test_java_hashmap_order_keeps_the_first_position_of_a_repeated_key() -> None:
    assert java_hashmap_order(["table", "protocol", "table"]) == ["protocol", "table"]
    assert java_hashmap_order([]) == []


def _bucket16(key: str) -> int:
    h = java_string_hash(key) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & 15


def test_bucket_collisions_keep_insertion_order() -> None:
    # Different hash codes, same bucket at capacity 16.
    same_bucket = [k for k in (f"k{i}" for i in range(2000)) if _bucket16(k) == 0][:8]
    assert len({java_string_hash(k) for k in same_bucket}) == 8
    assert java_hashmap_order(same_bucket) == same_bucket
    assert java_hashmap_order(same_bucket[::-1]) == same_bucket[::-1]
    others = [k for k in (f"o{i}" for i in range(200)) if _bucket16(k) != 0][:4]
    order = java_hashmap_order([others[0], *same_bucket, *others[1:]])
    start = order.index(same_bucket[0])
    assert order[start : start + 8] == same_bucket


def test_nine_keys_in_one_bucket_are_refused() -> None:
    nine_equal = ["".join(p) for p in itertools.product(["Aa", "BB"], repeat=4)][:9]
    assert len({java_string_hash(k) for k in nine_equal}) == 1
    with pytest.raises(ValueError, match=r"share one java\.util\.HashMap bucket"):
        java_hashmap_order(nine_equal)
    nine_bucket = [k for k in (f"k{i}" for i in range(3000)) if _bucket16(k) == 3][:9]
    with pytest.raises(ValueError, match="share one"):
        java_hashmap_order(nine_bucket)
    with pytest.raises(ValueError, match="share one"):
        encode_key("c", dict.fromkeys(nine_equal, "v"))


def test_crowded_bucket_counts_at_the_capacity_of_the_insertion() -> None:
    # Nine keys of one 16-bucket inserted among the first 12 collide before any resize, even if
    # they would split at capacity 32: Java resizes early there, so the order is not modelled.
    crowded = [k for k in (f"k{i}" for i in range(5000)) if _bucket16(k) == 5][:9]
    filler = [k for k in (f"f{i}" for i in range(500)) if _bucket16(k) != 5][:4]
    with pytest.raises(ValueError, match="capacity 16"):
        java_hashmap_order(crowded + filler)


# ------------------------------------------------------------------------------------------
# Connect JSON values


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, b"null"),
        (True, b"true"),
        (False, b"false"),
        (0, b"0"),
        (-42, b"-42"),
        (2**63 - 1, b"9223372036854775807"),
        (-(2**63), b"-9223372036854775808"),
        ("a\u00e9", '"a\u00e9"'.encode()),
        ([], b"[]"),
        ({}, b"{}"),
        ([1, "x", None, [True]], b'[1,"x",null,[true]]'),
        ({"table": {"protocol": "1"}}, b'{"table":{"protocol":"1"}}'),
    ],
)
def test_encode_connect_json(value: object, expected: bytes) -> None:
    assert encode_connect_json(value) == expected


@pytest.mark.parametrize(
    ("number", "java"),
    [
        (100.0, "100.0"),
        (0.1, "0.1"),
        (1e20, "1.0E20"),
        (1e-7, "1.0E-7"),
        (123456789.0, "1.23456789E8"),
        (-0.0, "-0.0"),
        (0.0, "0.0"),
        (5e-324, "4.9E-324"),
        (1e-323, "9.9E-324"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (1e7, "1.0E7"),
        (9999999.0, "9999999.0"),
        (0.001, "0.001"),
        (0.0009999999999999998, "9.999999999999998E-4"),
        (1e23, "1.0E23"),
        (2.0 / 3, "0.6666666666666666"),
        (-1.5, "-1.5"),
        (42.0, "42.0"),
        (0.005, "0.005"),
    ],
)
def test_doubles_are_written_like_java(number: float, java: str) -> None:
    assert encode_connect_json(number) == java.encode()


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_doubles_parse_back_to_the_same_value(number: float) -> None:
    assert float(encode_connect_json(number).decode().replace("E", "e")) == number


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (2**63, ValueError),
        (-(2**63) - 1, ValueError),
        ((1, 2), TypeError),
        (b"bytes", TypeError),
        ({1, 2}, TypeError),
        ({1: "non-string key"}, TypeError),
        ([object()], TypeError),
    ],
    ids=repr,
)
def test_encode_connect_json_rejects(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        encode_connect_json(value)


# ------------------------------------------------------------------------------------------
# Keys: rejection, parsing, canonicalisation


@pytest.mark.parametrize(
    ("partition", "error", "reason"),
    [
        ({"a": 1.5}, TypeError, "float"),
        ({"a": {"b": "c"}}, TypeError, "nested"),
        ({"a": ["b"]}, TypeError, "nested"),
        ({"a": ("b",)}, TypeError, "nested"),
        ({"a": b"x"}, TypeError, "unsupported type"),
        ({1: "x"}, TypeError, "not a string"),
        ({"a": 2**63}, ValueError, "int64"),
        ({"a": -(2**63) - 1}, ValueError, "int64"),
    ],
)
def test_encode_key_rejects(
    partition: dict[Any, object], error: type[Exception], reason: str
) -> None:
    with pytest.raises(error, match=reason):
        encode_key("c", partition)


def test_encode_key_rejects_a_non_string_connector() -> None:
    with pytest.raises(TypeError, match="connector"):
        encode_key(1, {"a": "b"})  # type: ignore[arg-type]


def test_encode_key_allows_connect_primitives() -> None:
    key = encode_key("c", {"s": "x", "n": -(2**63), "t": True, "z": None})
    assert parse_key(key) == ("c", {"s": "x", "n": -(2**63), "t": True, "z": None})


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"{}",
        b'"c"',
        b'["c"]',
        b'["c",{},1]',
        b'[1,{"a":"b"}]',
        b'[null,{"a":"b"}]',
        b'["c",null]',
        b'["c",["a"]]',
        b'["c","a"]',
        b'["\xff",{}]',
        b'["c",{"a":"b"}',
    ],
)
def test_parse_key_rejects_what_connect_ignores(data: bytes) -> None:
    assert parse_key(data) is None


def test_parse_key_accepts_any_json_spelling() -> None:
    assert parse_key(b' [ "c" , { "b" : 1 , "a" : "x" } ] ') == ("c", {"b": 1, "a": "x"})
    assert parse_key(b'["c",{}]') == ("c", {})


_PRIMITIVES = st.one_of(
    st.text(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.none(),
)


@given(st.text(), st.dictionaries(st.text(), _PRIMITIVES, max_size=30))
def test_canonicalisation_is_a_fixed_point(connector: str, partition: dict[str, object]) -> None:
    key = encode_key(connector, partition)
    parsed = parse_key(key)
    assert parsed == (connector, partition)
    assert parsed is not None
    assert encode_key(*parsed) == key
    assert list(parsed[1]) == java_hashmap_order(list(partition))


@given(st.binary(min_size=0, max_size=64), st.integers(min_value=1, max_value=200))
def test_partition_for_key_matches_aiokafka(key: bytes, partitions: int) -> None:
    all_partitions = list(range(partitions))
    expected = DefaultPartitioner()(key, all_partitions, all_partitions)
    assert kafka_partition_for_key(key, partitions) == expected


@pytest.mark.parametrize(
    ("data", "java_murmur2"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
        (b"", 275646681),
    ],
)
def test_kafka_murmur2_vectors(data: bytes, java_murmur2: int) -> None:
    assert murmur2(data) == java_murmur2 & 0xFFFFFFFF
    for partitions in (1, 7, 25, 1000):
        assert kafka_partition_for_key(data, partitions) == (java_murmur2 & 0x7FFFFFFF) % partitions


def test_kafka_partition_for_key_needs_partitions() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        kafka_partition_for_key(b"k", 0)


# ------------------------------------------------------------------------------------------
# Source partition


@pytest.mark.parametrize(
    ("url", "instance"),
    [
        ("https://acme.service-now.com", "acme.service-now.com"),
        ("https://ACME.Service-Now.com/", "acme.service-now.com"),
        ("https://acme.service-now.com/api/now?x=1", "acme.service-now.com"),
        ("HTTPS://acme.service-now.com:443", "acme.service-now.com"),
        ("http://acme.service-now.com:80/", "acme.service-now.com"),
        ("https://acme.service-now.com:8443", "acme.service-now.com:8443"),
        ("https://acme.service-now.com:80", "acme.service-now.com:80"),
        ("http://acme.service-now.com:443", "acme.service-now.com:443"),
        ("http://127.0.0.1:8080", "127.0.0.1:8080"),
        ("https://user:secret@acme.service-now.com", "acme.service-now.com"),
        ("http://[::1]:8080/", "[::1]:8080"),
        ("  https://acme.service-now.com  ", "acme.service-now.com"),
    ],
)
def test_instance_from_url(url: str, instance: str) -> None:
    assert instance_from_url(url) == instance


@pytest.mark.parametrize("url", ["acme.service-now.com", "https://", "https://acme:99999", ""])
def test_instance_from_url_rejects(url: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - urllib's and our messages differ
        instance_from_url(url)


def test_credentials_never_change_the_partition() -> None:
    common: dict[str, Any] = {
        "table": "incident",
        "query": "active=true",
        "query_domain": True,
        "timestamp_field": "sys_updated_on",
    }
    plain = partition_for(snow_url="https://acme.service-now.com", **common)
    with_user = partition_for(snow_url="https://u:p@ACME.service-now.com:443/x", **common)
    assert plain == with_user


@pytest.mark.parametrize(
    "mapping",
    [
        {"instance": "i", "timestamp_field": "ts", "query_fingerprint": "fp"},
        {
            "instance": "i",
            "timestamp_field": "ts",
            "query_fingerprint": "fp",
            "table": "t",
            "x": "",
        },
        {"instance": "i", "timestamp_field": "ts", "query_fingerprint": "fp", "table": 1},
        {"instance": None, "timestamp_field": "ts", "query_fingerprint": "fp", "table": "t"},
        {"protocol": "1", "table": "t"},
        {},
    ],
)
def test_from_mapping_rejects_other_shapes(mapping: dict[str, object]) -> None:
    assert SourcePartition.from_mapping(mapping) is None


def test_from_mapping_accepts_any_key_order() -> None:
    mapping = {"table": "t", "query_fingerprint": "fp", "timestamp_field": "ts", "instance": "i"}
    assert SourcePartition.from_mapping(mapping) == SourcePartition("i", "ts", "fp", "t")


# ------------------------------------------------------------------------------------------
# Offset values

PARTITION = SourcePartition(
    instance="acme.service-now.com",
    timestamp_field="sys_updated_on",
    query_fingerprint="sha256:" + "a" * 64,
    table="incident",
)
GOOD: dict[str, object] = {
    "version": "1",
    "timestamp": "2026-09-29 07:30:42",
    "sys_id": "8f4bc0d1c611227a0100e2d3f8a6b9e1",
    "phase": "stream",
    "fingerprint": PARTITION.query_fingerprint,
}


_DROP = object()


def _with(**changes: object) -> dict[str, object]:
    value = dict(GOOD)
    for key, item in changes.items():
        if item is _DROP:
            del value[key]
        else:
            value[key] = item
    return value


def test_phases() -> None:
    assert PHASES == ("backfill", "stream")


@pytest.mark.parametrize(
    "value",
    [
        GOOD,
        _with(sys_id=""),
        _with(phase="backfill"),
        _with(timestamp="2024-02-29 23:59:59"),
        _with(timestamp="1970-01-01 00:00:00"),
        _with(sys_id="0" * 32),
    ],
)
def test_validate_offset_accepts(value: dict[str, object]) -> None:
    offset = validate_offset(value, PARTITION, id_field="sys_id", describe="incident")
    assert offset.as_dict() == value
    assert validate_offset(
        decode_value(encode_value(offset) or b""), PARTITION, id_field="sys_id", describe="x"
    ) == (offset)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "not a JSON object (got null)"),
        ([GOOD], "not a JSON object (got list)"),
        ("text", "not a JSON object (got str)"),
        (_with(sys_id=_DROP), "missing key(s) 'sys_id'"),
        (_with(version=_DROP, phase=_DROP), "missing key(s) 'version', 'phase'"),
        (_with(extra="x"), "unexpected key(s) 'extra' (a new key needs a new version)"),
        (_with(timestamp=1700000000), "'timestamp' is not a string (got 1700000000)"),
        (_with(sys_id=None), "'sys_id' is not a string (got None)"),
        (_with(version=1), "'version' is not a string (got 1)"),
        (_with(version="2"), "unsupported offset version '2'"),
        (_with(timestamp="2026-09-29T07:30:42"), "is not formatted YYYY-MM-DD HH:MM:SS"),
        (_with(timestamp="2026-9-29 07:30:42"), "is not formatted"),
        (_with(timestamp="2026-09-29 07:30:42.5"), "is not formatted"),
        (_with(timestamp="2026-09-29 07:30"), "is not formatted"),
        (_with(timestamp=" 2026-09-29 07:30:42"), "is not formatted"),
        (_with(timestamp="2026-09-29 07:30:42\n"), "is not formatted"),
        (_with(timestamp="\uff12\uff10\uff12\uff16-09-29 07:30:42"), "is not formatted"),
        (_with(timestamp="2026-02-30 00:00:00"), "not a real date and time"),
        (_with(timestamp="2025-02-29 00:00:00"), "not a real date and time"),
        (_with(timestamp="2026-13-01 00:00:00"), "not a real date and time"),
        (_with(timestamp="2026-09-29 24:00:00"), "not a real date and time"),
        (_with(timestamp="2026-09-29 07:60:00"), "not a real date and time"),
        (_with(timestamp="2026-09-29 07:30:60"), "not a real date and time"),
        (_with(timestamp="0000-01-01 00:00:00"), "not a real date and time"),
        (_with(phase="Stream"), "unknown phase 'Stream'"),
        (_with(phase="caught_up"), "unknown phase 'caught_up'"),
        (_with(fingerprint="sha256:" + "b" * 64), "differs from the partition's query_fingerprint"),
    ],
)
def test_validate_offset_refuses(value: object, reason: str) -> None:
    describe = "table incident (partition key [...])"
    with pytest.raises(OffsetError) as caught:
        validate_offset(value, PARTITION, id_field="sys_id", describe=describe)
    message = str(caught.value)
    assert reason in message
    assert describe in message
    assert "snowsource offsets delete <alias>" in message
    assert "snowsource offsets set <alias> --timestamp" in message
    assert "--sys-id" in message
    assert isinstance(caught.value, SnowsourceError)


def test_validate_offset_names_the_alias_in_the_reset_commands() -> None:
    with pytest.raises(OffsetError, match="snowsource offsets delete incident_p1"):
        validate_offset(
            _with(phase="x"), PARTITION, id_field="sys_id", describe="t", alias="incident_p1"
        )


def test_validate_offset_lists_every_problem() -> None:
    with pytest.raises(OffsetError) as caught:
        validate_offset(
            _with(phase="x", timestamp="bad", extra=1), PARTITION, id_field="sys_id", describe="t"
        )
    message = str(caught.value)
    for reason in ("unexpected key(s) 'extra'", "timestamp 'bad'", "unknown phase 'x'"):
        assert reason in message


def test_another_version_is_judged_on_its_version_only() -> None:
    other = {"version": "2", "cursor": {"ts": 1}}
    with pytest.raises(OffsetError) as caught:
        validate_offset(other, PARTITION, id_field="sys_id", describe="t")
    assert "unsupported offset version '2'" in str(caught.value)
    assert "missing" not in str(caught.value)


@pytest.mark.parametrize("data", [b"", b"{", b"{'a':1}", b"\xff", b"[1,]"])
def test_decode_value_refuses_malformed_json(data: bytes) -> None:
    with pytest.raises(OffsetError, match="malformed JSON"):
        decode_value(data)


def test_decode_value_returns_any_json() -> None:
    assert decode_value(b'{"a":[1,2.5,null]}') == {"a": [1, 2.5, None]}
    assert decode_value(b"null") is None


@given(
    timestamp=st.datetimes().map(
        lambda d: (
            f"{d.year:04d}-{d.month:02d}-{d.day:02d} {d.hour:02d}:{d.minute:02d}:{d.second:02d}"
        )
    ),
    sys_id=st.text().filter(lambda s: cursor_id_problem(s, "number") is None),
    phase=st.sampled_from(PHASES),
)
def test_offsets_round_trip(timestamp: str, sys_id: str, phase: str) -> None:
    offset = SourceOffset(timestamp, sys_id, phase, PARTITION.query_fingerprint)
    data = encode_value(offset)
    assert data is not None
    assert validate_offset(decode_value(data), PARTITION, id_field="number", describe="t") == offset


# --------------------------------------------------------------------------------------------
# The cursor id rule (one validator: daemon load, REST PATCH, offsets set/import, emitted rows)


@pytest.mark.parametrize(
    ("sys_id", "id_field"),
    [
        ("", "sys_id"),
        ("8f4bc0d1c611227a0100e2d3f8a6b9e1", "sys_id"),
        ("8f4bc0d1c611227a0100e2d3f8a6b9e1", "inc_sys_id"),  # a database view's prefixed sys_id
        ("INC0010001", "number"),
        ("x" * 255, "number"),
        ('odd "id" \\ \U0001f600 é', "number"),
        ("anything-without-caret", None),
    ],
)
def test_cursor_id_accepted(sys_id: str, id_field: str | None) -> None:
    assert cursor_id_problem(sys_id, id_field) is None
    value = _with(sys_id=sys_id)
    assert validate_offset(value, PARTITION, id_field=id_field, describe="t").sys_id == sys_id


@pytest.mark.parametrize(
    ("sys_id", "id_field", "reason"),
    [
        ("xyz", "sys_id", "is not a sys_id (32 lowercase hex characters)"),
        ("8F4BC0D1C611227A0100E2D3F8A6B9E1", "sys_id", "is not a sys_id"),
        ("8f4bc0d1c611227a0100e2d3f8a6b9e", "sys_id", "is not a sys_id"),
        ("8f4bc0d1c611227a0100e2d3f8a6b9e1 ", "inc_sys_id", "is not a sys_id"),
        ("a^b", "sys_id", "contains '^'"),
        ("INC^NQactive=true", "number", "contains '^'"),
        ("a^b", None, "contains '^'"),
        ("x" * 256, "number", "longer than 255 characters"),
        ("x" * 10_000, "number", "'... (10000 characters) is longer than 255"),
        ("INC\n001", "number", "control characters"),
        ("INC\x00", None, "control characters"),
        ("INC\x85", "number", "control characters"),
    ],
)
def test_cursor_id_refused(sys_id: str, id_field: str | None, reason: str) -> None:
    problem = cursor_id_problem(sys_id, id_field)
    assert problem is not None
    assert reason in problem
    with pytest.raises(OffsetError, match=re.escape(reason)):
        validate_offset(_with(sys_id=sys_id), PARTITION, id_field=id_field, describe="t")


def test_a_huge_id_is_quoted_shortly() -> None:
    problem = cursor_id_problem("y" * 10_000, "number")
    assert problem is not None
    assert len(problem) < 200
