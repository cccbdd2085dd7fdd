"""`snowsource check` names the real problem: an unreachable instance is not a credentials
problem, a refused query is not a table-name problem, a typo in `fields` or `timestamp.field` is
compared with the table's columns."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from snowsource.cli.check import CheckResult, Status, exit_code, run_checks
from snowsource.config.loader import load_config
from tests.integration.conftest import Env
from tests.integration.engine import write_config

pytestmark = pytest.mark.kafka


async def _check(env: Env, tables: dict[str, dict[str, Any]], **top: Any) -> dict[str, CheckResult]:
    document = env.document(tables, **top)
    path = write_config(env.tmp_path / f"check-{time.monotonic_ns()}.yaml", document)
    return {r.name: r for r in await run_checks(load_config(path, env={}))}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def seeded(env: Env) -> Env:
    env.emu.seed(tables=("incident",), rows=5)
    return env


async def test_a_refused_connection_is_reported_as_unreachable_not_as_credentials(
    seeded: Env,
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    snow = {
        "url": url,
        "auth": {"type": "basic", "username": "admin", "password": "admin"},
        "tables": {"incident": {"name": "incident", "topic": seeded.topic("incident")}},
    }
    results = await _check(seeded, {"incident": {"name": "incident"}}, snow=snow)
    reachable = results["ServiceNow reachable"]
    assert reachable.status is Status.FAIL
    assert "Connection refused" in reachable.detail
    assert url.removeprefix("http://") in reachable.detail
    assert "ssl:default" not in reachable.detail
    assert any("snow.url" in note for note in reachable.notes)
    credentials = results["ServiceNow credentials accepted"]
    assert credentials.status is Status.SKIP
    assert "credential" not in credentials.detail
    assert results["table incident readable"].status is Status.SKIP
    assert exit_code(results.values()) == 1


async def test_a_query_the_instance_refuses_is_named_as_the_query(seeded: Env) -> None:
    results = await _check(seeded, {"incident": {"name": "incident", "query": "active=true^ORfoo"}})
    readable = results["table incident readable"]
    assert readable.status is Status.FAIL
    assert "refused the query" in readable.detail
    assert "Invalid query" in readable.detail  # the instance's own words
    assert "table name" not in readable.detail
    assert any("snow.tables.incident.query" in note for note in readable.notes)


async def test_a_refused_table_still_gets_the_general_advice(seeded: Env) -> None:
    # Without a query the 400 cannot be the query's.
    seeded.emu.deny_table("admin", "incident")
    results = await _check(seeded, {"incident": {"name": "incident"}})
    readable = results["table incident readable"]
    assert readable.status is Status.FAIL
    assert "refused the query" not in readable.detail


async def test_a_typo_in_fields_warns_with_a_suggestion(seeded: Env) -> None:
    tables = {
        "incident": {
            "name": "incident",
            "fields": ["number", "short_descriptoin", "caller_id.name", "nonsense_xyz"],
        }
    }
    results = await _check(seeded, tables)
    fields = results["table incident fields exist"]
    assert fields.status is Status.WARN
    assert "'short_descriptoin' (did you mean 'short_description'?)" in fields.detail
    assert "'nonsense_xyz'" in fields.detail
    # A dot-walked field exists when its reference field does; real fields are not listed.
    assert "caller_id" not in fields.detail
    assert "'number'" not in fields.detail
    assert any("snow.tables.incident.fields" in note for note in fields.notes)
    assert exit_code(results.values()) == 0  # a warning, not a failure


async def test_known_fields_pass_and_no_fields_means_no_line(seeded: Env) -> None:
    results = await _check(
        seeded, {"incident": {"name": "incident", "fields": ["number", "short_description"]}}
    )
    assert results["table incident fields exist"].status is Status.PASS
    results = await _check(seeded, {"incident": {"name": "incident"}})
    assert "table incident fields exist" not in results


async def test_an_unknown_timestamp_field_is_named_with_a_suggestion(seeded: Env) -> None:
    results = await _check(
        seeded, {"incident": {"name": "incident", "timestamp.field": "sys_updated_onn"}}
    )
    cursor = results["table incident cursor fields visible"]
    assert cursor.status is Status.FAIL
    assert "timestamp.field 'sys_updated_onn': incident has no such field" in cursor.detail
    assert "(did you mean 'sys_updated_on'?)" in cursor.detail
