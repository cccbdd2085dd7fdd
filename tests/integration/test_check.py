"""``snowsource check`` against the emulator and the real broker: one line per check (SPEC §1)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from snowsource.cli.check import CheckResult, Status, display_offsets, exit_code, run_checks
from snowsource.config.loader import LoadedConfig, load_config
from tests.conftest import TopicFactory
from tests.integration.conftest import Env
from tests.integration.engine import write_config
from tests.kafka_support import REPO

pytestmark = pytest.mark.kafka

TABLES: dict[str, dict[str, Any]] = {
    "incident": {"name": "incident"},
    "change_request": {"name": "change_request", "query": "active=true"},
}


def _load(env: Env, document: dict[str, Any]) -> LoadedConfig:
    path = write_config(env.tmp_path / f"check-{time.monotonic_ns()}.yaml", document)
    return load_config(path, env={})


async def _check(env: Env, **top: Any) -> dict[str, CheckResult]:
    document = env.document(TABLES, **top)
    results = await run_checks(_load(env, document))
    return {result.name: result for result in results}


def _auth(username: str, password: str) -> dict[str, Any]:
    return {"type": "basic", "username": username, "password": password}


def _snow(env: Env, auth: dict[str, Any]) -> dict[str, Any]:
    return {"url": env.url, "auth": auth, "tables": env.document(TABLES)["snow"]["tables"]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def seeded(env: Env) -> Env:
    env.emu.seed(tables=("incident", "change_request"), rows=20)
    return env


async def test_everything_passes_and_nothing_is_created(
    seeded: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    results = await _check(seeded)
    names = list(results)
    assert names == [
        "config valid",
        "Kafka reachable",
        f"offsets topic {seeded.offsets_topic!r} compacted or creatable",
        "ServiceNow reachable",
        "ServiceNow credentials accepted",
        "table incident readable",
        "table incident cursor fields visible",
        "table incident sensitive columns (sensitive.fields: exclude)",
        "table change_request readable",
        "table change_request cursor fields visible",
        "table change_request sensitive columns (sensitive.fields: exclude)",
        "integration user's time zone",
        "ServiceNow sessions",
    ]
    for name, result in results.items():
        if name != "integration user's time zone":
            assert result.status is Status.PASS, result
    # The checks ran over the session pool; the emulator models an instance's sessions.
    sessions = results["ServiceNow sessions"]
    opened = seeded.emu.instance.statistics()["sessions_opened"]
    assert sessions.detail.startswith(f"{opened} session(s) opened by the instance")
    assert "concurrency limit 8 of 8" in sessions.detail
    offsets = results[f"offsets topic {seeded.offsets_topic!r} compacted or creatable"]
    assert "does not exist yet" in offsets.detail
    assert "20 row(s) match" in results["table incident readable"].detail
    sensitive = results["table incident sensitive columns (sensitive.fields: exclude)"]
    assert sensitive.detail.endswith("; none found")
    # The emulator's default user lives in America/Los_Angeles: a warning, not a failure.
    zone = results["integration user's time zone"]
    assert zone.status is Status.WARN
    assert "America/Los_Angeles" in zone.detail
    assert any("display.value" in note for note in zone.notes)
    assert exit_code(results.values()) == 0
    # A dry run only: the offsets topic still does not exist.
    described = await kafka_admin.describe_topics([seeded.offsets_topic])
    assert described[0]["error_code"] != 0


async def test_utc_user_passes_the_time_zone_check(seeded: Env) -> None:
    seeded.emu.add_user("svc.utc", "utc-pass", tz="UTC", roles=("admin",), admin=True)
    results = await _check(seeded, snow=_snow(seeded, _auth("svc.utc", "utc-pass")))
    zone = results["integration user's time zone"]
    assert zone.status is Status.PASS
    assert zone.detail.startswith("UTC")


async def test_oauth_client_credentials_reads_the_zone_from_display_values(seeded: Env) -> None:
    seeded.emu.add_oauth_client("check-client", "check-client-secret", user="admin")
    auth = {
        "type": "oauth2",
        "oauth.grant.type": "client_credentials",
        "oauth.client.id": "check-client",
        "oauth.client.secret": "check-client-secret",
    }
    results = await _check(seeded, snow=_snow(seeded, auth))
    assert results["ServiceNow credentials accepted"].status is Status.PASS
    zone = results["integration user's time zone"]
    assert zone.status is Status.WARN
    # America/Los_Angeles is UTC-08:00 or UTC-07:00 depending on the sample row's date.
    assert "UTC-0" in zone.detail
    assert "from display values" in zone.detail


async def test_wrong_password_fails_credentials_and_skips_the_tables(seeded: Env) -> None:
    results = await _check(seeded, snow=_snow(seeded, _auth("admin", "not-the-password")))
    credentials = results["ServiceNow credentials accepted"]
    assert credentials.status is Status.FAIL
    assert "401" in credentials.detail
    assert "not-the-password" not in credentials.detail
    assert results["table incident readable"].status is Status.SKIP
    assert results["Kafka reachable"].status is Status.PASS
    assert exit_code(results.values()) == 1


async def test_unreadable_table_fails_only_that_table(seeded: Env) -> None:
    seeded.emu.deny_table("admin", "change_request")
    results = await _check(seeded)
    denied = results["table change_request readable"]
    assert denied.status is Status.FAIL
    assert "403" in denied.detail
    assert results["table change_request cursor fields visible"].status is Status.SKIP
    assert results["table incident readable"].status is Status.PASS
    assert results["table incident cursor fields visible"].status is Status.PASS
    assert exit_code(results.values()) == 1


async def test_hidden_cursor_field_fails_the_cursor_check(seeded: Env) -> None:
    seeded.emu.hide_field("incident", "sys_updated_on")
    results = await _check(seeded)
    assert results["table incident readable"].status is Status.PASS
    cursor = results["table incident cursor fields visible"]
    assert cursor.status is Status.FAIL
    assert "'sys_updated_on'" in cursor.detail
    assert "field ACL" in cursor.detail
    assert results["table change_request cursor fields visible"].status is Status.PASS
    assert exit_code(results.values()) == 1


async def test_unreachable_kafka_fails_fast(seeded: Env) -> None:
    port = _free_port()  # closed again: nothing listens there
    document = seeded.document(TABLES)
    document["kafka"] = {"bootstrap.servers": f"127.0.0.1:{port}", "startup.timeout.seconds": 2}
    started = time.monotonic()
    results = {r.name: r for r in await run_checks(_load(seeded, document))}
    assert time.monotonic() - started < 8
    kafka = results["Kafka reachable"]
    assert kafka.status is Status.FAIL
    assert f"127.0.0.1:{port}" in kafka.detail
    assert "within 2 s" in kafka.detail
    offsets = results[f"offsets topic {seeded.offsets_topic!r} compacted or creatable"]
    assert offsets.status is Status.SKIP
    assert results["ServiceNow credentials accepted"].status is Status.PASS
    assert exit_code(results.values()) == 1


async def test_offsets_topic_that_is_not_compacted_fails(
    seeded: Env, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("offs", configs={"cleanup.policy": "delete"})
    results = await _check(seeded, **{"offset.storage.topic": topic})
    offsets = results[f"offsets topic {topic!r} compacted or creatable"]
    assert offsets.status is Status.FAIL
    assert "cleanup.policy='delete'" in offsets.detail
    assert exit_code(results.values()) == 1


def test_display_offsets_reads_user_formats() -> None:
    value = "2026-01-15 20:30:00"
    assert display_offsets("01/15/2026 12:30:00 PM", value) == {timedelta(hours=-8)}
    assert display_offsets("2026-01-15 20:30:00", value) == {timedelta(0)}
    assert display_offsets("15.01.2026 21:30:00", value) == {timedelta(hours=1)}
    assert display_offsets("not a date", value) == set()


# ---------------------------------------------------------------------------- the command


async def _cli(config: Path) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "snowsource",
        "check",
        "--config",
        str(config),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_command_exits_0_with_one_line_per_check(seeded: Env) -> None:
    config = write_config(seeded.tmp_path / "ok.yaml", seeded.document(TABLES))
    code, out, _err = await _cli(config)
    assert code == 0, out
    lines = [line for line in out.splitlines() if line[:4] in ("PASS", "WARN", "FAIL", "SKIP")]
    assert len(lines) == 13
    assert lines[0].startswith("PASS  config valid")
    assert lines[-2].startswith("WARN  integration user's time zone")
    assert lines[-1].startswith("PASS  ServiceNow sessions")


async def test_command_exits_1_when_a_check_fails(seeded: Env) -> None:
    document = seeded.document(TABLES, snow=_snow(seeded, _auth("admin", "wrong-secret-123")))
    config = write_config(seeded.tmp_path / "bad-password.yaml", document)
    code, out, err = await _cli(config)
    assert code == 1
    assert "FAIL  ServiceNow credentials accepted" in out
    assert "wrong-secret-123" not in out + err


async def test_invalid_config_exits_2_and_contacts_nothing(seeded: Env) -> None:
    contacted: list[str] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        contacted.append("kafka")
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        document = seeded.document(TABLES, **{"batch.size": 0})
        document["kafka"] = {"bootstrap.servers": f"127.0.0.1:{port}"}
        config = write_config(seeded.tmp_path / "invalid.yaml", document)
        code, out, _err = await _cli(config)
    assert code == 2
    assert out.startswith("FAIL  config valid")
    assert "batch.size" in out
    assert contacted == []
    assert len(seeded.emu.journal) == 0
