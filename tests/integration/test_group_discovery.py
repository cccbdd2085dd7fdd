"""``snow.discover`` with ``tasks.assignment: group`` (SPEC §15.2): three ``snowsource run``
processes share the discovered tables; who polls what is read from each member's own log
("tables started" / "tables released"), as in ``test_group_mode``."""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from snowsource.emulator.catalog import CATALOG_PATH, add_table
from tests.integration.conftest import Env
from tests.integration.engine import read_topic, write_config
from tests.integration.processes import start_run
from tests.integration.test_group_mode import FAILOVER_SECONDS, SESSION_MS, Member, _free_port
from tests.polling import poll_until

pytestmark = pytest.mark.slow

TABLES = [f"u_gd_{i}" for i in range(6)]
# A database view over u_gd_0: whoever runs it must read it by g_sys_updated_on/g_sys_id.
VIEW = "u_gd_view"
INTERVAL = 3


def config(env: Env, port: int) -> Path:
    document = env.document(
        {},
        **{
            "topic.prefix": f"{env.name}.",
            "tasks.assignment": "group",
            "group.session.timeout.ms": SESSION_MS,
            "rest": {"enabled": True, "host": "127.0.0.1", "port": port},
        },
    )
    document["snow"]["discover"] = {
        "include": ["u_gd_*"],
        "views": True,
        "interval.seconds": INTERVAL,
    }
    return write_config(env.tmp_path / f"group-discover-{port}.yaml", document)


def placement(members: list[Member], tables: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {alias: [] for alias in tables}
    for member in members:
        if member.killed_at is None and member.proc.returncode is None:
            for alias in member.running():
                out.setdefault(alias, []).append(member.name)
    return out


def settled(members: list[Member], tables: list[str]) -> bool:
    found = placement(members, tables)
    return set(found) == set(tables) and all(len(names) == 1 for names in found.values())


def assert_never_polled_twice(members: list[Member], tables: list[str]) -> None:
    for alias in tables:
        spans = sorted(
            (start, end, m.name) for m in members for start, end in m.intervals().get(alias, [])
        )
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            assert start >= end, f"{alias} polled by {first} and {second} at once"


async def test_three_members_share_discovered_tables(env: Env) -> None:
    for name in TABLES:
        add_table(env.emu, name, rows=5)
    env.emu.create_view(VIEW, {"g": "u_gd_0"})
    members: list[Member] = []
    try:
        for index in range(3):
            port = _free_port()
            log = env.tmp_path / f"m{index}.log"
            members.append(Member(f"m{index}", log, port, await start_run(config(env, port), log)))
        await poll_until(lambda: settled(members, [*TABLES, VIEW]), timeout=90)
        assert sum(len(m.running()) for m in members) == len(TABLES) + 1
        # The view's records are keyed by its base table's prefixed id, every row of it.
        base_ids = {r["sys_id"] for r in env.emu.rows("u_gd_0")}

        async def view_keys() -> bool:
            records = await read_topic(env.bootstrap, f"{env.name}.{VIEW}")
            return {(r.key or b"").decode() for r in records} == base_ids

        await poll_until(view_keys, timeout=60, interval=0.5)

        # A table created on the instance is picked up by exactly one member.
        async with aiohttp.ClientSession() as http:
            body = {"name": "u_gd_new", "rows": 3}
            async with http.post(env.url + CATALOG_PATH, json=body) as response:
                assert response.status == 201
        tables = [*TABLES, VIEW, "u_gd_new"]
        await poll_until(lambda: settled(members, tables), timeout=INTERVAL * 3 + 30)

        # kill -9 of a member that runs tables: they move to the others.
        victim = next(m for m in members if m.running())
        moved = victim.running()
        victim.proc.send_signal(signal.SIGKILL)
        victim.killed_at = time.time()
        await victim.proc.wait()
        await poll_until(lambda: settled(members, tables), timeout=FAILOVER_SECONDS + 30)
        survivors = {m.name for m in members if m is not victim}
        for alias in moved:
            assert placement(members, tables)[alias][0] in survivors
        assert_never_polled_twice(members, tables)
    finally:
        for member in members:
            if member.proc.returncode is None:
                member.proc.send_signal(signal.SIGKILL)
                await member.proc.wait()
