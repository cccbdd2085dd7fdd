"""Shutdown within one deadline (SPEC §1): SIGTERM exits 0 within ``shutdown.timeout.seconds``
even when Kafka is gone or the offsets topic cannot be written, and nothing starts after it."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.conftest import Env
from tests.integration.engine import read_offsets, read_topic, write_config
from tests.integration.processes import start_run
from tests.kafka_support import LocalBroker, free_broker_port
from tests.polling import poll_until

TIMEOUT = 5  # shutdown.timeout.seconds of these tests
SLACK = 2  # what SPEC-level promise allows beyond it: process exit, interpreter teardown


def _tail(log: Path) -> str:
    return log.read_text()[-3000:]


async def _sigterm_and_time(proc: asyncio.subprocess.Process, log: Path) -> float:
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.wait_for(proc.wait(), TIMEOUT + 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError("still running 30 s after the deadline:\n" + _tail(log)) from None
    took = time.monotonic() - began
    assert code == 0, _tail(log)
    return took


def _config(env: Env, name: str, bootstrap: str) -> Path:
    doc = env.document(
        {"incident": {"name": "incident"}},
        **{
            "batch.size": 20,
            "shutdown.timeout.seconds": TIMEOUT,
            "kafka": {"bootstrap.servers": bootstrap, "startup.timeout.seconds": 60},
        },
    )
    return write_config(env.tmp_path / name, doc)


def _page_requested_after(env: Env, since: float) -> bool:
    return any(r.wall > since for r in env.emu.journal.for_table("incident"))


@pytest.mark.slow
async def test_sigterm_with_kafka_down_exits_0_within_the_shutdown_timeout(
    env: Env, tmp_path: Path
) -> None:
    broker = LocalBroker(port=free_broker_port(), data_dir=tmp_path / "kafka")
    await asyncio.to_thread(broker.start)
    try:
        env.bootstrap = broker.bootstrap
        env.emu.seed(tables=("incident",), rows=40)
        log = tmp_path / "down.log"
        proc = await start_run(_config(env, "down.yaml", broker.bootstrap), log)
        try:
            await poll_until(lambda: '"sweep"' in log.read_text(), timeout=90, interval=0.2)
            await asyncio.to_thread(broker.stop)
            # Rows that cannot reach Kafka: records in flight, offsets that cannot be written.
            stopped_at = time.monotonic()
            for i in range(30):
                env.emu.insert("incident", {"short_description": f"during outage {i}"})
            await poll_until(lambda: _page_requested_after(env, stopped_at), timeout=30)
            took = await _sigterm_and_time(proc, log)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert took <= TIMEOUT + SLACK, f"exit took {took:.1f}s:\n{log.read_text()[-3000:]}"
    finally:
        await asyncio.to_thread(broker.stop)


@pytest.mark.slow
async def test_sigterm_with_the_offsets_write_failing_exits_0_within_the_shutdown_timeout(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    env.emu.seed(tables=("incident",), rows=40)
    log = env.tmp_path / "offsets.log"
    proc = await start_run(_config(env, "offsets.yaml", env.bootstrap), log)
    try:
        await poll_until(lambda: '"sweep"' in log.read_text(), timeout=60, interval=0.2)
        assert "incident" in await read_offsets(env.bootstrap, env.offsets_topic, env.name)
        # The offsets topic disappears (auto-creation is off): every offset write now fails
        # with a retriable error, while records still reach the output topic.
        await kafka_admin.delete_topics([env.offsets_topic])
        before = len(await read_topic(env.bootstrap, env.topic("incident")))
        for i in range(5):
            env.emu.insert("incident", {"short_description": f"uncommittable {i}"})
        await poll_until(lambda: _more_records(env, before + 5), timeout=30, interval=0.2)
        took = await _sigterm_and_time(proc, log)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert took <= TIMEOUT + SLACK, f"exit took {took:.1f}s:\n{log.read_text()[-3000:]}"


async def _more_records(env: Env, at_least: int) -> bool:
    return len(await read_topic(env.bootstrap, env.topic("incident"))) >= at_least
