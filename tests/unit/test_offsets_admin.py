"""Offsets administration logic: classification, Connect REST listing, submitted offsets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson
import pytest

from snowsource.core.errors import OffsetError
from snowsource.core.offsets_codec import (
    SourceOffset,
    SourcePartition,
    StoredEntry,
    encode_key,
    encode_value,
    legacy_partition_for,
    partition_for,
)
from snowsource.core.offsets_plan import (
    Match,
    OffsetChange,
    connect_listing,
    list_offsets,
    parse_offsets_document,
    rewind_offset,
    set_offset,
    validate_change,
    validate_changes,
)

URL = "https://acme.service-now.com"
CONNECTOR = "servicenow-source"


@dataclass(frozen=True)
class Table:
    alias: str
    partition: SourcePartition
    legacy_partition: SourcePartition
    id_field: str = "sys_id"


def table(alias: str, name: str, query: str | None = None, *, domain: bool = True) -> Table:
    common = {
        "snow_url": URL,
        "table": name,
        "query": query,
        "query_domain": domain,
        "timestamp_field": "sys_updated_on",
    }
    return Table(alias, partition_for(**common), legacy_partition_for(**common))  # type: ignore[arg-type]


INCIDENT = table("incident", "incident", "priority<=2^active=true")
CHANGE = table("change", "change_request")
TABLES = [INCIDENT, CHANGE]


def offset(
    partition: SourcePartition, ts: str = "2026-09-29 07:30:42", sys_id: str = "a1" * 16
) -> dict[str, str]:
    return SourceOffset(ts, sys_id, "stream", partition.query_fingerprint).as_dict()


def entry(
    partition: SourcePartition | Mapping[str, object], value: object, *, key: bytes | None = None
) -> StoredEntry:
    mapping = partition.as_dict() if isinstance(partition, SourcePartition) else partition
    return StoredEntry(
        key=key if key is not None else encode_key(CONNECTOR, mapping),
        partition={**mapping},
        value=orjson.dumps(value),
    )


# --------------------------------------------------------------------------------------------
# Listing


def test_configured_partition_with_valid_offset_is_ok() -> None:
    (item,) = list_offsets(
        CONNECTOR, [entry(INCIDENT.partition, offset(INCIDENT.partition))], TABLES
    )
    assert (item.alias, item.match, item.note, item.canonical) == ("incident", Match.OK, "", True)
    assert item.table == "incident"
    assert item.field("timestamp") == "2026-09-29 07:30:42"
    assert item.field("phase") == "stream"


def test_configured_partition_with_wrong_fingerprint_is_invalid_and_says_why() -> None:
    bad = {**offset(INCIDENT.partition), "fingerprint": "sha256:00"}
    (item,) = list_offsets(CONNECTOR, [entry(INCIDENT.partition, bad)], TABLES)
    assert item.alias == "incident"
    assert item.match == Match.INVALID
    assert "differs from the partition's query_fingerprint" in item.note
    assert "never guesses" not in item.note  # the reset advice is for the daemon's log


def test_same_table_with_other_query_is_stale() -> None:
    old = table("incident", "incident", "active=true").partition
    (item,) = list_offsets(CONNECTOR, [entry(old, offset(old))], TABLES)
    assert item.alias is None
    assert item.match == Match.STALE
    assert "'incident'" in item.note
    assert old.query_fingerprint in item.note


def test_query_domain_change_is_stale_too() -> None:
    other = table("incident", "incident", "priority<=2^active=true", domain=False).partition
    (item,) = list_offsets(CONNECTOR, [entry(other, offset(other))], TABLES)
    assert item.match == Match.STALE


def test_table_no_longer_configured_is_removed() -> None:
    gone = table("problem", "problem").partition
    (item,) = list_offsets(CONNECTOR, [entry(gone, offset(gone))], TABLES)
    assert (item.alias, item.match) == (None, Match.REMOVED)
    assert "problem" in item.note


def test_other_instance_is_removed_not_stale() -> None:
    moved = partition_for(
        snow_url="https://other.service-now.com",
        table="incident",
        query="priority<=2^active=true",
        query_domain=True,
        timestamp_field="sys_updated_on",
    )
    (item,) = list_offsets(CONNECTOR, [entry(moved, offset(moved))], TABLES)
    assert item.match == Match.REMOVED


def test_java_connector_partition_is_legacy() -> None:
    legacy = INCIDENT.legacy_partition
    assert legacy != INCIDENT.partition  # the query reorders under normalisation
    (item,) = list_offsets(CONNECTOR, [entry(legacy, offset(legacy))], TABLES)
    assert (item.alias, item.match) == (None, Match.LEGACY)
    assert "incident" in item.note


def test_partition_of_another_shape_is_unknown() -> None:
    (item,) = list_offsets(CONNECTOR, [entry({"filename": "/tmp/x"}, {"position": 3})], TABLES)
    assert (item.alias, item.match, item.table) == (None, Match.UNKNOWN, "?")


def test_value_that_is_not_json_is_invalid() -> None:
    broken = StoredEntry(
        key=encode_key(CONNECTOR, INCIDENT.partition),
        partition={**INCIDENT.partition.as_dict()},
        value=b"{not json",
    )
    (item,) = list_offsets(CONNECTOR, [broken], TABLES)
    assert item.match == Match.INVALID
    assert item.offset is None
    assert "not JSON" in item.note


def test_foreign_spelling_is_listed_once_and_canonical_wins() -> None:
    reordered = dict(reversed(list(INCIDENT.partition.as_dict().items())))
    foreign_key = orjson.dumps([CONNECTOR, reordered])
    assert foreign_key != encode_key(CONNECTOR, INCIDENT.partition)
    foreign = entry(reordered, offset(INCIDENT.partition, sys_id="0" * 32), key=foreign_key)
    canonical = entry(INCIDENT.partition, offset(INCIDENT.partition, sys_id="1" * 32))

    (only_foreign,) = list_offsets(CONNECTOR, [foreign], TABLES)
    assert only_foreign.canonical is False
    assert only_foreign.field("sys_id") == "0" * 32
    assert list(only_foreign.partition) == list(INCIDENT.partition.as_dict())  # canonical order

    for order in ([foreign, canonical], [canonical, foreign]):
        (item,) = list_offsets(CONNECTOR, order, TABLES)
        assert item.canonical is True
        assert item.field("sys_id") == "1" * 32


def test_listing_order_configured_first_then_orphans_by_table() -> None:
    gone = table("zzz", "aaa_removed").partition
    stale = table("x", "incident", "active=true").partition
    entries = [
        entry(gone, offset(gone)),
        entry(CHANGE.partition, offset(CHANGE.partition)),
        entry(stale, offset(stale)),
        entry(INCIDENT.partition, offset(INCIDENT.partition)),
    ]
    listed = list_offsets(CONNECTOR, entries, TABLES)
    assert [(i.alias, i.table) for i in listed] == [
        ("incident", "incident"),
        ("change", "change_request"),
        (None, "aaa_removed"),
        (None, "incident"),
    ]


def test_partitions_the_caller_deleted_are_listed_with_a_null_offset_like_connect() -> None:
    value = offset(CHANGE.partition)
    reordered = dict(reversed(list(INCIDENT.partition.as_dict().items())))
    deleted = [
        encode_key(CONNECTOR, INCIDENT.partition.as_dict()),
        orjson.dumps([CONNECTOR, reordered]),  # the same partition, another spelling: once
        encode_key(CONNECTOR, CHANGE.partition.as_dict()),  # written again since: its value
        encode_key("another-connector", INCIDENT.partition.as_dict()),
        b"not a key",
    ]
    listing = connect_listing(CONNECTOR, [entry(CHANGE.partition, value)], TABLES, deleted=deleted)
    assert listing == {
        "offsets": [
            {"partition": CHANGE.partition.as_dict(), "offset": value},
            {"partition": INCIDENT.partition.as_dict(), "offset": None},
        ]
    }
    listed = listing["offsets"][1]["partition"]
    assert isinstance(listed, dict)
    assert list(listed) == list(INCIDENT.partition.as_dict())  # canonical key order


def test_connect_listing_is_the_rest_shape_with_canonical_partition_order() -> None:
    value = offset(CHANGE.partition)
    listing = connect_listing(CONNECTOR, [entry(CHANGE.partition, value)], TABLES)
    assert listing == {"offsets": [{"partition": CHANGE.partition.as_dict(), "offset": value}]}
    partition = listing["offsets"][0]["partition"]
    assert isinstance(partition, dict)
    assert list(partition) == [
        "instance",
        "timestamp_field",
        "query_fingerprint",
        "table",
    ]


# --------------------------------------------------------------------------------------------
# Submitted offsets


def test_valid_submission_for_configured_table_in_any_key_order() -> None:
    shuffled = dict(sorted(INCIDENT.partition.as_dict().items()))
    change = validate_change(shuffled, offset(INCIDENT.partition), TABLES)
    assert change == OffsetChange(
        partition=INCIDENT.partition,
        offset=SourceOffset(
            "2026-09-29 07:30:42", "a1" * 16, "stream", INCIDENT.partition.query_fingerprint
        ),
        alias="incident",
    )
    assert change.key(CONNECTOR) == encode_key(CONNECTOR, INCIDENT.partition)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        ({"timestamp": "2026-09-29T07:30:42"}, "not formatted YYYY-MM-DD HH:MM:SS"),
        ({"timestamp": "2026-02-30 00:00:00"}, "not a real date"),
        ({"phase": "done"}, "unknown phase"),
        ({"fingerprint": "sha256:00"}, "differs from the partition's query_fingerprint"),
        ({"version": "2"}, "unsupported offset version"),
        ({"sys_id": 5}, "is not a string"),
        ({"extra": "x"}, "unexpected key"),
    ],
)
def test_invalid_offsets_are_refused_like_the_daemon(
    mutate: dict[str, object], reason: str
) -> None:
    value = {**offset(INCIDENT.partition), **mutate}
    with pytest.raises(OffsetError, match=reason) as info:
        validate_change(INCIDENT.partition.as_dict(), value, TABLES)
    assert "'incident'" in str(info.value)
    assert "never guesses" not in str(info.value)


def test_missing_key_is_refused() -> None:
    value = offset(INCIDENT.partition)
    del value["sys_id"]
    with pytest.raises(OffsetError, match="missing key"):
        validate_change(INCIDENT.partition.as_dict(), value, TABLES)


def test_null_offset_is_a_tombstone_for_any_snowsource_partition() -> None:
    gone = table("problem", "problem").partition
    assert validate_change(gone.as_dict(), None, TABLES) == OffsetChange(gone, None, None)
    assert validate_change(CHANGE.partition.as_dict(), None, TABLES).alias == "change"


def test_unconfigured_partition_needs_allow_unconfigured_and_its_own_fingerprint() -> None:
    gone = table("problem", "problem").partition
    with pytest.raises(OffsetError, match="no configured table has partition"):
        validate_change(gone.as_dict(), offset(gone), TABLES)
    change = validate_change(gone.as_dict(), offset(gone), TABLES, allow_unconfigured=True)
    assert change.alias is None
    assert change.offset is not None
    with pytest.raises(OffsetError, match="differs from the partition's query_fingerprint"):
        validate_change(gone.as_dict(), offset(INCIDENT.partition), TABLES, allow_unconfigured=True)


@pytest.mark.parametrize(
    ("partition", "message"),
    [
        ([], "must be a JSON object, got an array"),
        ({"filename": "/tmp/x"}, "not a snowsource partition"),
        ({**INCIDENT.partition.as_dict(), "table": 5}, "not a snowsource partition"),
        ({**INCIDENT.partition.as_dict(), "extra": "x"}, "not a snowsource partition"),
    ],
)
def test_foreign_partitions_are_refused(partition: object, message: str) -> None:
    with pytest.raises(OffsetError, match=message):
        validate_change(partition, None, TABLES, allow_unconfigured=True)


def test_validate_changes_reports_every_problem_at_once() -> None:
    pairs: list[tuple[object, object]] = [
        (INCIDENT.partition.as_dict(), offset(INCIDENT.partition)),
        (CHANGE.partition.as_dict(), {**offset(CHANGE.partition), "phase": "x"}),
        ({"a": "b"}, None),
    ]
    with pytest.raises(OffsetError) as info:
        validate_changes(pairs, TABLES)
    text = str(info.value)
    assert "offsets[1]" in text
    assert "unknown phase" in text
    assert "offsets[2]" in text
    assert "offsets[0]" not in text


def test_validate_changes_refuses_a_partition_listed_twice() -> None:
    reordered = dict(reversed(list(CHANGE.partition.as_dict().items())))
    pairs: list[tuple[object, object]] = [
        (CHANGE.partition.as_dict(), None),
        (reordered, offset(CHANGE.partition)),
    ]
    with pytest.raises(OffsetError, match=r"offsets\[1\]: the same partition as offsets\[0\]"):
        validate_changes(pairs, TABLES)


def test_validate_changes_accepts_a_valid_batch() -> None:
    pairs: list[tuple[object, object]] = [
        (INCIDENT.partition.as_dict(), offset(INCIDENT.partition)),
        (CHANGE.partition.as_dict(), None),
    ]
    changes = validate_changes(pairs, TABLES)
    assert [(c.alias, c.offset is None) for c in changes] == [("incident", False), ("change", True)]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "expected a JSON object"),
        ({}, 'key "offsets"'),
        ({"offsets": {}}, 'key "offsets"'),
        ({"offsets": [1]}, r"offsets\[0\] must be an object"),
        ({"offsets": [{"offset": None}]}, r"offsets\[0\] must be an object"),
        ({"offsets": [{"partition": {}, "offset": None, "x": 1}]}, "unexpected key"),
    ],
)
def test_document_shape_errors(document: object, message: str) -> None:
    with pytest.raises(OffsetError, match=message):
        parse_offsets_document(document)


def test_document_pairs_and_a_reset_is_an_explicit_null() -> None:
    p = CHANGE.partition.as_dict()
    assert parse_offsets_document({"offsets": []}) == []
    assert parse_offsets_document({"offsets": [{"partition": p, "offset": None}]}) == [(p, None)]
    # A dropped "offset" key is no reset: a typo must not replay the table from the start.
    with pytest.raises(OffsetError, match=r'offsets\[0\] has no "offset" key'):
        parse_offsets_document({"offsets": [{"partition": p}]})
    assert parse_offsets_document({"offsets": [{"partition": p, "offset": {"a": "b"}}]}) == [
        (p, {"a": "b"})
    ]


# --------------------------------------------------------------------------------------------
# rewind / set


def test_rewind_offset_is_before_the_first_row_of_that_second() -> None:
    value = rewind_offset(INCIDENT.partition, "2026-01-02 03:04:05", id_field="sys_id")
    assert value.as_dict() == {
        "version": "1",
        "timestamp": "2026-01-02 03:04:05",
        "sys_id": "",
        "phase": "backfill",
        "fingerprint": INCIDENT.partition.query_fingerprint,
    }
    assert encode_value(value) == (
        b'{"phase":"backfill","sys_id":"","fingerprint":"'
        + INCIDENT.partition.query_fingerprint.encode()
        + b'","version":"1","timestamp":"2026-01-02 03:04:05"}'
    )


def test_set_offset_keeps_the_sys_id_and_writes_backfill() -> None:
    value = set_offset(CHANGE.partition, "2026-01-02 03:04:05", "abc", id_field="number")
    assert (value.timestamp, value.sys_id, value.phase) == (
        "2026-01-02 03:04:05",
        "abc",
        "backfill",
    )


@pytest.mark.parametrize("bad", ["2026-01-02", "2026-01-02 03:04:05Z", "2026-13-01 00:00:00", ""])
def test_rewind_and_set_refuse_bad_timestamps(bad: str) -> None:
    with pytest.raises(OffsetError, match="timestamp"):
        rewind_offset(INCIDENT.partition, bad, id_field="sys_id")
    with pytest.raises(OffsetError, match="timestamp"):
        set_offset(INCIDENT.partition, bad, "abc", id_field="number")
