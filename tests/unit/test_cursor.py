"""The keyset cursor: timestamps, positions, page queries and sweep starts (SPEC §5)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snowsource.core.cursor import (
    TS_FORMAT,
    Position,
    first_sweep_start,
    format_ts,
    high_water_mark,
    in_window,
    is_valid_ts,
    next_sweep_start,
    page_query,
    parse_ts,
)
from snowsource.core.query import normalise_query

Row = dict[str, str]
TS, ID = "sys_updated_on", "sys_id"

# --------------------------------------------------------------------------------------------
# A tiny evaluator for exactly the encoded-query forms the cursor emits (and simple base
# filters): ^NQ groups of ^-joined terms, dependent ^OR, the six comparison operators, trailing
# ORDERBY terms. Values compare as strings, which is right for the cursor's fixed-width UTC
# timestamps and for ids.
# --------------------------------------------------------------------------------------------
_TERM = re.compile(r"([A-Za-z0-9_.]+)(>=|<=|!=|=|>|<)(.*)")
_OPS: dict[str, Callable[[str, str], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


def _term(text: str) -> Callable[[Row], bool]:
    m = _TERM.fullmatch(text)
    assert m is not None, f"evaluator cannot read term {text!r}"
    field, op, value = m.groups()
    fn = _OPS[op]
    return lambda row: fn(row[field], value)


def evaluate(query: str) -> tuple[Callable[[Row], bool], list[str]]:
    """Compile an encoded query into (predicate, order-by fields)."""
    order: list[str] = []
    groups: list[list[list[Callable[[Row], bool]]]] = []
    for group_text in query.split("^NQ"):
        conjunction: list[list[Callable[[Row], bool]]] = []
        for token in group_text.split("^"):
            if token.startswith("ORDERBY"):
                order.append(token[len("ORDERBY") :])
            elif token.startswith("OR"):
                conjunction[-1].append(_term(token[2:]))
            elif token:
                conjunction.append([_term(token)])
        groups.append(conjunction)

    def predicate(row: Row) -> bool:
        return any(all(any(t(row) for t in ors) for ors in conj) for conj in groups)

    return predicate, order


def run_query(query: str, rows: list[Row], limit: int | None = None) -> list[Row]:
    predicate, order = evaluate(query)
    assert order == [TS, ID]
    selected = sorted((r for r in rows if predicate(r)), key=lambda r: (r[TS], r[ID]))
    return selected if limit is None else selected[:limit]


def pos(row: Row) -> Position:
    return Position(row[TS], row[ID])


# --------------------------------------------------------------------------------------------
# Timestamps
# --------------------------------------------------------------------------------------------


def test_parse_ts_returns_aware_utc() -> None:
    assert parse_ts("2026-09-29 07:30:42") == datetime(2026, 9, 29, 7, 30, 42, tzinfo=UTC)
    assert parse_ts("2026-09-29 07:30:42").tzinfo is UTC
    assert TS_FORMAT == "%Y-%m-%d %H:%M:%S"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "2026-09-29",
        "2026-09-29T07:30:42",
        "2026-09-29 07:30:42Z",
        "2026-09-29 07:30:42.000",
        "2026-09-29 07:30:42+00:00",
        " 2026-09-29 07:30:42",
        "2026-09-29 07:30:42 ",
        "2026-9-29 07:30:42",
        "2026-09-29 7:30:42",
        "2026-02-30 00:00:00",
        "2026-09-29 24:00:00",
        "2026-09-29 23:60:00",
        "0000-01-01 00:00:00",
        "２026-09-29 07:30:42",  # noqa: RUF001 - a full-width digit must be refused
        "2026-09-29 07:30:42\n",
        "09/29/2026 07:30:42",
    ],
)
def test_parse_ts_is_strict(bad: str) -> None:
    with pytest.raises(ValueError, match="timestamp"):
        parse_ts(bad)
    assert not is_valid_ts(bad)


def test_is_valid_ts_accepts_edges() -> None:
    for good in ("1970-01-01 00:00:00", "2024-02-29 23:59:59", "0001-01-01 00:00:00"):
        assert is_valid_ts(good)
    assert not is_valid_ts("2023-02-29 00:00:00")


def test_format_ts_converts_to_utc_and_truncates() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert format_ts(datetime(2026, 9, 29, 9, 30, 42, 999_999, tzinfo=plus2)) == (
        "2026-09-29 07:30:42"
    )
    assert format_ts(datetime(5, 1, 2, 3, 4, 5, tzinfo=UTC)) == "0005-01-02 03:04:05"


def test_format_ts_refuses_naive() -> None:
    with pytest.raises(ValueError, match="naive"):
        format_ts(datetime(2026, 9, 29, 7, 30, 42))  # naive on purpose


@settings(deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)))
def test_format_parse_round_trip(naive: datetime) -> None:
    dt = naive.replace(tzinfo=UTC)
    text = format_ts(dt)
    assert is_valid_ts(text)
    assert parse_ts(text) == dt.replace(microsecond=0)
    assert format_ts(parse_ts(text)) == text


@settings(deadline=None)
@given(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)),
)
def test_string_order_is_chronological(a: datetime, b: datetime) -> None:
    fa, fb = format_ts(a.replace(tzinfo=UTC)), format_ts(b.replace(tzinfo=UTC))
    assert (fa < fb) == (a.replace(microsecond=0) < b.replace(microsecond=0))


# --------------------------------------------------------------------------------------------
# Position
# --------------------------------------------------------------------------------------------


def test_position_orders_by_ts_then_id_with_empty_id_first() -> None:
    a = Position("2026-09-29 07:30:42", "")
    b = Position("2026-09-29 07:30:42", "0a")
    c = Position("2026-09-29 07:30:42", "ff")
    d = Position("2026-09-29 07:30:43", "")
    assert sorted([d, c, a, b]) == [a, b, c, d]
    assert a < b < c < d


def test_position_validates_ts() -> None:
    with pytest.raises(ValueError, match="cursor timestamp"):
        Position("2026-09-29T07:30:42", "x")


def test_position_is_frozen_and_hashable() -> None:
    p = Position("2026-09-29 07:30:42", "ab")
    with pytest.raises(AttributeError):
        p.ts = "2026-09-29 07:30:43"  # type: ignore[misc]
    assert {p, Position("2026-09-29 07:30:42", "ab")} == {p}


def test_minus() -> None:
    p = Position("2026-09-29 07:30:05", "abc")
    assert p.minus(0) is p
    assert p.minus(10) == Position("2026-09-29 07:29:55", "")
    assert p.minus(86400) == Position("2026-09-28 07:30:05", "")
    assert Position("2026-03-01 00:00:00", "").minus(1) == Position("2026-02-28 23:59:59", "")
    assert Position("0001-01-01 00:00:05", "x").minus(10) == Position("0001-01-01 00:00:00", "")
    with pytest.raises(ValueError, match="negative"):
        p.minus(-1)


# --------------------------------------------------------------------------------------------
# page_query: exact strings
# --------------------------------------------------------------------------------------------

T, S, HI = "2026-09-29 07:30:42", "8f4bc0d1c611227a0100e2d3f8a6b9e1", "2026-09-29 08:00:00"
ORDER = f"^ORDERBY{TS}^ORDERBY{ID}"


def test_page_query_empty_base_with_id() -> None:
    assert page_query("", TS, ID, Position(T, S), HI) == (
        f"{TS}>{T}^{TS}<={HI}^NQ{TS}={T}^{ID}>{S}^{TS}<={HI}" + ORDER
    )


def test_page_query_empty_base_empty_id() -> None:
    assert page_query("", TS, ID, Position(T, ""), HI) == f"{TS}>={T}^{TS}<={HI}" + ORDER


def test_page_query_single_group() -> None:
    base = "active=true^priority<=2"
    assert page_query(base, TS, ID, Position(T, S), HI) == (
        f"{base}^{TS}>{T}^{TS}<={HI}^NQ{base}^{TS}={T}^{ID}>{S}^{TS}<={HI}" + ORDER
    )
    assert page_query(base, TS, ID, Position(T, ""), HI) == (f"{base}^{TS}>={T}^{TS}<={HI}" + ORDER)


def test_page_query_multi_group() -> None:
    assert page_query("a=1^NQb=2", TS, ID, Position(T, S), HI) == (
        f"a=1^{TS}>{T}^{TS}<={HI}"
        f"^NQa=1^{TS}={T}^{ID}>{S}^{TS}<={HI}"
        f"^NQb=2^{TS}>{T}^{TS}<={HI}"
        f"^NQb=2^{TS}={T}^{ID}>{S}^{TS}<={HI}" + ORDER
    )
    assert page_query("a=1^NQb=2", TS, ID, Position(T, ""), HI) == (
        f"a=1^{TS}>={T}^{TS}<={HI}^NQb=2^{TS}>={T}^{TS}<={HI}" + ORDER
    )


def test_page_query_with_dependent_or_from_normalised_query() -> None:
    base = normalise_query("  priority=1^ORpriority=2 ^ active=true ^EQ")
    assert base == "active=true^priority=1^ORpriority=2"
    assert page_query(base, TS, ID, Position(T, S), HI) == (
        f"active=true^priority=1^ORpriority=2^{TS}>{T}^{TS}<={HI}"
        f"^NQactive=true^priority=1^ORpriority=2^{TS}={T}^{ID}>{S}^{TS}<={HI}" + ORDER
    )


def test_page_query_view_fields() -> None:
    assert page_query("", "inc_sys_updated_on", "inc_sys_id", Position(T, ""), HI) == (
        f"inc_sys_updated_on>={T}^inc_sys_updated_on<={HI}"
        "^ORDERBYinc_sys_updated_on^ORDERBYinc_sys_id"
    )


def test_page_query_related_list_query_is_one_group() -> None:
    base = normalise_query("RLQUERYsys_user_grmember.group,>=1^ENDRLQUERY")
    assert page_query(base, TS, ID, Position(T, ""), HI) == (f"{base}^{TS}>={T}^{TS}<={HI}" + ORDER)


@pytest.mark.parametrize(
    ("ts_field", "id_field", "after", "hi", "match"),
    [
        ("sys updated", ID, Position(T, S), HI, "timestamp field"),
        (TS, "", Position(T, S), HI, "id field"),
        (TS, ID, Position(T, S), "2026-09-29T08:00:00", "high-water"),
        (TS, ID, Position(T, "a^b"), HI, r"contains '\^'"),
    ],
)
def test_page_query_refuses_what_it_cannot_encode(
    ts_field: str, id_field: str, after: Position, hi: str, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        page_query("", ts_field, id_field, after, hi)


def test_evaluator_understands_dependent_or() -> None:
    # Guards the evaluator itself: A^B^ORC is A and (B or C).
    pred, _ = evaluate("a=1^b=1^ORb=2")
    assert pred({"a": "1", "b": "2"})
    assert not pred({"a": "2", "b": "1"})
    assert not pred({"a": "1", "b": "3"})


# --------------------------------------------------------------------------------------------
# page_query: property — the built condition selects exactly the window
# --------------------------------------------------------------------------------------------

BASES: list[tuple[str, Callable[[Row], bool]]] = [
    ("", lambda r: True),
    ("a=1", lambda r: r["a"] == "1"),
    ("a=1^b=2", lambda r: r["a"] == "1" and r["b"] == "2"),
    ("a=1^NQb=2", lambda r: r["a"] == "1" or r["b"] == "2"),
    ("a=1^ORb=2", lambda r: r["a"] == "1" or r["b"] == "2"),
    ("b!=1^a=1^ORa=2", lambda r: r["b"] != "1" and r["a"] in ("1", "2")),
    (
        "a=2^b=1^ORb=2^NQa=1^b!=2",
        lambda r: (r["a"] == "2" and r["b"] in ("1", "2")) or (r["a"] == "1" and r["b"] != "2"),
    ),
]
SECONDS = [f"2026-09-29 07:30:{s:02d}" for s in range(40, 46)]
IDS = ["0", "1", "3a", "7f", "a", "ab", "b", "ff"]

rows_strategy = st.lists(
    st.fixed_dictionaries(
        {
            TS: st.sampled_from(SECONDS),
            ID: st.sampled_from(IDS),
            "a": st.sampled_from(["1", "2", "3"]),
            "b": st.sampled_from(["1", "2", "3"]),
        }
    ),
    max_size=40,
    unique_by=lambda r: r[ID],
)
position_strategy = st.builds(
    Position,
    st.sampled_from(SECONDS),
    st.one_of(st.just(""), st.sampled_from(IDS), st.sampled_from(["00", "3", "fe", "zz"])),
)


@settings(max_examples=300, deadline=None)
@given(
    rows=rows_strategy,
    base_index=st.integers(0, len(BASES) - 1),
    after=position_strategy,
    hi=st.sampled_from(SECONDS),
)
def test_page_query_selects_exactly_the_window(
    rows: list[Row], base_index: int, after: Position, hi: str
) -> None:
    base, base_predicate = BASES[base_index]
    normalised = normalise_query(base)
    selected = run_query(page_query(normalised, TS, ID, after, hi), rows)
    expected = sorted(
        (r for r in rows if base_predicate(r) and pos(r) > after and r[TS] <= hi), key=pos
    )
    assert selected == expected
    # in_window agrees with the query for every row (ids here are never empty).
    for r in rows:
        assert in_window(pos(r), after, hi) == (pos(r) > after and r[TS] <= hi)


@settings(max_examples=200, deadline=None)
@given(
    rows=rows_strategy,
    base_index=st.integers(0, len(BASES) - 1),
    start=position_strategy,
    hi=st.sampled_from(SECONDS),
    limit=st.integers(1, 5),
)
def test_paging_reads_every_row_once_in_order(
    rows: list[Row], base_index: int, start: Position, hi: str, limit: int
) -> None:
    # Many rows share a second and pages are tiny: a page boundary inside a second must neither
    # skip nor repeat rows (pitfall (b)1).
    base, base_predicate = BASES[base_index]
    normalised = normalise_query(base)
    after = start
    read: list[Row] = []
    while True:
        page = run_query(page_query(normalised, TS, ID, after, hi), rows, limit)
        for r in page:
            assert in_window(pos(r), after, hi)
            assert not read or pos(r) > pos(read[-1])
        read.extend(page)
        if len(page) < limit:
            break
        after = pos(page[-1])
    expected = sorted(
        (r for r in rows if base_predicate(r) and in_window(pos(r), start, hi)), key=pos
    )
    assert read == expected


@settings(max_examples=200, deadline=None)
@given(
    rows=rows_strategy,
    base_index=st.integers(0, len(BASES) - 1),
    after=position_strategy,
    hi=st.sampled_from(SECONDS),
    limit=st.integers(1, 5),
)
def test_emulator_parser_agrees_with_the_window(
    rows: list[Row], base_index: int, after: Position, hi: str, limit: int
) -> None:
    # Cross-check against the emulator's own encoded-query engine (an independent parser of the
    # same grammar): one query's selection, then a whole paged read.
    from zoneinfo import ZoneInfo

    from snowsource.emulator.encoded_query import FieldType, parse_encoded_query

    types: dict[str, FieldType] = {TS: "datetime", ID: "sys_id", "a": "string", "b": "string"}

    def field_type(name: str) -> FieldType | None:
        return types.get(name)

    def fetch(query: str) -> list[Row]:
        parsed = parse_encoded_query(query, field_type=field_type, user_tz=ZoneInfo("UTC"))
        assert not parsed.dropped
        assert [(k.field, k.descending) for k in parsed.order_by] == [(TS, False), (ID, False)]
        return parsed.sort(parsed.filter(rows))

    base, base_predicate = BASES[base_index]
    normalised = normalise_query(base)
    expected = sorted(
        (r for r in rows if base_predicate(r) and in_window(pos(r), after, hi)), key=pos
    )
    assert fetch(page_query(normalised, TS, ID, after, hi)) == expected

    cursor, read = after, []
    while True:
        page = fetch(page_query(normalised, TS, ID, cursor, hi))[:limit]
        # Also what keeps a wrong query from paging forever.
        assert all(in_window(pos(r), cursor, hi) for r in page)
        read.extend(page)
        if len(page) < limit:
            break
        cursor = pos(page[-1])
    assert read == expected


def test_in_window_edges() -> None:
    after = Position("2026-09-29 07:30:42", "b")
    hi = "2026-09-29 07:30:44"
    assert not in_window(Position("2026-09-29 07:30:42", "a"), after, hi)
    assert not in_window(Position("2026-09-29 07:30:42", "b"), after, hi)
    assert in_window(Position("2026-09-29 07:30:42", "c"), after, hi)
    assert in_window(Position("2026-09-29 07:30:43", "0"), after, hi)
    assert in_window(Position("2026-09-29 07:30:44", "z"), after, hi)
    assert not in_window(Position("2026-09-29 07:30:45", "0"), after, hi)
    empty = Position("2026-09-29 07:30:42", "")
    assert in_window(Position("2026-09-29 07:30:42", "0"), empty, hi)
    assert in_window(Position("2026-09-29 07:30:42", ""), empty, hi)  # ts>=T includes it
    assert not in_window(Position("2026-09-29 07:30:41", "z"), empty, hi)


# --------------------------------------------------------------------------------------------
# Sweep starts and the high-water mark
# --------------------------------------------------------------------------------------------


def test_first_sweep_start() -> None:
    committed = Position("2026-09-29 07:30:42", S)
    assert first_sweep_start(committed, 10, "1970-01-01 00:00:00") == Position(
        "2026-09-29 07:30:32", ""
    )
    assert first_sweep_start(committed, 0, "1970-01-01 00:00:00") == committed
    assert first_sweep_start(None, 10, "2020-01-01 00:00:00") == Position("2020-01-01 00:00:00", "")
    with pytest.raises(ValueError, match="cursor timestamp"):
        first_sweep_start(None, 10, "2020-01-01")


def test_next_sweep_start_busy_table_rereads_overlap() -> None:
    # The last row read is at HI: the overlap window before HI wins.
    got = next_sweep_start(
        Position("2026-09-29 07:00:00", ""),
        Position("2026-09-29 07:30:40", "ff"),
        "2026-09-29 07:30:40",
        10,
    )
    assert got == Position("2026-09-29 07:30:30", "")


def test_next_sweep_start_quiet_table_rereads_nothing_old() -> None:
    # Last row long before HI - overlap: continue right after it, nothing older.
    last = Position("2026-09-29 07:00:05", "ab")
    got = next_sweep_start(Position("2026-09-29 07:00:00", ""), last, "2026-09-29 07:30:40", 10)
    assert got == last


def test_next_sweep_start_no_rows_read_keeps_start() -> None:
    start = Position("2026-09-29 07:00:00", "")
    assert next_sweep_start(start, None, "2026-09-29 07:30:40", 10) == start
    # ...unless the start is newer than HI - overlap.
    late = Position("2026-09-29 07:30:39", "x")
    assert next_sweep_start(late, None, "2026-09-29 07:30:40", 10) == Position(
        "2026-09-29 07:30:30", ""
    )


def test_next_sweep_start_overlap_zero() -> None:
    last = Position("2026-09-29 07:30:40", "ff")
    assert next_sweep_start(last, last, "2026-09-29 07:30:40", 0) == Position(
        "2026-09-29 07:30:40", ""
    )
    earlier = Position("2026-09-29 07:30:39", "ff")
    assert next_sweep_start(earlier, earlier, "2026-09-29 07:30:40", 0) == earlier


def test_high_water_mark() -> None:
    now = datetime(2026, 9, 29, 7, 30, 42, 900_000, tzinfo=UTC)
    assert high_water_mark(now, 2) == "2026-09-29 07:30:40"
    assert high_water_mark(now, 0) == "2026-09-29 07:30:42"
    plus1 = timezone(timedelta(hours=1))
    assert high_water_mark(datetime(2026, 9, 29, 8, 0, 1, tzinfo=plus1), 2) == (
        "2026-09-29 06:59:59"
    )
    with pytest.raises(ValueError, match="safety lag"):
        high_water_mark(now, -1)


# --------------------------------------------------------------------------------------------
# Sweeps over a changing table: late-visible rows inside overlap + safety lag are never lost
# --------------------------------------------------------------------------------------------

EPOCH = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)


def _at(second: int) -> str:
    return format_ts(EPOCH + timedelta(seconds=second))


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    overlap=st.integers(0, 5),
    lag=st.integers(0, 3),
    limit=st.integers(1, 4),
    committed_at=st.one_of(st.none(), st.integers(0, 5)),
)
def test_sweeps_read_every_row_visible_within_overlap_plus_lag(
    data: st.DataObject, overlap: int, lag: int, limit: int, committed_at: int | None
) -> None:
    horizon = 40
    n = data.draw(st.integers(0, 30))
    rows: list[tuple[Row, int]] = []  # (row, second at which it becomes visible)
    for i in range(n):
        ts = data.draw(st.integers(6, horizon - 10))
        delay = data.draw(st.integers(0, overlap + lag))
        rows.append(({TS: _at(ts), ID: f"{i:04x}"}, ts + delay))
    drawn = data.draw(st.lists(st.integers(0, horizon), max_size=12))
    # A final sweep late enough for every row to be visible and below HI.
    sweep_times = [*sorted(set(drawn)), horizon + overlap + lag + 1]
    # Start where a restart would: behind every row, like a committed offset before them all.
    committed = None if committed_at is None else Position(_at(committed_at), "f")
    start = first_sweep_start(committed, overlap, _at(0))
    seen: set[str] = set()
    for now in sweep_times:
        hi = high_water_mark(EPOCH + timedelta(seconds=now, microseconds=500_000), lag)
        visible = [r for r, v in rows if v <= now]
        after, last = start, None
        while True:
            page = run_query(page_query("", TS, ID, after, hi), visible, limit)
            assert all(in_window(pos(r), after, hi) for r in page)
            seen.update(r[ID] for r in page)
            if page:
                after = last = pos(page[-1])
            if len(page) < limit:
                break
        start = next_sweep_start(start, last, hi, overlap)
    assert seen == {r[ID] for r, _ in rows}
