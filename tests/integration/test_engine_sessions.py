"""The daemon against an instance: 8 tables over a session pool, every auth type, and 2xx answers
that are not pages (SPEC §14.1). The emulator models sessions and two nodes (``env`` turns it on)
and is reached as ``localhost``; what the instance saw comes from its statistics."""

from __future__ import annotations

from typing import Any

import pytest

from snowsource.emulator.journal import Request
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import (
    caught_up,
    read_offsets,
    read_topic,
    running,
    settings_from,
)
from tests.polling import poll_until

PREFIXES = "01234567"
K = 8


def eight_tables() -> dict[str, dict[str, Any]]:
    # Eight source partitions over one seeded table: a sys_id prefix each.
    return {
        f"inc{c}": {"name": "incident", "query": f"sys_idSTARTSWITH{c}", "batch.size": 10}
        for c in PREFIXES
    }


AUTH: dict[str, dict[str, Any]] = {
    "basic": {"type": "basic", "username": "admin", "password": "admin"},
    "oauth2": {
        "type": "oauth2",
        "oauth.grant.type": "client_credentials",
        "oauth.client.id": "snow-client",
        "oauth.client.secret": "cl1ent-secret",
    },
    "api_key": {"type": "api_key", "api.key": "ap1-key-0123456789"},
}


@pytest.mark.parametrize("auth", list(AUTH))
async def test_eight_tables_backfill_in_parallel_over_at_most_k_plus_2_sessions(
    env: Env, auth: str
) -> None:
    env.emu.seed(tables=("incident",), rows=1600)
    env.emu.latency_ms = 80
    if auth == "oauth2":
        # Tokens live 2 s and are renewed a second early: renewals happen during the backfill.
        env.emu.add_oauth_client("snow-client", "cl1ent-secret", user="admin", access_lifetime=2)
    if auth == "api_key":
        env.emu.add_user(
            "key.user", "unused", api_key="ap1-key-0123456789", roles=("admin",), admin=True
        )
    expected = {
        c: {r["sys_id"] for r in env.emu.rows("incident") if r["sys_id"].startswith(c)}
        for c in PREFIXES
    }
    document = env.document(eight_tables())
    document["snow"]["auth"] = AUTH[auth]
    document["snow"]["http"]["max.concurrent.requests"] = K
    settings = settings_from(env.tmp_path, document)
    env.emu.instance.reset_statistics()
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, *(f"inc{c}" for c in PREFIXES)), timeout=60)
        pool = daemon.servicenow_pool()
    stats = env.emu.instance.statistics()
    assert stats["peak_in_flight"] >= 6, stats  # type: ignore[operator]
    assert stats["sessions_opened"] <= K + 2, stats  # type: ignore[operator]
    assert stats["responses_202"] == 0
    assert pool is not None
    assert pool["sessions_open"] <= K
    if auth == "oauth2":
        tokens = {r.headers.get("Authorization") for r in env.emu.journal if r.table}
        assert len(tokens) >= 2, "no token was renewed during the run"
    for c in PREFIXES:
        records = await read_topic(env.bootstrap, env.topic(f"inc{c}"))
        assert {r.key.decode() for r in records if r.key} == expected[c]


async def test_two_requests_per_session_halve_the_sessions(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=1600)
    env.emu.latency_ms = 80
    env.emu.instance.configure(nodes=2, per_session=2)  # Yokohama
    document = env.document(eight_tables())
    document["snow"]["http"]["requests.per.session"] = 2
    settings = settings_from(env.tmp_path, document)
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, *(f"inc{c}" for c in PREFIXES)), timeout=60)
        pool = daemon.servicenow_pool()
    stats = env.emu.instance.statistics()
    assert pool is not None
    assert pool["requests_per_session"] == 2
    assert pool["sessions_open"] <= 4
    assert stats["sessions_opened"] <= 4, stats  # type: ignore[operator]
    assert stats["peak_in_flight"] >= 6, stats  # type: ignore[operator]


@pytest.mark.parametrize("slices", [1, 4])
async def test_non_pages_mid_backfill_are_retried_without_moving_the_cursor(
    env: Env, slices: int
) -> None:
    env.emu.seed(tables=("incident",), rows=300)
    rows = env.emu.rows("incident")
    pages = 0

    def inject(entry: Request) -> None:
        nonlocal pages
        if entry.table != "incident" or "sysparm_limit" not in entry.params:
            return
        pages += 1
        if pages == 3:  # after the third page: each of these in turn, then normal pages
            env.emu.faults.add(status=202, table="incident")
            env.emu.faults.add(kind="empty", table="incident")
            env.emu.faults.add(status=200, html=True, table="incident")

    env.emu.on_request(inject)
    settings = env.settings(
        {"incident": {"name": "incident", "batch.size": 50}}, **{"backfill.slices": slices}
    )
    before = {status: non_pages(status) for status in ("200", "202")}
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=60)
    records = await read_topic(env.bootstrap, env.topic("incident"))
    keys = [r.key.decode() for r in records if r.key]
    assert sorted(keys) == sorted(r["sys_id"] for r in rows)  # nothing lost, nothing twice
    page_requests = [
        r
        for r in env.emu.journal
        if r.table == "incident" and r.params.get("sysparm_limit") == "50"
    ]
    odd = [i for i, r in enumerate(page_requests) if r.status == 202]
    assert odd, "the 202 was never answered"
    first = odd[0]
    queries = [r.params["sysparm_query"] for r in page_requests]
    if slices == 1:
        # The three answers that were not pages, and the request after them, asked the same page.
        assert len(set(queries[first : first + 4])) == 1
        assert [r.status for r in page_requests[first : first + 4]] == [202, 200, 200, 200]
    else:
        # Slices request side by side, so the three faults met whichever requests came next:
        # each of those pages was asked again, by its own slice, from the same position.
        assert page_requests[first].status == 202
        for i in range(first, first + 3):
            assert queries[i] in queries[i + 1 :], f"request {i} was not retried"
    after = {status: non_pages(status) for status in ("200", "202")}
    assert after["202"] - before["202"] == 1
    assert after["200"] - before["200"] == 2
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    last = max(rows, key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    assert (offsets["incident"]["timestamp"], offsets["incident"]["sys_id"]) == (
        last["sys_updated_on"],
        last["sys_id"],
    )


def non_pages(status: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "snowsource_servicenow_non_page_responses_total", {"table": "incident", "status": status}
    )
    return value or 0.0


async def test_saturated_nodes_lower_the_limit_without_a_hot_loop_and_it_recovers(
    env: Env,
) -> None:
    env.emu.seed(tables=("incident",), rows=600)
    rows = env.emu.rows("incident")
    settings = env.settings({"incident": {"name": "incident", "batch.size": 10}})
    async with running(settings) as daemon:
        # The nodes' semaphores are full for a while: every request is a 429 without Retry-After.
        env.emu.faults.add(status=429, times=None, table="incident")
        start = len(env.emu.journal)
        await poll_until(lambda: sum(r.status == 429 for r in env.emu.journal[start:]) >= 4)
        pool = daemon.servicenow_pool()
        assert pool is not None
        assert pool["concurrency_limit"] == 1  # 8 -> 4 -> 2 -> 1, and never below
        saturated_from = env.emu.journal[start].wall
        await poll_until(lambda: env.emu.journal[-1].wall - saturated_from >= 3.0, timeout=30)
        env.emu.faults.clear()
        refused = [r for r in env.emu.journal[start:] if r.status == 429]
        span = refused[-1].wall - refused[0].wall
        # Backoff between attempts (50 ms doubling to 500 ms here, full jitter): a few per
        # second, where a hot loop would send hundreds.
        assert len(refused) / max(span, 1.0) < 25, (len(refused), span)
        pool = daemon.servicenow_pool()
        assert pool is not None
        assert pool["concurrency_limit"] == 1
        await poll_until(caught_up(daemon, "incident"), timeout=60)
        pool = daemon.servicenow_pool()
        assert pool is not None
        assert pool["concurrency_limit"] > 1  # 20 good answers per step back up
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert sorted(r.key.decode() for r in records if r.key) == sorted(r["sys_id"] for r in rows)
