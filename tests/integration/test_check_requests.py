"""``snowsource check`` asks each stream's table what the daemon will ask it (issue 19 item 4).

A check that probes a table under another domain scope or query category than the daemon's
passes or fails for the wrong reason: with ``deletes: audit`` and ``query.domain: true`` check
used to read ``sys_audit_delete`` across all domains while the delete stream reads the user's
own. The emulator's journal records both sides; for every stream (the table, its delete stream)
and both ``query.domain`` settings, the scope of every request must be the same.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from snowsource.cli.check import run_checks
from snowsource.config.loader import load_config
from snowsource.emulator.journal import Request
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, running, write_config
from tests.polling import poll_until

pytestmark = pytest.mark.kafka

STREAM_TABLES = ("incident", "sys_audit_delete")
# The parameters that decide which rows a request may see, whatever else it asks.
SCOPE = ("sysparm_query_no_domain", "sysparm_query_category")


def _tables(query_domain: bool) -> dict[str, dict[str, Any]]:
    return {
        "incident": {
            "name": "incident",
            "deletes": "audit",
            "query": "active=true",
            "query.domain": query_domain,
            "query.category": "list",
            "fields": ["number", "short_description"],
        }
    }


def _scopes(requests: list[Request]) -> set[tuple[str | None, ...]]:
    return {tuple(r.params.get(key) for key in SCOPE) for r in requests}


def _by_table(env: Env, start: int) -> dict[str, list[Request]]:
    journal = env.emu.journal[start:]
    return {table: [r for r in journal if r.table == table] for table in STREAM_TABLES}


@pytest.mark.parametrize("query_domain", [True, False], ids=["domain", "no-domain"])
async def test_check_probes_every_stream_with_the_daemons_scope(
    env: Env, query_domain: bool
) -> None:
    env.emu.seed(tables=("incident",), rows=12)
    env.emu.delete("incident", env.emu.rows("incident")[0]["sys_id"])
    document = env.document(_tables(query_domain))

    start = len(env.emu.journal)
    path = write_config(env.tmp_path / f"check-{time.monotonic_ns()}.yaml", document)
    await run_checks(load_config(path, env={}))
    checked = _by_table(env, start)

    start = len(env.emu.journal)
    path = write_config(env.tmp_path / f"run-{time.monotonic_ns()}.yaml", document)
    async with running(load_config(path, env={}).settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.deletes"))
    ran = _by_table(env, start)

    expected = (None if query_domain else "true", "list")
    for table in STREAM_TABLES:
        assert checked[table], f"check sent no request to {table}"
        assert ran[table], f"the daemon sent no request to {table}"
        assert _scopes(ran[table]) == {expected}, table
        assert _scopes(checked[table]) == _scopes(ran[table]), table

    # The audit probe reads what the delete stream pages read: its base query and fields.
    probe = next(r for r in checked["sys_audit_delete"] if "sysparm_query" in r.params)
    assert probe.params["sysparm_query"] == "tablename=incident"
    page_queries = {
        r.params["sysparm_query"] for r in ran["sys_audit_delete"] if "sysparm_query" in r.params
    }
    assert page_queries
    assert all(q.startswith("tablename=incident^") for q in page_queries)
    fields = {
        r.params["sysparm_fields"] for r in ran["sys_audit_delete"] if "sysparm_query" in r.params
    }
    assert fields == {probe.params["sysparm_fields"]}
    assert "documentkey" in probe.params["sysparm_fields"].split(",")
