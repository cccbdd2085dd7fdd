"""`snowsource run` exit codes (SPEC §1) and fencing of a duplicate task.id (SPEC §10)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess

import pytest

from snowsource.core.errors import FencedError
from snowsource.engine.supervisor import Daemon
from tests.conftest import TopicFactory
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, write_config
from tests.integration.processes import SNOWSOURCE
from tests.polling import poll_until


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SNOWSOURCE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")},
        check=False,
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_invalid_config_exits_2_naming_the_key_before_contacting_anything(
    env: Env,
) -> None:
    doc = env.document({"incident": {"name": "incident", "start.timestamp": "2026-13-01"}})
    config = write_config(env.tmp_path / "bad.yaml", doc)
    env.emu.journal.clear()
    result = await asyncio.to_thread(_run, "run", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert "snow.tables.incident.start.timestamp" in result.stderr
    assert len(env.emu.journal) == 0


async def test_unknown_key_is_rejected_with_exit_2(env: Env) -> None:
    doc = env.document({"incident": {"name": "incident"}})
    doc["batch.sise"] = 10
    config = write_config(env.tmp_path / "typo.yaml", doc)
    result = await asyncio.to_thread(_run, "run", "--config", str(config))
    assert result.returncode == 2
    assert "batch.sise" in result.stderr


async def test_missing_config_file_exits_2(env: Env) -> None:
    result = await asyncio.to_thread(_run, "run", "--config", str(env.tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr


async def test_kafka_unreachable_exits_1_after_startup_timeout(env: Env) -> None:
    doc = env.document(
        {"incident": {"name": "incident"}},
        kafka={"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "startup.timeout.seconds": 2},
    )
    config = write_config(env.tmp_path / "nokafka.yaml", doc)
    result = await asyncio.to_thread(_run, "run", "--config", str(config))
    assert result.returncode == 1, result.stdout[-2000:]
    assert "could not be reached" in result.stdout


async def test_duplicate_task_id_fences_the_older_process(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=50)
    settings = env.settings({"incident": {"name": "incident"}})
    older, newer = Daemon(settings), Daemon(settings)
    older_stop, newer_stop = asyncio.Event(), asyncio.Event()
    older_task = asyncio.create_task(older.run(older_stop))
    await poll_until(caught_up(older, "incident"))
    newer_task = asyncio.create_task(newer.run(newer_stop))
    try:
        # The newer member's join makes the older one see a younger duplicate and stop.
        with pytest.raises(FencedError, match=r"task\.id 0"):
            await asyncio.wait_for(older_task, timeout=60)
        assert older.fenced_by is not None
        assert "task 0" in older.fenced_by
        await poll_until(caught_up(newer, "incident"), timeout=30)
        assert newer.fenced_by is None
    finally:
        newer_stop.set()
        older_stop.set()
        assert await newer_task == 0


async def test_offsets_topic_not_compacted_is_refused_with_exit_1(
    env: Env, topic_factory: TopicFactory
) -> None:
    offsets = await topic_factory("offsets", configs={"cleanup.policy": "compact,delete"})
    doc = env.document({"incident": {"name": "incident"}}, **{"offset.storage.topic": offsets})
    config = write_config(env.tmp_path / "policy.yaml", doc)
    env.emu.journal.clear()
    result = await asyncio.to_thread(_run, "run", "--config", str(config))
    assert result.returncode == 1, result.stdout[-2000:]
    assert "cleanup.policy" in result.stdout
    assert "must be exactly 'compact'" in result.stdout
    # Refused before any table started reading.
    assert not [r for r in env.emu.journal if r.table == "incident"]


async def test_sigterm_while_kafka_is_unreachable_at_start_exits_0(env: Env) -> None:
    doc = env.document(
        {"incident": {"name": "incident"}},
        kafka={"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "startup.timeout.seconds": 60},
    )
    config = write_config(env.tmp_path / "waiting.yaml", doc)
    log = env.tmp_path / "waiting.log"
    env_vars = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")},
        "SNOWSOURCE_BOGUS__KEY": "1",  # matches no key: one WARN
        "SNOWSOURCE_TEST_ANYTHING": "1",  # reserved: silent
    }
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            SNOWSOURCE, "run", "--config", str(config), stdout=out, stderr=out, env=env_vars
        )
    try:
        await poll_until(lambda: "kafka not reachable yet" in log.read_text(), timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), timeout=20)
    assert code == 0, log.read_text()[-2000:]
    text = log.read_text()
    assert "shutdown requested before Kafka was reachable" in text
    assert text.count("SNOWSOURCE_BOGUS__KEY") == 1
    assert "SNOWSOURCE_TEST_ANYTHING" not in text
