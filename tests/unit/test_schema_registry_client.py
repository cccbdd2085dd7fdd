"""The registry client: statuses classified once, credentials sent as configured."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from snowsource.adapters.schema_registry import RegistryClient, RegistryConnection, classify
from snowsource.core.errors import (
    RegistryAuthError,
    RegistryUnavailableError,
    SchemaNotFoundError,
    SchemaRefusedError,
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, RegistryAuthError),
        (403, RegistryAuthError),
        (409, SchemaRefusedError),
        (422, SchemaRefusedError),
        (404, SchemaNotFoundError),
        (500, RegistryUnavailableError),
        (503, RegistryUnavailableError),
        (429, RegistryUnavailableError),
    ],
)
def test_statuses_are_classified(status: int, kind: type[Exception]) -> None:
    error = classify(
        status,
        b'{"error_code": 40901, "message": "Schema being registered is incompatible"}',
        "registering",
    )
    assert type(error) is kind
    assert error.status == status
    assert "Schema being registered is incompatible (error code 40901)" in str(error)


def test_a_body_that_is_not_json_is_quoted() -> None:
    assert "<html>Bad gateway" in str(classify(502, b"<html>Bad gateway</html>", "x"))


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, list[web.Request]]]:
    seen: list[web.Request] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request)
        if "/slow/" in request.path:
            await asyncio.sleep(1)
        return web.json_response({"id": 7, "version": 3})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with TestServer(app) as server:
        yield str(server.make_url("")).rstrip("/"), seen


async def test_bearer_and_basic_credentials_are_sent(
    recorder: tuple[str, list[web.Request]],
) -> None:
    url, seen = recorder
    async with RegistryClient(RegistryConnection(url, token="t0k")) as client:
        registered = await client.register("a.b-value", '{"type":"string"}', "AVRO")
    assert (registered.id, registered.version) == (7, 3)
    assert seen[-1].headers["Authorization"] == "Bearer t0k"
    assert seen[-1].path == "/subjects/a.b-value/versions"
    assert seen[-1].headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
    async with RegistryClient(RegistryConnection(url, username="u", password="p")) as client:
        await client.lookup("s", "{}", "JSON")
    assert seen[-1].headers["Authorization"] == "Basic dTpw"
    assert seen[-1].path == "/subjects/s"


async def test_unreachable_and_slow_registries_are_retriable(
    recorder: tuple[str, list[web.Request]],
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with RegistryClient(RegistryConnection(f"http://127.0.0.1:{port}")) as client:
        with pytest.raises(RegistryUnavailableError, match="unreachable"):
            await client.register("s", "{}", "AVRO")
    url, _ = recorder
    slow = RegistryConnection(url, timeout_seconds=0.2)
    async with RegistryClient(slow) as client:
        with pytest.raises(RegistryUnavailableError):
            await client.latest("slow")  # GET /subjects/slow/versions/latest
