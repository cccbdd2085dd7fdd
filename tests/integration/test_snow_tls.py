"""TLS to ServiceNow end to end: the emulator serves HTTPS with certificates made by this run.

``snow.http.ca.file`` adds our CA; without it, with an unrelated CA, or with a certificate for
another host name, the client refuses the instance and says what to fix.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from pydantic import SecretStr

from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.core.errors import RetriableError
from snowsource.emulator import Emulator, serve
from snowsource.emulator.server import tls_context
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running, settings_from
from tests.polling import poll_until
from tests.tls_support import Pki, make_pki

PASSWORD = "Tls-Admin-Pw-77"
PAGE = {"sysparm_limit": "3"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def emu() -> Emulator:
    emulator = Emulator(seed=5, password=PASSWORD)
    emulator.seed(tables=("incident",), rows=10)
    return emulator


@pytest.fixture
async def https_url(emu: Emulator, pki: Pki) -> AsyncIterator[str]:
    async with serve(emu, ssl_context=tls_context(*map(str, pki.server))) as url:
        yield url


async def _page(url: str, ca_file: Path | None) -> int:
    auth = BasicAuth("admin", SecretStr(PASSWORD))
    async with ServiceNowClient(url, auth, ca_file=str(ca_file) if ca_file else None) as client:
        return len((await client.get_page("incident", PAGE)).rows)


async def test_https_with_our_ca_file_works(https_url: str, pki: Pki) -> None:
    assert https_url.startswith("https://127.0.0.1:")
    assert await _page(https_url, pki.ca) == 3


@pytest.mark.parametrize("trust", ["system store only", "unrelated CA"])
async def test_an_untrusted_certificate_is_refused_and_says_what_to_fix(
    https_url: str, pki: Pki, trust: str
) -> None:
    ca = None if trust == "system store only" else pki.other_ca
    with pytest.raises(RetriableError) as caught:
        await _page(https_url, ca)
    message = str(caught.value)
    assert "certificate verify failed" in message
    assert "snow.http.ca.file" in message


async def test_a_certificate_for_another_host_is_refused(emu: Emulator, pki: Pki) -> None:
    context = tls_context(*map(str, pki.wrong_host))
    async with serve(emu, ssl_context=context) as url:
        with pytest.raises(RetriableError) as caught:
            await _page(url, pki.ca)
    message = str(caught.value)
    assert "IP address mismatch" in message or "Hostname mismatch" in message
    assert "host name the certificate names" in message


async def test_the_daemon_streams_over_https_with_ca_file(env: Env, pki: Pki) -> None:
    env.emu.seed(tables=("incident",), rows=25)
    async with serve(env.emu, ssl_context=tls_context(*map(str, pki.server))) as url:
        document = env.document({"incident": {"name": "incident"}})
        document["snow"]["url"] = url
        document["snow"].setdefault("http", {})["ca.file"] = str(pki.ca)
        settings = settings_from(env.tmp_path, document)
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident"))
        records = await read_topic(env.bootstrap, env.topic("incident"))
        assert len(records) == 25


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_emulator_command_serves_https(pki: Pki) -> None:
    port = _free_port()
    cert, key = pki.server
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "snowsource.emulator", "--port", str(port), "--rows", "5",
        "--tables", "incident", "--password", PASSWORD, "--tls-cert", str(cert),
        "--tls-key", str(key),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        context = ssl.create_default_context(cafile=str(pki.ca))
        auth = {"Authorization": aiohttp.encode_basic_auth("admin", PASSWORD)}
        url = f"https://127.0.0.1:{port}/api/now/v2/table/incident?sysparm_limit=2"
        async with aiohttp.ClientSession() as session:
            async with asyncio.timeout(30):
                while True:
                    try:
                        async with session.get(url, ssl=context, headers=auth) as resp:
                            assert resp.status == 200
                            assert len((await resp.json())["result"]) == 2
                            break
                    except aiohttp.ClientConnectorError:
                        await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_emulator_command_wants_both_tls_options() -> None:
    from snowsource.emulator.cli import main

    assert main(["--tls-cert", "/x.pem"]) == 2
