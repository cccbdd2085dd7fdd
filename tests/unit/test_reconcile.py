"""core.reconcile: the live-key array, page comparison, requests and sweep progress."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snowsource.core.offsets_codec import validate_offset
from snowsource.core.reconcile import (
    KEY_BYTES,
    RECHECK_BATCH,
    LiveKeys,
    LiveKeysBuilder,
    SweepProgress,
    audited_query,
    batches,
    compare_page,
    fresh_sweep,
    key_query,
    missing_others,
    pack,
    recheck_query,
    reconcile_alias,
    reconcile_partition,
    reconcile_spec,
)
from snowsource.core.table import TableSpec
from tests.fakes import make_spec

sys_ids = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)


def _live(records: list[tuple[str, bool]]) -> LiveKeys:
    builder = LiveKeysBuilder()
    for key, live in records:
        builder.add(key, live)
    return builder.build()


def _model(records: list[tuple[str, bool]]) -> set[str]:
    last: dict[str, bool] = {}
    for key, live in records:
        last[key] = live
    return {key for key, live in last.items() if live}


@settings(deadline=None)  # the shared test machine makes timings meaningless
@given(st.lists(st.tuples(sys_ids, st.booleans()), max_size=200))
def test_the_last_record_of_a_key_decides_whether_it_is_live(
    records: list[tuple[str, bool]],
) -> None:
    live = _live(records)
    expected = _model(records)
    assert list(live.between("", None)) == sorted(expected)
    assert len(live) == len(expected)
    assert live.nbytes == KEY_BYTES * len(expected)
    for key, _ in records:
        assert (key in live) == (key in expected)


@settings(deadline=None)  # the shared test machine makes timings meaningless
@given(st.lists(st.tuples(sys_ids, st.booleans()), max_size=100), sys_ids, sys_ids)
def test_between_is_the_half_open_range_after_a_key(
    records: list[tuple[str, bool]], a: str, b: str
) -> None:
    live = _live(records)
    lo, hi = sorted((a, b))
    expected = sorted(k for k in _model(records) if lo < k <= hi)
    assert list(live.between(lo, hi)) == expected


def test_keys_that_are_not_sys_ids_are_kept_aside() -> None:
    live = _live(
        [("global", True), ("glide.maint", True), ("glide.maint", False), ("a" * 32, True)]
    )
    assert "global" in live
    assert "glide.maint" not in live
    assert len(live) == 2
    assert live.nbytes == KEY_BYTES
    assert missing_others(live, ["global"]) == []
    assert missing_others(live, []) == ["global"]
    assert pack("GLOBAL") is None
    assert pack("A" * 32) is None  # upper-case hex is not how an instance writes a sys_id


def test_a_million_keys_take_sixteen_megabytes() -> None:
    builder = LiveKeysBuilder()
    for i in range(0, 2_000_000, 2):
        builder.add(f"{i:032x}", True)
    live = builder.build()
    assert len(live) == 1_000_000
    assert live.nbytes == 16_000_000
    assert f"{1998:032x}" in live
    assert f"{1999:032x}" not in live


def _key(i: int) -> str:
    return f"{i:032x}"


def test_a_page_compares_only_the_range_it_covers() -> None:
    live = _live([(_key(i), True) for i in (1, 2, 3, 5, 8, 9)])
    diff = compare_page(live, _key(1), [_key(2), _key(4), _key(5)], last_page=False)
    assert diff.missing_in_instance == [_key(3)]  # 8 and 9 lie beyond this page
    assert diff.missing_in_kafka == [_key(4)]
    last = compare_page(live, _key(5), [_key(9)], last_page=True)
    assert last.missing_in_instance == [_key(8)]
    empty = compare_page(live, _key(5), [], last_page=True)
    assert empty.missing_in_instance == [_key(8), _key(9)]


@settings(deadline=None)  # the shared test machine makes timings meaningless
@given(
    st.sets(st.integers(0, 300), max_size=60),
    st.sets(st.integers(0, 300), max_size=60),
    st.integers(1, 20),
)
def test_paging_the_instance_finds_exactly_each_sides_missing_keys(
    kafka: set[int], instance: set[int], size: int
) -> None:
    live = _live([(_key(i), True) for i in kafka])
    keys = sorted(_key(i) for i in instance)
    lost: list[str] = []
    unknown: list[str] = []
    after = ""
    while True:
        page = [k for k in keys if k > after][:size]
        diff = compare_page(live, after, page, last_page=len(page) < size)
        lost += diff.missing_in_instance
        unknown += diff.missing_in_kafka
        if len(page) < size:
            break
        after = page[-1]
    assert lost == sorted(_key(i) for i in kafka - instance)
    assert sorted(unknown) == sorted(_key(i) for i in instance - kafka)


def test_key_query_repeats_the_window_in_every_group() -> None:
    assert key_query("", "") == "ORDERBYsys_id"
    assert key_query("", "ab") == "sys_id>ab^ORDERBYsys_id"
    assert key_query("active=true", "ab") == "active=true^sys_id>ab^ORDERBYsys_id"
    assert (
        key_query("priority=1^NQpriority=2", "ab")
        == "priority=1^sys_id>ab^NQpriority=2^sys_id>ab^ORDERBYsys_id"
    )
    with pytest.raises(ValueError, match="cannot contain"):
        key_query("", "a^b")


def test_recheck_and_audit_queries_list_the_keys() -> None:
    assert recheck_query("", ["a", "b"]) == "sys_idINa,b"
    assert recheck_query("x=1^NQy=2", ["a"]) == "x=1^sys_idINa^NQy=2^sys_idINa"
    assert audited_query("incident", ["a", "b"]) == "tablename=incident^documentkeyINa,b"
    assert [len(b) for b in batches([str(i) for i in range(450)])] == [
        RECHECK_BATCH,
        RECHECK_BATCH,
        50,
    ]


def _table() -> TableSpec:
    return make_spec("inc", name="incident", query="active=true")


def test_the_sweep_has_a_partition_of_its_own() -> None:
    table = _table()
    spec = reconcile_spec(table, snow_url="https://acme.service-now.com")
    assert spec.alias == reconcile_alias("inc") == "inc.reconcile"
    assert spec.stream == "reconcile"
    assert spec.base == table
    assert spec.partition == reconcile_partition(table, snow_url="https://acme.service-now.com")
    assert spec.partition != table.partition
    assert spec.partition.table == "incident"
    assert spec.partition.timestamp_field == "sys_id"
    assert spec.partition.query_fingerprint == table.partition.query_fingerprint


def test_progress_round_trips_through_a_valid_offset() -> None:
    started = datetime(2026, 9, 29, 7, 30, 1, tzinfo=UTC)
    table = _table()
    spec = reconcile_spec(table, snow_url="https://acme.service-now.com")
    fingerprint = spec.partition.query_fingerprint
    for progress in (
        SweepProgress(started, "", False),
        SweepProgress(started, _key(7), False),
        SweepProgress(started, "", True),
    ):
        offset = progress.to_offset(fingerprint)
        checked = validate_offset(
            offset.as_dict(), spec.partition, id_field="sys_id", describe="", alias=spec.alias
        )
        assert SweepProgress.from_offset(checked) == progress
    ended = SweepProgress(started, _key(7), True).to_offset(fingerprint)
    assert (ended.phase, ended.sys_id) == ("stream", "")


def test_a_finished_sweep_is_due_an_interval_later_an_unfinished_one_at_once() -> None:
    started = datetime(2026, 9, 29, 7, 30, tzinfo=UTC)
    assert SweepProgress(started, "x", False).due(86400) == started
    assert SweepProgress(started, "", True).due(60) == started + timedelta(seconds=60)
    fresh = fresh_sweep(datetime(2026, 9, 29, 9, 30, 1, 999, tzinfo=UTC))
    assert fresh == SweepProgress(datetime(2026, 9, 29, 9, 30, 1, tzinfo=UTC))
