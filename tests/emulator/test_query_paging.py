"""Encoded queries, ordering, limit/offset, X-Total-Count and the Link header."""

from __future__ import annotations

from datetime import timedelta

import pytest
from yarl import URL

from snowsource.emulator import Emulator
from snowsource.emulator.journal import Request
from tests.emulator.conftest import FIXED_NOW, Client, get_json, table

T = "2026-09-29 06:00:00"
HI = "2026-09-29 06:00:05"


def _sid(n: int) -> str:
    return f"{n:032x}"


def _keyset_rows(emulator: Emulator) -> list[tuple[str, str]]:
    """Rows at T-1, T (ids 1..6), T+1, T+5 and T+6 (beyond HI); some are inactive."""
    spec = [
        (-1, 9, "true"),
        (0, 1, "true"),
        (0, 2, "true"),
        (0, 3, "false"),
        (0, 4, "true"),
        (0, 5, "true"),
        (0, 6, "true"),
        (1, 0, "true"),
        (1, 7, "false"),
        (5, 8, "true"),
        (6, 10, "true"),
    ]
    base = FIXED_NOW - timedelta(hours=1)
    out = []
    for offset, n, active in spec:
        row = emulator.insert(
            "incident", {"sys_id": _sid(n), "active": active}, at=base + timedelta(seconds=offset)
        )
        out.append((row["sys_updated_on"], row["sys_id"]))
    return out


async def test_keyset_query_with_nq_groups_and_trailing_orderby(
    emulator: Emulator, emulator_client: Client
) -> None:
    stored = _keyset_rows(emulator)
    s = _sid(3)
    query = (
        f"active=true^sys_updated_on>{T}^sys_updated_on<={HI}"
        f"^NQactive=true^sys_updated_on={T}^sys_id>{s}^sys_updated_on<={HI}"
        "^ORDERBYsys_updated_on^ORDERBYsys_id"
    )
    active = {_sid(n) for n in (9, 1, 2, 4, 5, 6, 0, 8, 10)}
    expected = sorted(
        (u, i) for u, i in stored if i in active and u <= HI and (u > T or (u == T and i > s))
    )
    assert len(expected) == 5
    for _ in range(3):  # ORDERBY makes it stable across requests despite the shuffle
        rows, headers = await table(
            emulator_client, "incident", sysparm_query=query, sysparm_fields="sys_updated_on,sys_id"
        )
        assert [(r["sys_updated_on"], r["sys_id"]) for r in rows] == expected
        assert headers["X-Total-Count"] == "5"
    # The documented wrong form drops the later rows whose sys_id happens to be <= S.
    wrong = f"sys_updated_on>{T}^ORsys_updated_on={T}^sys_id>{s}^ORDERBYsys_updated_on"
    rows, _ = await table(emulator_client, "incident", sysparm_query=wrong, sysparm_fields="sys_id")
    assert _sid(0) not in {r["sys_id"] for r in rows}


async def test_orderby_desc_and_multi_key(emulator: Emulator, emulator_client: Client) -> None:
    for n, prio in enumerate(["2", "1", "2", "1", "3"]):
        emulator.insert("incident", {"sys_id": _sid(n), "priority": prio})
    rows, _ = await table(
        emulator_client,
        "incident",
        sysparm_query="ORDERBYDESCpriority^ORDERBYsys_id",
        sysparm_fields="sys_id,priority",
    )
    assert [(r["priority"], r["sys_id"][-1]) for r in rows] == [
        ("3", "4"),
        ("2", "0"),
        ("2", "2"),
        ("1", "1"),
        ("1", "3"),
    ]


async def test_no_orderby_is_shuffled_per_request(
    emulator: Emulator, emulator_client: Client
) -> None:
    for n in range(40):
        emulator.insert("incident", {"sys_id": _sid(n)})
    orders = set()
    for _ in range(4):
        rows, _ = await table(emulator_client, "incident", sysparm_fields="sys_id")
        ids = [r["sys_id"] for r in rows]
        assert sorted(ids) == [_sid(n) for n in range(40)]
        orders.add(tuple(ids))
    assert len(orders) > 1
    assert tuple(_sid(n) for n in range(40)) not in orders


async def test_invalid_fields_are_dropped_or_match_nothing(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.insert("incident", {"priority": "1"})
    emulator.insert("incident", {"priority": "3"})
    rows, headers = await table(emulator_client, "incident", sysparm_query="u_typo=1^priority=1")
    assert len(rows) == 1
    rows, _ = await table(emulator_client, "incident", sysparm_query="u_typo=1")
    assert len(rows) == 2
    emulator.invalid_query_returns_no_rows = True
    rows, headers = await table(emulator_client, "incident", sysparm_query="u_typo=1^priority=1")
    assert rows == []
    assert headers["X-Total-Count"] == "0"
    body, _ = await get_json(
        emulator_client,
        "/api/now/table/incident",
        {"sysparm_query": "sys_created_on>javascript:gs.daysAgo(1)"},
        status=400,
    )
    assert body["status"] == "failure"


async def test_date_generate_uses_the_callers_time_zone(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.insert("incident", {"sys_id": _sid(1)}, at=FIXED_NOW - timedelta(hours=2))  # 05:00Z
    # 2026-09-28 23:00 in Los Angeles is 06:00 UTC: the row (05:00 UTC) is before it...
    query = "sys_updated_on<javascript:gs.dateGenerate('2026-09-28','23:00:00')"
    rows, _ = await table(emulator_client, "incident", sysparm_query=query)
    assert len(rows) == 1
    # ...while the same wall-clock literal read as UTC would exclude it.
    rows, _ = await table(
        emulator_client, "incident", sysparm_query="sys_updated_on<2026-09-28 23:00:00"
    )
    assert rows == []


async def test_shorthand_field_parameters(emulator: Emulator, emulator_client: Client) -> None:
    emulator.insert("incident", {"state": "7", "active": "false"})
    emulator.insert("incident", {"state": "2"})
    rows, _ = await table(emulator_client, "incident", state="closed", sysparm_fields="state")
    assert rows == [{"state": "7"}]
    rows, _ = await table(emulator_client, "incident", active="true", sysparm_fields="state")
    assert rows == [{"state": "2"}]


async def test_limit_offset_count_and_link_header(
    emulator: Emulator, emulator_client: Client
) -> None:
    for n in range(23):
        emulator.insert("incident", {"sys_id": _sid(n)})
    query = "ORDERBYsys_id"
    rows, headers = await table(
        emulator_client,
        "incident",
        sysparm_query=query,
        sysparm_limit="10",
        sysparm_offset="10",
        sysparm_fields="sys_id",
    )
    assert [r["sys_id"] for r in rows] == [_sid(n) for n in range(10, 20)]
    assert headers["X-Total-Count"] == "23"
    links = {}
    for part in headers["Link"].split(","):
        url, rel = part.split(";")
        links[rel.removeprefix('rel="').removesuffix('"')] = URL(url.strip("<>"))
    assert list(links) == ["first", "prev", "next", "last"]
    assert {k: v.query["sysparm_offset"] for k, v in links.items()} == {
        "first": "0",
        "prev": "0",
        "next": "20",
        "last": "20",
    }
    for link in links.values():
        assert link.is_absolute()
        assert link.path == "/api/now/table/incident"
        assert link.query["sysparm_query"] == query
        assert link.query["sysparm_limit"] == "10"
        assert link.query["sysparm_fields"] == "sys_id"
    # First page: no prev. Last page: no next.
    _, headers = await table(emulator_client, "incident", sysparm_limit="10")
    assert "prev" not in headers["Link"]
    _, headers = await table(emulator_client, "incident", sysparm_limit="10", sysparm_offset="20")
    assert 'rel="next"' not in headers["Link"]
    # Single page, suppressed header, no count.
    _, headers = await table(emulator_client, "incident", sysparm_limit="30")
    assert "Link" not in headers
    _, headers = await table(
        emulator_client,
        "incident",
        sysparm_limit="5",
        sysparm_suppress_pagination_header="true",
        sysparm_no_count="true",
    )
    assert "Link" not in headers
    assert "X-Total-Count" not in headers


async def test_default_limit_and_hard_cap(emulator: Emulator, emulator_client: Client) -> None:
    emulator.burst("incident", n=10_050, at=FIXED_NOW)
    rows, headers = await table(
        emulator_client,
        "incident",
        sysparm_fields="sys_id",
        sysparm_suppress_pagination_header="true",
    )
    assert len(rows) == 10_000
    assert headers["X-Total-Count"] == "10050"
    emulator.max_limit = 100
    rows, headers = await table(
        emulator_client,
        "incident",
        sysparm_fields="sys_id",
        sysparm_limit="5000",
        sysparm_query="ORDERBYsys_id",
    )
    assert len(rows) == 100
    assert 'sysparm_offset=100>;rel="next"' in headers["Link"]


async def test_no_snapshot_isolation_between_pages(
    emulator: Emulator, emulator_client: Client
) -> None:
    for n in range(20):
        emulator.insert("incident", {"sys_id": _sid(n)}, at=FIXED_NOW - timedelta(seconds=100 - n))
    journal_entries = []

    def move_first_row(entry: Request) -> None:
        journal_entries.append(entry)
        if len(journal_entries) == 2:  # between page 1 and page 2
            emulator.update("incident", _sid(0), {"state": "2"})

    emulator.on_request(move_first_row)
    seen: list[str] = []
    for offset in (0, 10, 20):
        rows, _ = await table(
            emulator_client,
            "incident",
            sysparm_limit="10",
            sysparm_offset=str(offset),
            sysparm_fields="sys_id",
            sysparm_query="ORDERBYsys_updated_on",
        )
        seen += [r["sys_id"] for r in rows]
    # The moved row shows up twice and the row that slid back over the boundary is skipped.
    assert seen.count(_sid(0)) == 2
    assert _sid(10) not in seen
    assert journal_entries[0].params["sysparm_offset"] == "0"


@pytest.mark.slow
async def test_100k_rows_keyset_page_with_count(
    emulator: Emulator, emulator_client: Client
) -> None:
    for i in range(100_000):
        emulator.insert(
            "incident", {"priority": str(i % 5 + 1)}, at=FIXED_NOW - timedelta(seconds=i // 3)
        )
    t = "2026-09-29 01:00:00"
    query = (
        f"priority<=2^sys_updated_on>{t}^NQpriority<=2^sys_updated_on={t}^sys_id>8"
        "^ORDERBYsys_updated_on^ORDERBYsys_id"
    )
    rows, headers = await table(
        emulator_client,
        "incident",
        sysparm_query=query,
        sysparm_limit="1000",
        sysparm_fields="sys_id,sys_updated_on",
    )
    assert len(rows) == 1000
    keys = [(r["sys_updated_on"], r["sys_id"]) for r in rows]
    assert keys == sorted(keys)
    assert int(headers["X-Total-Count"]) > 8000
