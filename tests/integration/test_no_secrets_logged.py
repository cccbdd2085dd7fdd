"""A running daemon never prints a password, client secret, token or Authorization header (§9).

Each test runs ``snowsource run`` as a process at DEBUG level against the emulator, makes one
table fail with an authentication error, waits until the other table finished a sweep, stops the
process with SIGTERM, and searches everything it wrote for the secrets and for the credentials
the emulator actually received (Basic header, bearer tokens).
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
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from tests.integration.conftest import Env
from tests.integration.engine import write_config
from tests.kafka_support import REPO

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


Seen = set[tuple[str, str]]  # (event, table) pairs the daemon logged so far


async def _run_until(
    env: Env, document: dict[str, Any], done: Callable[[Seen], bool]
) -> tuple[int, str]:
    """Run the daemon until ``done(seen)`` holds, SIGTERM it; its exit code and all its output."""
    config = write_config(env.tmp_path / f"run-{uuid.uuid4().hex[:6]}.yaml", document)
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "snowsource",
        "run",
        "--config",
        str(config),
        cwd=REPO,
        env=clean_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=64 * 1024 * 1024,  # DEBUG lines of aiokafka can be long
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    stderr = asyncio.create_task(proc.stderr.read())
    lines: list[bytes] = []
    seen: Seen = set()
    try:
        async with asyncio.timeout(60):
            while not done(seen):
                line = await proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict):
                        seen.add((str(event.get("event")), str(event.get("table"))))
        assert done(seen), b"".join(lines).decode("utf-8", "replace")[-3000:]
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(40):
            lines.append(await proc.stdout.read())
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    output = b"".join(lines).decode("utf-8", "replace") + (await stderr).decode("utf-8", "replace")
    return code, output


def _swept_and_failed(seen: Seen) -> bool:
    return ("sweep", "incident") in seen and ("table FAILED", "change_request") in seen


def _document(env: Env, auth: dict[str, Any]) -> dict[str, Any]:
    document = env.document(
        {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}},
        log={"format": "json", "level": "DEBUG"},
    )
    document["snow"]["auth"] = auth
    return document


def _credentials_seen(env: Env) -> list[str]:
    """Every Authorization / API key header value the emulator received."""
    values: list[str] = []
    for request in env.emu.journal:
        for name, value in request.headers.items():
            if name.lower() in ("authorization", "x-sn-apikey"):
                values.append(value)
                values.append(value.split(" ", 1)[-1])  # the token or base64 alone
    return values


async def test_basic_auth_password_never_printed(env: Env) -> None:
    password = f"Pw-{uuid.uuid4().hex}"
    env.emu.add_user("svc.secret", password, roles=("admin",), admin=True)
    env.emu.seed(tables=("incident", "change_request"), rows=30)
    # Every read of change_request is refused with 401: that table FAILs with an auth error.
    env.emu.faults.add(status=401, times=None, table="change_request")
    auth = {"type": "basic", "username": "svc.secret", "password": password}

    code, output = await _run_until(env, _document(env, auth), _swept_and_failed)

    assert code == 0
    assert "table FAILED" in output  # the auth failure was logged ...
    assert "401" in output
    assert password not in output  # ... without the password
    basic = base64.b64encode(f"svc.secret:{password}".encode()).decode()
    assert basic not in output
    assert f"Basic {basic}" in _credentials_seen(env)  # the header really was sent


async def test_wrong_password_never_printed(env: Env) -> None:
    password = f"Wrong-{uuid.uuid4().hex}"
    env.emu.add_user("svc.other", "the-right-password", roles=("admin",), admin=True)
    env.emu.seed(tables=("incident", "change_request"), rows=5)
    document = _document(env, {"type": "basic", "username": "svc.other", "password": password})

    def both_failed(seen: Seen) -> bool:
        return {("table FAILED", "incident"), ("table FAILED", "change_request")} <= seen

    code, output = await _run_until(env, document, both_failed)

    assert code == 0
    assert password not in output
    assert base64.b64encode(f"svc.other:{password}".encode()).decode() not in output


async def test_oauth_client_secret_and_tokens_never_printed(env: Env) -> None:
    secret = f"Cs-{uuid.uuid4().hex}"
    env.emu.add_oauth_client("snowsource-test", secret, user="admin")
    env.emu.seed(tables=("incident", "change_request"), rows=30)
    env.emu.faults.add(status=401, times=None, table="change_request")
    auth = {
        "type": "oauth2",
        "oauth.grant.type": "client_credentials",
        "oauth.client.id": "snowsource-test",
        "oauth.client.secret": secret,
    }

    code, output = await _run_until(env, _document(env, auth), _swept_and_failed)

    assert code == 0
    assert secret not in output
    seen = _credentials_seen(env)
    assert any(value.startswith("Bearer ") for value in seen)
    for value in seen:
        assert value not in output


async def test_oauth_password_grant_refused_never_prints_the_form(env: Env) -> None:
    """A refused password grant: neither the password nor the client secret, plain or as the
    URL-encoded form body they travelled in, appears in the output."""
    secret = f"Cs/{uuid.uuid4().hex[:8]}+="
    password = f"Pw&{uuid.uuid4().hex[:8]}=/"
    env.emu.add_oauth_client("snowsource-pw", secret)
    env.emu.add_user("svc.oauth", "the-right-password", roles=("admin",), admin=True)
    env.emu.seed(tables=("incident", "change_request"), rows=5)
    auth = {
        "type": "oauth2",
        "oauth.grant.type": "password",
        "oauth.client.id": "snowsource-pw",
        "oauth.client.secret": secret,
        "username": "svc.oauth",
        "password": password,
    }

    def both_failed(seen: Seen) -> bool:
        return {("table FAILED", "incident"), ("table FAILED", "change_request")} <= seen

    code, output = await _run_until(env, _document(env, auth), both_failed)

    assert code == 0
    assert "OAuth token endpoint refused" in output
    for value in (secret, password):
        assert value not in output
        assert quote(value, safe="") not in output
        assert quote_plus(value) not in output
