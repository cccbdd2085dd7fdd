"""The per-row decision of a page, on its own (ordering guard, dedup, late rows, cursor, offset)."""

from __future__ import annotations

from typing import Any

import pytest

from snowsource.core.cursor import Position
from snowsource.core.dedup import DedupCache
from snowsource.core.errors import TableFailedError
from snowsource.core.page import page_positions, plan_page
from snowsource.core.records import RecordShaper
from snowsource.core.tableapi import clock_probe_params, page_params
from tests.fakes import make_spec

SPEC = make_spec()
SHAPER = RecordShaper(
    display_value="false",
    exclude_reference_link=True,
    timestamp_field="sys_updated_on",
    id_field="sys_id",
)
HI = "2026-09-29 08:00:00"
START = Position("2026-09-29 07:00:00", "")


def sid(name: str) -> str:
    """A readable name as a valid sys_id (32 lowercase hex); order between names is kept."""
    return name.encode().hex().ljust(32, "0") if name else ""


def row(ts: str, ident: str, text: str = "x") -> dict[str, Any]:
    return {"sys_id": sid(ident), "sys_updated_on": ts, "short_description": text}


def decide(
    rows: list[dict[str, Any]],
    *,
    cursor: Position = START,
    late_floor: Position = START,
    dedup: DedupCache | None = None,
    after: Position = START,
) -> Any:
    positions = page_positions(SPEC, SHAPER, rows, after=after, hi=HI, previous=None)
    return plan_page(
        SPEC,
        SHAPER,
        rows,
        positions,
        phase="backfill",
        cursor=cursor,
        late_floor=late_floor,
        dedup=dedup if dedup is not None else DedupCache(100),
    )


def test_every_new_row_is_emitted_carrying_the_cursor_after_it() -> None:
    plan = decide([row("2026-09-29 07:00:01", "a"), row("2026-09-29 07:00:01", "b")])
    assert [e.position.id for e in plan.emits] == [sid("a"), sid("b")]
    assert [(e.offset.timestamp, e.offset.sys_id) for e in plan.emits] == [
        ("2026-09-29 07:00:01", sid("a")),
        ("2026-09-29 07:00:01", sid("b")),
    ]
    assert {e.offset.phase for e in plan.emits} == {"backfill"}
    assert plan.emits[0].offset.fingerprint == SPEC.partition.query_fingerprint
    assert plan.cursor == Position("2026-09-29 07:00:01", sid("b"))
    assert plan.last == plan.cursor


def test_a_byte_identical_re_read_is_suppressed_and_does_not_move_the_cursor() -> None:
    dedup = DedupCache(100)
    first = decide([row("2026-09-29 07:00:05", "a")], dedup=dedup)
    assert len(first.emits) == 1
    again = decide([row("2026-09-29 07:00:05", "a")], dedup=dedup, cursor=START)
    assert (again.emits, again.suppressed) == ([], 1)
    assert again.cursor == START
    changed = decide([row("2026-09-29 07:00:05", "a", "new text")], dedup=dedup)
    assert len(changed.emits) == 1  # an update inside the same second is never lost


def test_a_row_below_the_cursor_is_a_late_commit_and_never_moves_it_back() -> None:
    cursor = Position("2026-09-29 07:30:00", sid("z"))
    plan = decide([row("2026-09-29 07:10:00", "late")], cursor=cursor, late_floor=START)
    assert plan.late == 1
    assert len(plan.emits) == 1
    assert plan.emits[0].offset.timestamp == cursor.ts  # monotonic per table
    assert plan.cursor == cursor


def test_rows_below_the_late_floor_are_not_counted_late() -> None:
    # After a restart the cache is empty: rows below where this incarnation started may have
    # been emitted before, so they cannot be called late commits.
    cursor = Position("2026-09-29 07:30:00", sid("z"))
    plan = decide([row("2026-09-29 07:10:00", "old")], cursor=cursor, late_floor=cursor)
    assert plan.late == 0
    assert len(plan.emits) == 1


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        ([row("2026-09-29 07:00:02", "b"), row("2026-09-29 07:00:01", "a")], "out of cursor order"),
        ([row("2026-09-29 07:00:01", "a"), row("2026-09-29 07:00:01", "a")], "is not unique"),
        ([row("2026-09-29 08:00:01", "a")], "out of cursor order"),  # above HI
        ([row("2026-09-29 06:59:59", "a")], "out of cursor order"),  # before the window
        ([row("2026-09-29 07:00:01", "")], "has no 'sys_id' value"),
        ([row("2026-09-29T07:00:01", "a")], "not a YYYY-MM-DD HH:MM:SS timestamp"),
        ([{"sys_id": "A" * 32, "sys_updated_on": "2026-09-29 07:00:01"}], "is not a sys_id"),
        ([{"sys_id": "a" * 10_000, "sys_updated_on": "2026-09-29 07:00:01"}], "is not a sys_id"),
    ],
)
def test_the_ordering_guard_fails_the_table_naming_the_row(
    rows: list[dict[str, Any]], fragment: str
) -> None:
    with pytest.raises(TableFailedError, match=fragment) as raised:
        decide(rows)
    assert "table alias 'incident'" in str(raised.value)


def test_page_parameters_carry_the_keyset_query_and_the_table_options() -> None:
    spec = make_spec(fields=("number",), query_category="list", query_domain=False)
    params = page_params(spec, Position("2026-09-29 07:00:00", "abc"), HI, 50)
    assert params["sysparm_limit"] == "50"
    assert params["sysparm_query"].endswith("^ORDERBYsys_updated_on^ORDERBYsys_id")
    assert "sys_id>abc" in params["sysparm_query"]
    assert params["sysparm_fields"] == "number,sys_updated_on,sys_id,sys_mod_count"
    assert params["sysparm_no_count"] == "true"
    assert params["sysparm_query_category"] == "list"
    assert params["sysparm_query_no_domain"] == "true"
    assert page_params(spec, START, HI, 1, count=True)["sysparm_no_count"] == "false"
    probe = clock_probe_params(spec)
    assert probe["sysparm_limit"] == "1"
    assert probe["sysparm_fields"] == "sys_id,sys_updated_on"
    assert probe["sysparm_query_no_domain"] == "true"
    assert "sysparm_query" not in probe
