"""Retried errors are visible, and readiness says when the process cannot do its job (SPEC §9,
§13.2). Against a real daemon, a real broker (one of its own when Kafka is stopped) and the
in-process emulator, through the REST API as an operator or an orchestrator sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from snowsource.emulator import serve
from snowsource.engine import failures
from snowsource.engine.supervisor import Daemon
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, running
from tests.integration.test_rest import base_url, call, rest_of, rest_settings
from tests.kafka_support import LocalBroker, free_broker_port
from tests.polling import poll_until

pytestmark = [pytest.mark.kafka]

UNREADY_AFTER = 1.0  # health.unready.after.seconds of these tests


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession() as session:
        yield session


def closed_port() -> int:
    """A local port nothing listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def settings_for(env: Env, tables: dict[str, dict[str, Any]], **top: Any) -> Any:
    return rest_settings(env, tables, **{"health.unready.after.seconds": UNREADY_AFTER, **top})


async def table_of(http: ClientSession, daemon: Daemon, alias: str) -> dict[str, Any]:
    status, body = await call(http, "GET", f"{base_url(daemon)}/status")
    assert status == 200
    table: dict[str, Any] = body["tables"][alias]
    return table


async def ready(http: ClientSession, daemon: Daemon) -> tuple[int, dict[str, Any]]:
    return await call(http, "GET", f"{rest_of(daemon).url}/health/ready")


async def failing_for_over(http: ClientSession, daemon: Daemon, alias: str, s: float) -> bool:
    since = (await table_of(http, daemon, alias))["failing_since"]
    return since is not None and (datetime.now(UTC) - _parse(since)).total_seconds() > s


def _parse(text: str) -> datetime:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", text), text
    return datetime.fromisoformat(text)


async def gauge(http: ClientSession, daemon: Daemon, alias: str) -> float | None:
    async with http.get(f"{rest_of(daemon).url}/metrics") as resp:
        text = await resp.text()
    found = re.search(
        rf'^snowsource_table_consecutive_failures\{{table="{alias}"\}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else None


async def test_an_unreachable_instance_shows_its_error_and_makes_the_process_unready(
    env: Env, http: ClientSession
) -> None:
    port = closed_port()
    env.url = f"http://127.0.0.1:{port}"
    settings = settings_for(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:

        async def retried_twice() -> bool:
            return int((await table_of(http, daemon, "incident"))["consecutive_failures"]) >= 2

        await poll_until(retried_twice, timeout=30)
        table = await table_of(http, daemon, "incident")
        # Still trying to take its first look at the instance, but no longer silent about why.
        assert table["state"] == "STARTING"
        assert f"cannot connect to 127.0.0.1:{port}" in table["last_error"]
        assert _parse(table["failing_since"]) <= datetime.now(UTC)
        assert (await gauge(http, daemon, "incident") or 0) >= 2

        await poll_until(lambda: failing_for_over(http, daemon, "incident", UNREADY_AFTER))
        status, body = await ready(http, daemon)
        assert status == 503
        assert "has been failing for longer than health.unready.after.seconds" in body["message"]
        assert "incident: failing for" in body["message"]
        assert body["checks"]["failing_tables"] == ["incident"]
        assert body["checks"]["kafka_connected"] is True

        # Stopped, nothing retries: the status and the gauge both say so.
        async with http.put(f"{rest_of(daemon).url}/connectors/{env.name}/stop") as resp:
            assert resp.status == 204, await resp.text()
        assert (await table_of(http, daemon, "incident"))["consecutive_failures"] == 0
        assert await gauge(http, daemon, "incident") == 0


async def test_a_stopped_instance_is_visible_and_everything_clears_when_it_is_back(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=10)
    port = closed_port()
    first = serve(env.emu, port=port)
    env.url = await first.__aenter__()
    serving: contextlib.AbstractAsyncContextManager[str] | None = first
    try:
        settings = settings_for(env, {"incident": {"name": "incident"}})
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident"))
            assert (await ready(http, daemon))[0] == 200
            table = await table_of(http, daemon, "incident")
            assert (table["consecutive_failures"], table["failing_since"]) == (0, None)

            await first.__aexit__(None, None, None)  # the instance goes away
            serving = None

            async def failing() -> bool:
                return int((await table_of(http, daemon, "incident"))["consecutive_failures"]) >= 2

            await poll_until(failing, timeout=30)
            table = await table_of(http, daemon, "incident")
            assert table["state"] == "RUNNING"
            assert f"127.0.0.1:{port}" in table["last_error"]
            since = table["failing_since"]
            await poll_until(lambda: failing_for_over(http, daemon, "incident", UNREADY_AFTER))
            status, body = await ready(http, daemon)
            assert status == 503, body
            # The run of failures began once: later attempts do not move its start.
            assert (await table_of(http, daemon, "incident"))["failing_since"] == since

            async with serve(env.emu, port=port):  # back, on the same address

                async def cleared() -> bool:
                    table = await table_of(http, daemon, "incident")
                    return bool(table["consecutive_failures"] == 0)

                await poll_until(cleared, timeout=30)
                table = await table_of(http, daemon, "incident")
                assert (table["failing_since"], table["last_error"]) == (None, None)
                assert (await ready(http, daemon))[0] == 200
                assert await gauge(http, daemon, "incident") == 0
    finally:
        if serving is not None:
            await serving.__aexit__(None, None, None)


async def test_5xx_answers_count_per_table_and_ready_needs_every_table_stuck(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=10)
    tables = {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}}
    async with running(settings_for(env, tables)) as daemon:
        await poll_until(caught_up(daemon, "incident", "change_request"))
        env.emu.faults.add(status=503, times=None, table="incident")
        await poll_until(lambda: failing_for_over(http, daemon, "incident", UNREADY_AFTER))
        table = await table_of(http, daemon, "incident")
        assert "503" in table["last_error"]
        assert table["consecutive_failures"] >= 2
        other = await table_of(http, daemon, "change_request")
        assert (other["consecutive_failures"], other["last_error"]) == (0, None)
        # One table still works: the process does its job for it, so it stays ready.
        status, body = await ready(http, daemon)
        assert status == 200, body
        assert body["checks"]["failing_tables"] == ["incident"]

        env.emu.faults.add(status=500, times=None, table="change_request")
        await poll_until(lambda: failing_for_over(http, daemon, "change_request", UNREADY_AFTER))
        status, body = await ready(http, daemon)
        assert status == 503, body
        assert "change_request: failing for" in body["message"]
        assert "incident: failing for" in body["message"]

        env.emu.faults.clear()

        async def both_clear() -> bool:
            _, body = await call(http, "GET", f"{base_url(daemon)}/status")
            return all(t["consecutive_failures"] == 0 for t in body["tables"].values())

        await poll_until(both_clear, timeout=30)
        assert (await ready(http, daemon))[0] == 200


async def test_a_task_that_owns_no_table_is_ready(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident",), rows=5)
    # One alias goes to task 0 whatever tasks.max says: task 1 owns nothing.
    settings = settings_for(
        env, {"incident": {"name": "incident"}}, **{"tasks.max": 2, "task.id": 1}
    )
    async with running(settings) as daemon:
        status, body = await ready(http, daemon)
        assert status == 200, body
        assert body["checks"]["tables"] == 0


@pytest.mark.slow
@pytest.mark.timeout(240)  # two broker starts
async def test_a_stopped_broker_makes_the_process_unready_until_it_is_back(
    env: Env, http: ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(failures, "ACKS_OVERDUE_SECONDS", 1.0)
    broker = LocalBroker(port=free_broker_port(), data_dir=tmp_path / "kafka")
    await asyncio.to_thread(broker.start)
    try:
        env.bootstrap = broker.bootstrap
        env.emu.seed(tables=("incident",), rows=10)
        settings = settings_for(
            env, {"incident": {"name": "incident"}}, **{"health.unready.after.seconds": 300}
        )
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident"), timeout=60)
            status, body = await ready(http, daemon)
            assert status == 200, body
            assert body["checks"]["kafka_connected"] is True

            await asyncio.to_thread(broker.stop)

            async def unready() -> bool:
                return (await ready(http, daemon))[0] == 503

            # A table with nothing to produce looks well: readiness is what says Kafka is gone.
            await poll_until(unready, timeout=30)
            status, body = await ready(http, daemon)
            assert "Kafka is not reachable" in body["message"]
            assert body["checks"]["kafka_connected"] is False
            row = env.emu.insert("incident", {"short_description": "while Kafka is down"})

            # aiokafka holds the record back rather than failing it; the table says so.
            async def held_back() -> bool:
                table = await table_of(http, daemon, "incident")
                return "Kafka has not acknowledged a page of 1 record(s)" in (
                    table["last_error"] or ""
                )

            await poll_until(held_back, timeout=30)
            table = await table_of(http, daemon, "incident")
            assert table["consecutive_failures"] >= 1
            assert table["failing_since"] is not None

            await asyncio.to_thread(broker.start)

            async def back() -> bool:
                return (await ready(http, daemon))[0] == 200

            await poll_until(back, timeout=90, interval=0.5)
            # What was held back went out once the broker answered again.
            await poll_until(lambda: _committed_past(daemon, row["sys_updated_on"]), timeout=60)
            await poll_until(caught_up(daemon, "incident"), timeout=30)
            table = await table_of(http, daemon, "incident")
            assert (table["consecutive_failures"], table["last_error"]) == (0, None)
    finally:
        await asyncio.to_thread(broker.stop)


def _committed_past(daemon: Daemon, timestamp: str) -> bool:
    committed = daemon.pollers["incident"].status.committed
    return committed is not None and committed.timestamp >= timestamp
