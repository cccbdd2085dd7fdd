"""After kill -9 the restarted process polls at once: nothing waits for the dead member's group
session to expire (a live duplicate is still fenced, later: see test_cli_run)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.conftest import Env
from tests.integration.engine import read_offsets, write_config
from tests.integration.processes import SNOWSOURCE
from tests.polling import poll_until

# The promise is 2 s; the bound leaves room for a loaded test machine and still fails on the
# old behaviour (the first request came once the dead member's 10 s session had expired).
FIRST_REQUEST_WITHIN_SECONDS = 4.0


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


def _events(log: Path, event: str) -> list[dict[str, object]]:
    found = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == event:
                found.append(entry)
    return found


def _monotonic_of(iso: str) -> float:
    """A log line's wall-clock time on this machine's monotonic clock (the emulator's journal
    records requests on it)."""
    wall = datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    return wall - time.time() + time.monotonic()


@pytest.mark.slow
async def test_restart_after_kill_9_sends_its_first_request_within_2_s_of_loading_offsets(
    env: Env,
) -> None:
    env.emu.seed(tables=("incident",), rows=50)
    config = write_config(
        env.tmp_path / "restart.yaml", env.document({"incident": {"name": "incident"}})
    )
    first_log, second_log = env.tmp_path / "first.log", env.tmp_path / "second.log"
    proc = await _start(config, first_log)
    try:
        await poll_until(lambda: _stream_committed(env), timeout=60, interval=0.2)
        # The dead process must still be a member when the new one starts.
        await poll_until(lambda: bool(_events(first_log, "consumer group joined")), timeout=30)
    finally:
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL

    env.emu.journal.clear()
    proc = await _start(config, second_log)
    try:
        await poll_until(lambda: bool(env.emu.journal.for_table("incident")), timeout=60)
        await poll_until(lambda: bool(_events(second_log, "offsets loaded")), timeout=10)
        loaded = _monotonic_of(str(_events(second_log, "offsets loaded")[0]["timestamp"]))
        first_request = env.emu.journal.for_table("incident")[0].wall
        waited = first_request - loaded
        assert waited < FIRST_REQUEST_WITHIN_SECONDS, (
            f"first page request {waited:.1f}s after the offsets were loaded"
        )
        # The join itself still completes: the process is a member (and could fence) later.
        await poll_until(lambda: bool(_events(second_log, "consumer group joined")), timeout=30)
        joined = _monotonic_of(str(_events(second_log, "consumer group joined")[0]["timestamp"]))
        assert joined > first_request, "the join was expected to finish after polling began"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0, second_log.read_text()[-3000:]


async def _stream_committed(env: Env) -> bool:
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    return "incident" in offsets and offsets["incident"]["phase"] == "stream"


@pytest.mark.slow
async def test_a_live_duplicate_process_is_still_fenced_once_its_join_completes(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=20)
    config = write_config(
        env.tmp_path / "duplicate.yaml", env.document({"incident": {"name": "incident"}})
    )
    older_log, newer_log = env.tmp_path / "older.log", env.tmp_path / "newer.log"
    older = await _start(config, older_log)
    newer: asyncio.subprocess.Process | None = None
    try:
        await poll_until(lambda: bool(_events(older_log, "consumer group joined")), timeout=60)
        newer = await _start(config, newer_log)
        # The older process sees a younger member with its task.id and exits 1.
        assert await asyncio.wait_for(older.wait(), timeout=60) == 1, older_log.read_text()[-3000:]
        fenced = _events(older_log, "fenced by a newer process with the same task.id")
        assert fenced, older_log.read_text()[-3000:]
        assert newer.returncode is None, "the newer process must keep running"
    finally:
        if older.returncode is None:
            older.send_signal(signal.SIGKILL)
            await older.wait()
        if newer is not None and newer.returncode is None:
            newer.send_signal(signal.SIGTERM)
            assert await newer.wait() == 0, newer_log.read_text()[-3000:]
