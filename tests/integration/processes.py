"""Spawning ``snowsource`` as a real process, the way an operator runs it.

Every test that needs a process of its own (kill -9, SIGTERM timing, several group members)
starts it here: output appended to a log file the test reads on failure, unbuffered, with the
caller's environment. ``slow_handover_ms`` runs the same command through
``tests/integration/slow_handover.py``, whose pages reach Kafka that much later.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.kafka_support import REPO

SNOWSOURCE = str(REPO / ".venv" / "bin" / "snowsource")


async def start_snowsource(
    *args: str,
    log: Path,
    env: Mapping[str, str] | None = None,
    slow_handover_ms: int | None = None,
) -> asyncio.subprocess.Process:
    """``snowsource ARGS...`` (e.g. ``"run", "--config", path``) with its output in ``log``.

    ``env`` replaces the environment (default: this process's).
    """
    command = [SNOWSOURCE, *args]
    if slow_handover_ms is not None:
        command = [sys.executable, "-m", "tests.integration.slow_handover", str(slow_handover_ms)]
        command += args
    environment = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *command,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=environment,
            cwd=REPO,
        )


async def start_run(
    config: Path,
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    slow_handover_ms: int | None = None,
) -> asyncio.subprocess.Process:
    """``snowsource run --config CONFIG``, its output appended to ``log``."""
    return await start_snowsource(
        "run", "--config", str(config), log=log, env=env, slow_handover_ms=slow_handover_ms
    )
