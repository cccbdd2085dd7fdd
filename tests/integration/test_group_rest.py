"""The REST API in group mode: any member shows the whole connector, stop and resume act on
the member's own tables, and offsets change only once every member is stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import ClientSession

from snowsource.core.table_status import TableState
from snowsource.engine.supervisor import Daemon
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import running
from tests.integration.test_rest import (
    base_url,
    call,
    group_settled,
    offset,
    rest_settings,
    spec_of,
    worker_of,
)
from tests.polling import poll_until

ALIASES = [f"ends{digit}" for digit in range(1, 7)]


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession() as session:
        yield session


def _tables() -> dict[str, dict[str, Any]]:
    return {alias: {"name": "incident", "query": f"numberENDSWITH{alias[-1]}"} for alias in ALIASES}


async def _tables_seen(http: ClientSession, daemon: Daemon) -> dict[str, dict[str, Any]]:
    status, body = await call(http, "GET", f"{base_url(daemon)}/status")
    assert status == 200
    tables: dict[str, dict[str, Any]] = body["tables"]
    return tables


async def test_any_member_shows_every_table_and_acts_on_its_own(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=60)
    settings = rest_settings(
        env, _tables(), **{"tasks.assignment": "group", "group.session.timeout.ms": 6000}
    )
    async with running(settings) as first, running(settings) as second:
        await poll_until(lambda: group_settled(first, second, ALIASES), timeout=60, interval=0.1)
        # a: a member that runs tables (the one stopped first); b: the other, which the
        # plan may have left without any.
        a, b = (first, second) if first.pollers else (second, first)
        seen = await _tables_seen(http, a)
        assert set(seen) == set(ALIASES)
        for alias in ALIASES:
            owner = a if alias in a.pollers else b
            assert seen[alias]["worker_id"] == worker_of(owner), (alias, seen[alias])

        # stop on a: only a's tables stop; b shows them STOPPED under a's worker id.
        a_tables, b_tables = set(a.pollers), set(b.pollers)
        assert await call(http, "PUT", f"{base_url(a)}/stop") == (204, None)
        assert a.pollers == {}
        assert set(b.pollers) == b_tables
        # a exports the state of its own tables only (both share one registry here).
        for alias in ALIASES:
            stopped = "STOPPED" if alias in a_tables else "RUNNING"
            value = metrics.REGISTRY.get_sample_value(
                "snowsource_table_state", {"table": alias, "state": stopped}
            )
            assert value == 1, (alias, stopped)

        async def b_sees_a_stopped() -> bool:
            tables = await _tables_seen(http, b)
            return all(
                tables[t]["state"] == "STOPPED" and tables[t]["worker_id"] == worker_of(a)
                for t in a_tables
            )

        await poll_until(b_sees_a_stopped, timeout=30, interval=0.2)
        # The tables of a stopped member stay with it: nobody else polls them.
        assert set(b.pollers) == b_tables

        # Offsets change only once every member is stopped.
        spec = spec_of(a, ALIASES[0])
        patch = {
            "offsets": [
                {
                    "partition": spec.partition.as_dict(),
                    "offset": offset(spec, "2026-09-01 00:00:00"),
                }
            ]
        }
        status, body = await call(http, "PATCH", f"{base_url(a)}/offsets", patch)
        assert status == 400
        assert worker_of(b) in body["message"], body
        assert await call(http, "PUT", f"{base_url(b)}/stop") == (204, None)

        async def patched() -> bool:
            status, _ = await call(http, "PATCH", f"{base_url(a)}/offsets", patch)
            return status == 200

        # a learns that b stopped at the round b's stop asked for.
        await poll_until(patched, timeout=30, interval=0.5)

        # resume on both: each runs its own tables again.
        assert (await call(http, "PUT", f"{base_url(a)}/resume"))[0] == 202
        assert (await call(http, "PUT", f"{base_url(b)}/resume"))[0] == 202
        await poll_until(
            lambda: set(a.pollers) == a_tables and set(b.pollers) == b_tables, timeout=30
        )


async def test_a_table_failed_as_its_member_starts_it_is_failed_in_the_metrics(env: Env) -> None:
    # The member builds the table's poller when the group gives it the table; a missing topic
    # FAILs it right there, and the state gauge (what the "Table FAILED" alert reads) says so.
    env.emu.seed(tables=("incident",), rows=5)
    settings = rest_settings(
        env,
        {"grp_missing": {"name": "incident"}},
        **{"tasks.assignment": "group", "topic.creation.enable": False},
    )
    async with running(settings) as daemon:
        await poll_until(lambda: "grp_missing" in daemon.pollers, timeout=60, interval=0.1)
        assert daemon.pollers["grp_missing"].status.state == TableState.FAILED

        def state(name: str) -> float:
            labels = {"table": "grp_missing", "state": name}
            return metrics.REGISTRY.get_sample_value("snowsource_table_state", labels) or 0.0

        assert (state("FAILED"), state("RUNNING")) == (1, 0)
