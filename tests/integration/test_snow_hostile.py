"""``ServiceNowClient`` against a hostile or broken server: bounded memory, precise errors, and
nothing a server echoes back (credentials, token forms) survives into an error message.

The server is a route table in this file (aiohttp ``TestServer``): each route misbehaves in one
way the emulator has no reason to.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from pydantic import SecretStr

from snowsource.adapters.servicenow import (
    DEFAULT_MAX_RESPONSE_BYTES,
    Auth,
    BasicAuth,
    OAuth2Auth,
    ServiceNowClient,
)
from snowsource.core.errors import (
    AuthError,
    ExecutionTimeExceededError,
    ResponseTooLargeError,
    RetriableError,
    ServiceNowError,
)

PASSWORD = "Hostile-Pw-4242-xyzzy"
CLIENT_SECRET = "Hostile-Cs-9191-plugh"
BASIC = BasicAuth("svc.user", SecretStr(PASSWORD))
PAGE = {"sysparm_limit": "5"}
LIMIT = 256 * 1024
ROW = {"sys_id": "0" * 32, "sys_updated_on": "2026-01-01 00:00:00", "text": "x" * 100}

Factory = Callable[..., Awaitable[ServiceNowClient]]
served_bytes: dict[str, int] = {}


def _page(rows: int) -> bytes:
    return orjson.dumps({"result": [ROW] * rows})


async def _endless(request: web.Request) -> web.StreamResponse:
    """A 200 (or the status asked for) whose body never ends; counts what it managed to send."""
    status = int(request.query.get("status", "200"))
    response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
    await response.prepare(request)
    route = request.match_info["name"]
    served_bytes[route] = 0
    chunk = b'{"result":[' + b" " * 65536
    try:
        while True:
            await response.write(chunk)
            served_bytes[route] += len(chunk)
            chunk = b" " * 65536
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response


async def _trickle(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    await response.write(b'{"result":[')
    while True:  # one byte a second, for ever
        await asyncio.sleep(1)
        await response.write(b" ")


async def _table(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name == "exact":
        return web.Response(body=_page(1), content_type="application/json")
    if name == "big":  # announced: Content-Length over the limit
        return web.Response(body=_page(3000), content_type="application/json")
    if name in ("endless", "endless_error"):
        return await _endless(request)
    if name == "trickle":
        return await _trickle(request)
    if name == "not_a_list":
        return web.json_response({"result": {"sys_id": "0" * 32}})
    if name == "rows_not_records":
        return web.json_response({"result": [1, "two"]})
    if name == "deep":
        return web.Response(body=b"[" * 100_000 + b"]" * 100_000, content_type="application/json")
    if name == "echo_auth":  # a 401 page that quotes the request back, as some proxies do
        echoed = {
            "error": {
                "message": f"User Not Authenticated: {request.headers.get('Authorization')}",
                "detail": f"query {request.query_string} raw {dict(request.headers)}",
            }
        }
        return web.json_response(echoed, status=401)
    if name == "echo_500":
        header = request.headers.get("Authorization", "")
        return web.json_response({"error": {"message": f"boom, got {header}"}}, status=503)
    raise web.HTTPNotFound


async def _token(request: web.Request) -> web.Response:
    form = await request.post()
    echoed = "&".join(f"{k}={v}" for k, v in form.items() if isinstance(v, str))
    body = {"error": "invalid_client", "error_description": f"bad request: {echoed}"}
    return web.json_response(body, status=401)


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app.router.add_get("/api/now/v2/table/{name}", _table)
    app.router.add_post("/oauth_token.do", _token)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    try:
        yield test_server
    finally:
        await test_server.close()


@pytest.fixture
async def make_client(server: TestServer) -> AsyncIterator[Factory]:
    async with AsyncExitStack() as stack:

        async def make(auth: Auth = BASIC, **kwargs: Any) -> ServiceNowClient:
            kwargs.setdefault("max_response_bytes", LIMIT)
            base = str(server.make_url("")).rstrip("/")
            client = ServiceNowClient(base, auth, **kwargs)
            return await stack.enter_async_context(client)

        yield make


def test_default_limit_is_64_mib() -> None:
    assert DEFAULT_MAX_RESPONSE_BYTES == 67108864


async def test_body_within_the_limit_is_read(make_client: Factory) -> None:
    client = await make_client()
    assert len((await client.get_page("exact", PAGE)).rows) == 1


@pytest.mark.parametrize("table", ["big", "endless"])
async def test_body_over_the_limit_halves_the_page_and_says_lower_batch_size(
    make_client: Factory, table: str
) -> None:
    client = await make_client()
    with pytest.raises(ResponseTooLargeError) as caught:
        await client.get_page(table, PAGE)
    message = str(caught.value)
    assert "snow.http.max.response.bytes" in message
    assert "lower batch.size" in message
    assert f"/table/{table}" in message
    # The poller halves the page on this family, exactly as for "maximum execution time".
    assert isinstance(caught.value, ExecutionTimeExceededError)
    assert isinstance(caught.value, RetriableError)


async def test_an_endless_body_is_never_read_past_the_limit(make_client: Factory) -> None:
    client = await make_client()
    with pytest.raises(ResponseTooLargeError):
        await client.get_page("endless", PAGE)
    # The client hung up: the server stops after what fits in the socket buffers, far below
    # what an unbounded read would have pulled in by now.
    sent = served_bytes["endless"]
    await asyncio.sleep(0.2)  # give a still-reading client time to pull more (it must not)
    assert served_bytes["endless"] < LIMIT + 16 * 1024 * 1024
    assert served_bytes["endless"] - sent < 16 * 1024 * 1024


async def test_an_endless_error_body_is_cut_and_still_classified(make_client: Factory) -> None:
    client = await make_client(max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES)
    with pytest.raises(RetriableError, match="HTTP 503") as caught:
        await client.get_page("endless_error", {"status": "503"})
    assert not isinstance(caught.value, ResponseTooLargeError)


async def test_an_endless_slow_body_times_out_as_retriable(make_client: Factory) -> None:
    client = await make_client(request_timeout=1.5)
    started = asyncio.get_running_loop().time()
    with pytest.raises(RetriableError, match=r"no complete answer within .* \(timeout\)"):
        await client.get_page("trickle", PAGE)
    assert asyncio.get_running_loop().time() - started < 10


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ("not_a_list", 'JSON body has no "result" list'),
        ("rows_not_records", 'JSON "result" holds something other than records'),
        ("deep", "body is not valid JSON"),
    ],
)
async def test_unusable_bodies_are_precise_retriable_errors(
    make_client: Factory, table: str, reason: str
) -> None:
    client = await make_client(max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES)
    with pytest.raises(RetriableError, match="malformed response") as caught:
        await client.get_page(table, PAGE)
    assert reason in str(caught.value)
    if table == "deep":
        assert "depth limit exceeded" in str(caught.value)


def _leaks(text: str) -> list[str]:
    basic = base64.b64encode(f"svc.user:{PASSWORD}".encode()).decode()
    needles = [PASSWORD, CLIENT_SECRET, basic, PASSWORD.replace("-", "%2D")]
    return [n for n in needles if n in text]


async def test_echoed_credentials_never_reach_the_error(make_client: Factory) -> None:
    client = await make_client()
    with pytest.raises(AuthError) as caught:
        await client.get_page("echo_auth", {"sysparm_limit": "1", "password": PASSWORD})
    assert "User Not Authenticated" in str(caught.value)
    assert _leaks(str(caught.value)) == []
    with pytest.raises(RetriableError) as retried:
        await client.get_page("echo_500", PAGE)
    assert "boom, got Basic ***" in str(retried.value)
    assert _leaks(str(retried.value)) == []


async def test_echoed_token_form_never_reaches_the_error(make_client: Factory) -> None:
    auth = OAuth2Auth(
        grant_type="password",
        client_id="cid",
        client_secret=SecretStr(CLIENT_SECRET),
        username="svc.user",
        password=SecretStr(PASSWORD),
    )
    client = await make_client(auth)
    with pytest.raises(ServiceNowError) as caught:
        await client.get_page("exact", PAGE)
    message = str(caught.value)
    assert "invalid_client" in message
    assert "client_id=cid" in message  # the echo is kept, only its secrets are blanked
    assert _leaks(message) == []
