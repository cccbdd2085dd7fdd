"""The batch produce path keeps the commit rule through kill -9 (SPEC §6).

A page goes to Kafka as one batch per partition and its offset is written once, after the page's
acknowledged prefix is known. Killing the daemon while a page's batches are in flight must leave
no committed offset past a row that did not reach Kafka; a restart then delivers every row.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from snowsource.core.cursor import Position
from snowsource.emulator.journal import Request
from tests.integration.conftest import Env
from tests.integration.engine import poll_until, read_offsets, read_topic, write_config
from tests.integration.test_engine_restart import SNOWSOURCE

BATCH = 500
PAGES_BEFORE_KILL = 3


@pytest.mark.slow
async def test_kill_9_with_page_batches_handed_over_commits_nothing_past_an_unacked_row(
    env: Env,
) -> None:
    kill_at_request = PAGES_BEFORE_KILL + 1
    env.emu.seed(tables=("incident",), rows=BATCH * 6)
    rows = sorted(env.emu.rows("incident"), key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    config = write_config(
        env.tmp_path / "kill9-page.yaml",
        env.document(
            {"incident": {"name": "incident"}},
            **{"batch.size": BATCH, "topic.creation.partitions": 3},
        ),
    )
    log = env.tmp_path / "kill9-page.log"
    killed = asyncio.Event()
    pages: list[Request] = []
    process: asyncio.subprocess.Process | None = None

    def kill_on_page_request(entry: Request) -> None:
        # The poller asks for page N+1 only once page N is handed to the producer (the
        # prefetch runs while that page's batches are acknowledged), so killing as that request
        # arrives lands with page N's batches queued or in flight and their offset unwritten.
        if entry.table != "incident" or "sysparm_limit" not in entry.params or killed.is_set():
            return
        pages.append(entry)
        if len(pages) == kill_at_request and process is not None:
            os.kill(process.pid, signal.SIGKILL)
            killed.set()

    env.emu.on_request(kill_on_page_request)
    process = await _start(config, log)
    try:
        await asyncio.wait_for(killed.wait(), 60)
    finally:
        if not killed.is_set():
            process.kill()
    assert await process.wait() == -signal.SIGKILL, log.read_text()[-3000:]

    records = await read_topic(env.bootstrap, env.topic("incident"))
    in_kafka = {r.key.decode() for r in records if r.key}
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    handed_over = rows[: (kill_at_request - 1) * BATCH]
    if "incident" in offsets:
        committed = Position(offsets["incident"]["timestamp"], offsets["incident"]["sys_id"])
        covered = [r for r in rows if Position(r["sys_updated_on"], r["sys_id"]) <= committed]
        # The offset never points past what was handed over, and every row up to it is in
        # Kafka: a restart from it loses nothing.
        assert len(covered) <= len(handed_over)
        assert covered == rows[: len(covered)]
        missing = [r["sys_id"] for r in covered if r["sys_id"] not in in_kafka]
        assert missing == [], f"committed past {len(missing)} unacknowledged row(s)"
        # One offset per page: a commit lands on a page boundary.
        assert len(covered) % BATCH == 0

    process = await _start(config, log)
    try:
        await poll_until(lambda: _committed_stream(env), timeout=120, interval=0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0, log.read_text()[-3000:]
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert {r.key.decode() for r in records if r.key} == {r["sys_id"] for r in rows}


async def _start(config: Path, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            SNOWSOURCE,
            "run",
            "--config",
            str(config),
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


async def _committed_stream(env: Env) -> bool:
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    return "incident" in offsets and offsets["incident"]["phase"] == "stream"
