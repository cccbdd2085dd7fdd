"""The command line as an operator meets it: `--log-level`, `offsets ... | head`, hints that
keep the `--config` the user typed."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path

import orjson
import pytest

from snowsource.cli.offsets import amain
from snowsource.core.offsets_codec import SourceOffset, encode_key, encode_value, partition_for
from tests.integration.conftest import Env
from tests.integration.engine import write_config
from tests.integration.processes import SNOWSOURCE
from tests.integration.test_offsets_cli import configure, seed


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _levels(stdout: str) -> set[str]:
    levels = set()
    for line in stdout.splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            levels.add(str(event.get("level")))
    return levels


async def test_log_level_flag_overrides_the_configuration(env: Env) -> None:
    # Kafka unreachable with a 1 s start-up budget: the run logs at start, then fails fast.
    def config(level: str) -> Path:
        doc = env.document(
            {"incident": {"name": "incident"}},
            kafka={
                "bootstrap.servers": f"127.0.0.1:{_closed_port()}",
                "startup.timeout.seconds": 1,
            },
            log={"format": "json", "level": level},
        )
        return write_config(env.tmp_path / f"{level}.yaml", doc)

    def run(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [SNOWSOURCE, "run", "--config", str(path), *flags],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
            check=False,
        )

    quiet = await asyncio.to_thread(run, config("ERROR"))
    assert quiet.returncode == 1
    assert "info" not in _levels(quiet.stdout)

    loud = await asyncio.to_thread(run, config("ERROR"), "--log-level", "info")
    assert loud.returncode == 1
    assert "info" in _levels(loud.stdout)

    silenced = await asyncio.to_thread(run, config("INFO"), "--log-level", "ERROR")
    assert silenced.returncode == 1
    assert _levels(silenced.stdout) == {"error"}


async def test_offsets_list_into_a_closed_pipe_exits_quietly(env: Env) -> None:
    settings, config = configure(env)
    p = partition_for(
        snow_url=env.url,
        table="incident",
        query=None,
        query_domain=True,
        timestamp_field="sys_updated_on",
    )
    value = encode_value(SourceOffset("2026-09-29 06:30:00", "a1", "stream", p.query_fingerprint))
    await seed(settings, [(encode_key(env.name, p), value)])

    # The reader is gone before the first byte is written: what `| head` does, deterministically.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = await asyncio.create_subprocess_exec(
            SNOWSOURCE,
            "offsets",
            "list",
            "--json",
            "--config",
            str(config),
            stdout=write_end,
            stderr=asyncio.subprocess.PIPE,
            env=_env(),
        )
    finally:
        os.close(write_end)
    _, err = await proc.communicate()
    assert err.decode() == ""
    assert proc.returncode == 1


async def test_reset_hint_keeps_the_config_option(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, config = configure(env)
    await seed(settings, [])
    code = await amain(["reset", "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"`snowsource offsets reset --yes --config {config}`" in err
