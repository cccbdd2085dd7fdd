"""Group members started at the same moment on a fresh connector all run (SPEC §15.4, §13.1).

The normal first start of a Deployment with three replicas: three ``snowsource run`` processes
of one new connector, spawned within 50 ms of each other, race to create the offsets topic and
produce their first records. None may take another member's first records for lost offsets
(the §13.1 refusal, which ``test_offsets_topic_missing.py`` keeps for a really deleted topic).
One member looks at the output topics only once another member's records are there
(``late_replay_look.py``), the widest form of the race; the others start as they are. Repeated
on fresh connector names and topics, since who looks at the offsets topic first varies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import Env
from tests.integration.engine import latest_by_key, read_topic, write_config
from tests.integration.processes import start_run
from tests.kafka_support import REPO, unique
from tests.polling import poll_until

ROUNDS = 8
ALIASES = ("ends1", "ends2", "ends3")
MEMBERS = 3

# Each round is a few seconds of process start and a group join; eight of them need more than
# the default per-test limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _config(env: Env, member: int, *, exactly_once: bool) -> Path:
    document = env.document(
        {alias: {"name": "incident", "query": f"numberENDSWITH{alias[-1]}"} for alias in ALIASES},
        **{
            "tasks.assignment": "group",
            "group.session.timeout.ms": 6000,
            "exactly.once": exactly_once,
        },
    )
    return write_config(env.tmp_path / f"{env.name}-{member}.yaml", document)


async def _start_late_look(config: Path, log: Path) -> asyncio.subprocess.Process:
    """A member that looks at the output topics only once another member produced to them."""
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.late_replay_look",
            "run",
            "--config",
            str(config),
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            cwd=REPO,
        )


async def _all_rows_arrived(env: Env) -> bool:
    rows = env.emu.rows("incident")
    for alias in ALIASES:
        expected = {r["sys_id"] for r in rows if r["number"].endswith(alias[-1])}
        assert expected, f"no incident ends with {alias[-1]}: seed more rows"
        found = latest_by_key(await read_topic(env.bootstrap, env.topic(alias)))
        if not expected <= set(found):
            return False
    return True


async def _one_round(env: Env, *, exactly_once: bool) -> None:
    configs = [_config(env, i, exactly_once=exactly_once) for i in range(MEMBERS)]
    logs = [env.tmp_path / f"{env.name}-{i}.log" for i in range(MEMBERS)]
    spawned: list[float] = []

    async def spawn(i: int) -> asyncio.subprocess.Process:
        if i == 0:
            proc = await _start_late_look(configs[i], logs[i])
        else:
            proc = await start_run(configs[i], logs[i])
        spawned.append(time.monotonic())
        return proc

    procs = await asyncio.gather(*(spawn(i) for i in range(MEMBERS)))
    try:
        assert max(spawned) - min(spawned) < 0.05, (
            f"spawned {max(spawned) - min(spawned):.3f}s apart"
        )

        def exited() -> list[str]:
            return [
                f"member {i} exited {p.returncode}:\n{logs[i].read_text()[-3000:]}"
                for i, p in enumerate(procs)
                if p.returncode is not None
            ]

        def all_joined() -> bool:
            # Logged once a member owns its share of the group (which may be no table).
            return all('"event": "group member"' in log.read_text() for log in logs)

        async def arrived_or_exited() -> bool:
            return bool(exited()) or (all_joined() and await _all_rows_arrived(env))

        await poll_until(arrived_or_exited, timeout=90, interval=0.5)
        assert not exited(), exited()[0]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), timeout=90)
    assert codes == [0] * MEMBERS, [logs[i].read_text()[-2000:] for i in range(MEMBERS)]


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
async def test_members_started_together_on_a_fresh_connector_all_run(
    env: Env, exactly_once: bool
) -> None:
    env.emu.seed(tables=("incident",), rows=60)
    for _ in range(ROUNDS):
        name = unique("together")
        fresh = dataclasses.replace(env, name=name, offsets_topic=f"{name}-offsets")
        await _one_round(fresh, exactly_once=exactly_once)
