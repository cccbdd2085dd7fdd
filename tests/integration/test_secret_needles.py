"""Secret needles searched in every output of a running daemon, with an instance that echoes
credentials back in its error texts.

``snowsource run`` at DEBUG (every library logging) with basic auth and a REST bearer token;
the emulator answers one table with a 401 and another with 503s whose messages quote the
``Authorization`` header, the password and a URL-encoded password. Searched: everything the
process printed, REST ``/status`` (``trace``, ``last_error``), ``/metrics``, GET offsets, the
offsets topic and the output topic (values and headers), and ``snowsource check``'s output.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
import uuid
from typing import Any
from urllib.parse import quote, quote_plus

import aiohttp
import pytest

from tests.integration.conftest import Env
from tests.integration.engine import read_topic, write_config
from tests.kafka_support import REPO

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

USER = "svc.needle"
PASSWORD = f"Pw/{uuid.uuid4().hex[:10]}+&=x"
TOKEN = f"rest-{uuid.uuid4().hex}"


def _needles() -> list[str]:
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    return [PASSWORD, quote(PASSWORD, safe=""), quote_plus(PASSWORD), basic, TOKEN]


def _leaks(text: str) -> list[str]:
    return [needle for needle in _needles() if needle in text]


def _echo(env: Env) -> None:
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    echoed = (
        f"request was Authorization: Basic {basic} from user {USER} "
        f"(password={quote(PASSWORD, safe='')}; raw {PASSWORD})"
    )
    env.emu.faults.add(status=401, times=None, table="change_request", message=echoed)
    env.emu.faults.add(status=503, times=None, table="cmdb_ci", message=echoed)


def _config(env: Env) -> Any:
    document = env.document(
        {
            "incident": {"name": "incident"},
            "change_request": {"name": "change_request"},
            "cmdb_ci": {"name": "cmdb_ci"},
        },
        log={"format": "json", "level": "DEBUG"},
        rest={"enabled": True, "port": 0, "auth.token": TOKEN},
    )
    document["snow"]["auth"] = {"type": "basic", "username": USER, "password": PASSWORD}
    return write_config(env.tmp_path / f"needles-{uuid.uuid4().hex[:6]}.yaml", document)


async def _rest_bodies(url: str, name: str) -> str:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    out: list[str] = []
    async with aiohttp.ClientSession(headers=headers) as http:
        for path in (f"/connectors/{name}/status", "/metrics", f"/connectors/{name}/offsets"):
            async with http.get(url + path) as resp:
                assert resp.status == 200, path
                out.append(await resp.text())
    return "\n".join(out)


async def test_no_output_of_a_running_daemon_carries_a_secret(env: Env) -> None:
    env.emu.add_user(USER, PASSWORD, roles=("admin",), admin=True)
    env.emu.seed(tables=("incident", "change_request", "cmdb_ci"), rows=20)
    _echo(env)
    config = _config(env)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "snowsource", "run", "--config", str(config),
        cwd=REPO, env=clean, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        limit=64 * 1024 * 1024,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stderr is not None
    stderr = asyncio.create_task(proc.stderr.read())
    lines: list[bytes] = []
    rest_url: str | None = None
    seen: set[tuple[str, str]] = set()
    wanted = {
        ("sweep", "incident"),
        ("table FAILED", "change_request"),
        ("ServiceNow request failed; retrying", "cmdb_ci"),
    }
    try:
        async with asyncio.timeout(60):
            while not (wanted <= seen and rest_url):
                line = await proc.stdout.readline()
                assert line, b"".join(lines).decode("utf-8", "replace")[-3000:]
                lines.append(line)
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    seen.add((str(event.get("event")), str(event.get("table"))))
                    if event.get("event") == "REST API listening":
                        rest_url = str(event["url"])
        assert rest_url is not None
        rest_text = await _rest_bodies(rest_url, env.name)
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(40):
            lines.append(await proc.stdout.read())
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    output = b"".join(lines).decode("utf-8", "replace") + (await stderr).decode()

    assert "request was Authorization: Basic ***" in output  # the echo is logged, redacted
    assert _leaks(output) == []
    for text_line in output.splitlines():
        assert isinstance(json.loads(text_line), dict), text_line[:200]
    status = json.loads(rest_text.split("\n", 1)[0])
    assert "request was Authorization: Basic ***" in str(status)  # echoed, then redacted
    assert _leaks(rest_text) == []
    stored = await read_topic(env.bootstrap, env.offsets_topic)
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert records
    kafka_text = repr(stored) + repr(records)
    assert _leaks(kafka_text) == []

    check = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "snowsource", "check", "--config", str(config),
        cwd=REPO, env=clean, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(60):
        check_out, _ = await check.communicate()
    text = check_out.decode()
    assert "FAIL" in text  # change_request is refused with the echoing 401
    assert _leaks(text) == []
