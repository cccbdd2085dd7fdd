"""Seeded data and the background activity task."""

from __future__ import annotations

from datetime import timedelta

import aiohttp
import pytest

from snowsource.emulator import Emulator, serve
from snowsource.emulator.clock import stamp
from tests.emulator.conftest import AUTH, FIXED_NOW
from tests.polling import poll_until


def _snapshot(emu: Emulator, table: str) -> list[list[tuple[str, str]]]:
    rows = [sorted(r.items()) for r in emu.rows(table)]
    return sorted(rows)


def test_seed_is_deterministic_and_realistic() -> None:
    tables = ("incident", "change_request", "cmdb_ci", "task_sla")
    a, b, c = (Emulator(seed=s, now=FIXED_NOW) for s in (7, 7, 8))
    for emu in (a, b, c):
        emu.seed(tables=tables, rows=60)
    for table in ("incident", "change_request", "cmdb_ci", "task_sla", "sys_user"):
        assert _snapshot(a, table) == _snapshot(b, table)
    assert _snapshot(a, "incident") != _snapshot(c, "incident")

    incidents = a.rows("incident")
    assert len(incidents) == 60
    oldest = stamp(FIXED_NOW - timedelta(days=30))
    now = stamp(FIXED_NOW)
    users = {u["sys_id"] for u in a.rows("sys_user")}
    for row in incidents:
        assert oldest <= row["sys_created_on"] <= row["sys_updated_on"] <= now
        assert (row["sys_mod_count"] == "0") == (row["sys_created_on"] == row["sys_updated_on"])
        assert row["caller_id"] in users
        assert row["priority"] in {"1", "2", "3", "4", "5"}
        assert row["number"].startswith("INC")
    assert len({r["number"] for r in incidents}) == 60
    assert len({r["sys_updated_on"][:10] for r in incidents}) > 10  # spread over many days
    classes = {r["sys_class_name"] for r in a.rows("cmdb_ci")}
    assert classes == {"cmdb_ci", "cmdb_ci_server"}
    slas = a.rows("task_sla")
    assert slas
    assert {s["task"] for s in slas} <= {r["sys_id"] for r in incidents}
    with pytest.raises(ValueError, match="cannot seed"):
        a.seed(tables=("u_unknown",), rows=1)


async def test_activity_runs_with_the_server_and_stops_with_it() -> None:
    emu = Emulator(seed=3, now=FIXED_NOW)
    emu.clock.follow_wall_clock(True)
    emu.seed(tables=("incident",), rows=50)
    emu.start_activity(200)
    assert not emu.activity_running  # owned by the app lifecycle: nothing runs before serve
    before = {r["sys_id"]: r["sys_mod_count"] for r in emu.rows("incident")}
    async with serve(emu) as url:
        assert emu.activity_running

        def changed() -> bool:
            rows = emu.rows("incident")
            inserted = len([r for r in rows if r["sys_id"] not in before]) >= 5
            updated = any(
                before.get(r["sys_id"], r["sys_mod_count"]) != r["sys_mod_count"] for r in rows
            )
            return inserted and updated

        await poll_until(changed)
        newest = max(r["sys_updated_on"] for r in emu.rows("incident"))
        assert newest >= stamp(FIXED_NOW)
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{url}/api/now/table/incident",
                params={
                    "sysparm_query": f"sys_updated_on>={stamp(FIXED_NOW)}",
                    "sysparm_limit": "1",
                },
                headers=AUTH,
            ) as resp,
        ):
            assert int(resp.headers["X-Total-Count"]) >= 5
    assert not emu.activity_running
