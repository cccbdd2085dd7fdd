"""``snowsource emulator`` as a real process, and the argument handling."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time

import aiohttp

from snowsource.emulator.cli import build, main, parse_args
from tests.emulator.conftest import AUTH


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _wait_for_page(url: str, timeout: float = 20.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url, headers=AUTH) as resp:
                    assert resp.status == 200
                    body: dict[str, object] = await resp.json()
                    return body
            except aiohttp.ClientConnectionError:
                assert time.monotonic() < deadline, "emulator did not start"
                await asyncio.sleep(0.1)


async def test_cli_serves_and_stops_cleanly_on_sigterm() -> None:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "snowsource.emulator",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--tables",
        "incident,change_request",
        "--rows",
        "30",
        "--activity",
        "5",
        "--seed",
        "3",
        "--latency-ms",
        "1",
        "--user",
        "admin",
        "--password",
        "admin",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}/api/now/table"
        body = await _wait_for_page(f"{base}/incident?sysparm_limit=5")
        result = body["result"]
        assert isinstance(result, list)
        assert len(result) == 5
        async with aiohttp.ClientSession() as session, session.get(f"{base}/incident") as resp:
            assert resp.status == 401
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr.decode()
    lines = [line for line in stdout.decode().splitlines() if "listening" in line]
    assert len(lines) == 1
    assert f"127.0.0.1:{port}" in lines[0]


def test_arguments_build_the_emulator() -> None:
    args = parse_args(
        ["--user", "", "--tables", "incident,task_sla", "--rows", "5", "--latency-ms", "7"]
    )
    emu = build(args)
    assert not emu.auth_enabled
    assert emu.latency_ms == 7
    assert emu.clock.following
    assert len(emu.rows("incident")) == 5
    assert "incident_sla" in emu.views
    assert parse_args([]).port == 8080


def test_bad_arguments_exit_2() -> None:
    assert main(["--tables", "u_nope"]) == 2
    assert main(["--user-tz", "Mars/Olympus"]) == 2
    assert main(["--port", "not-a-number"]) == 2
