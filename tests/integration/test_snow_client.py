"""``ServiceNowClient`` against the real emulator: auth, OAuth tokens, faults, limits, clock."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from pydantic import SecretStr

from snowsource import __version__
from snowsource.adapters.servicenow import ApiKeyAuth, Auth, BasicAuth, OAuth2Auth, ServiceNowClient
from snowsource.core.errors import (
    AuthError,
    ConfigError,
    ExecutionTimeExceededError,
    RateLimitedError,
    RetriableError,
    ServiceNowError,
    TableError,
)
from snowsource.emulator import Emulator, make_app, serve

NOW = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)
ADMIN_PASSWORD = "Adm1n-password-XYZZY"
WRONG_PASSWORD = "Wr0ng-password-PLUGH"
CLIENT_SECRET = "cl1ent-secret-FROBOZZ"
API_KEY = "ap1-key-GRUE-0123456789"
PAGE = {"sysparm_limit": "5", "sysparm_query": "ORDERBYsys_updated_on^ORDERBYsys_id"}
BASIC = BasicAuth("admin", SecretStr(ADMIN_PASSWORD))

Factory = Callable[..., Awaitable[ServiceNowClient]]


@pytest.fixture
def emu() -> Emulator:
    emulator = Emulator(seed=7, now=NOW, password=ADMIN_PASSWORD)
    emulator.seed(tables=("incident",), rows=30)
    return emulator


@pytest.fixture
async def url(emu: Emulator) -> AsyncIterator[str]:
    async with serve(emu) as base_url:
        yield base_url


@pytest.fixture
async def make_client(url: str) -> AsyncIterator[Factory]:
    """Open clients on the emulator; all are closed at teardown."""
    async with AsyncExitStack() as stack:

        async def make(auth: Auth = BASIC, **kwargs: Any) -> ServiceNowClient:
            client = ServiceNowClient(kwargs.pop("base_url", url), auth, **kwargs)
            return await stack.enter_async_context(client)

        yield make


@pytest.fixture
def grants(emu: Emulator, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The grant_type of every token request the emulator receives, in order."""
    seen: list[str] = []
    original = emu.auth.token_request

    def recording(form: Mapping[str, str], now: float) -> dict[str, str | int] | None:
        seen.append(form.get("grant_type", ""))
        return original(form, now)

    monkeypatch.setattr(emu.auth, "token_request", recording)
    return seen


def table_statuses(emu: Emulator, table: str = "incident") -> list[int]:
    return [r.status for r in emu.journal.for_table(table)]


def assert_no_secret(exc: BaseException, emu: Emulator) -> None:
    """No password, client secret, API key or issued token in the error's text."""
    secrets = [ADMIN_PASSWORD, WRONG_PASSWORD, CLIENT_SECRET, API_KEY]
    for request in emu.journal:
        authorization = request.headers.get("Authorization", "")
        if authorization:
            secrets.append(authorization.split(" ", 1)[-1])
    text = f"{exc} {exc!r} {exc.args!r}"
    for secret in secrets:
        assert secret not in text
    assert exc.__cause__ is None or "Authorization" not in repr(exc.__cause__)


# ---- basic auth, API key, the page itself ---------------------------------------------------


async def test_basic_auth_page_headers_and_date_callback(
    emu: Emulator, make_client: Factory
) -> None:
    dates: list[str] = []
    responses: list[tuple[str, int, float]] = []
    client = await make_client(
        on_date=dates.append, on_response=lambda *args: responses.append(args)
    )
    page = await client.get_page("incident", {**PAGE, "sysparm_no_count": "false"})

    assert len(page.rows) == 5
    assert all(isinstance(row["sys_id"], str) for row in page.rows)
    assert page.status == 200
    assert page.date == "Tue, 29 Sep 2026 07:00:00 GMT"
    assert page.total_count == 30
    assert page.elapsed > 0
    assert dates == [page.date]
    assert [(t, s) for t, s, _ in responses] == [("incident", 200)]

    request = emu.journal[-1]
    assert request.path == "/api/now/v2/table/incident"
    assert request.params == {**PAGE, "sysparm_no_count": "false"}
    assert request.headers["User-Agent"] == f"snowsource/{__version__}"
    assert request.headers["Accept"] == "application/json"
    assert request.user == "admin"

    emu.clock.advance(65)
    page = await client.get_page("incident", {**PAGE, "sysparm_no_count": "true"})
    assert page.total_count is None
    assert dates == ["Tue, 29 Sep 2026 07:00:00 GMT", "Tue, 29 Sep 2026 07:01:05 GMT"]


async def test_date_callback_sees_error_responses_too(emu: Emulator, make_client: Factory) -> None:
    dates: list[str] = []
    client = await make_client(on_date=dates.append)
    emu.faults.add(status=503, html=True)
    with pytest.raises(RetriableError):
        await client.get_page("incident", PAGE)
    assert dates == ["Tue, 29 Sep 2026 07:00:00 GMT"]


async def test_wrong_password_is_auth_error(emu: Emulator, make_client: Factory) -> None:
    client = await make_client(BasicAuth("admin", SecretStr(WRONG_PASSWORD)))
    with pytest.raises(AuthError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.status == 401
    assert "User Not Authenticated" in str(caught.value)
    assert table_statuses(emu) == [401]  # basic auth: no second attempt
    assert_no_secret(caught.value, emu)


async def test_api_key(emu: Emulator, make_client: Factory) -> None:
    emu.add_user("key.user", "unused-password", api_key=API_KEY, roles=("itil",))
    client = await make_client(ApiKeyAuth(SecretStr(API_KEY)))
    page = await client.get_page("incident", PAGE)
    assert len(page.rows) == 5
    request = emu.journal[-1]
    assert request.user == "key.user"
    assert request.headers["x-sn-apikey"] == API_KEY
    assert "Authorization" not in request.headers

    wrong = await make_client(ApiKeyAuth(SecretStr("not-" + API_KEY)))
    with pytest.raises(AuthError) as caught:
        await wrong.get_page("incident", PAGE)
    assert_no_secret(caught.value, emu)
    assert "not-" + API_KEY not in str(caught.value)


async def test_get_json_probe(emu: Emulator, make_client: Factory) -> None:
    client = await make_client()
    doc = await client.get_json(
        "/api/now/v2/table/sys_user",
        {"sysparm_query": "user_name=admin", "sysparm_fields": "user_name,time_zone"},
    )
    assert doc["result"] == [{"user_name": "admin", "time_zone": "America/Los_Angeles"}]
    sys_id = emu.user("admin").sys_id
    record = await client.get_json(f"api/now/v2/table/sys_user/{sys_id}", {})
    assert record["result"]["sys_id"] == sys_id  # a single record: result is an object
    with pytest.raises(TableError) as caught:
        await client.get_json("/api/now/no_such_api", {})
    assert caught.value.status == 400


# ---- OAuth2 ---------------------------------------------------------------------------------


def oauth(grant: str = "client_credentials", secret: str = CLIENT_SECRET) -> OAuth2Auth:
    if grant == "password":
        return OAuth2Auth(
            "password", "snow-client", SecretStr(secret), None, "admin", SecretStr(ADMIN_PASSWORD)
        )
    return OAuth2Auth("client_credentials", "snow-client", SecretStr(secret))


async def test_oauth_client_credentials_token_reused(
    emu: Emulator, make_client: Factory, grants: list[str]
) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET, user="admin")
    client = await make_client(oauth())
    for _ in range(5):
        assert len((await client.get_page("incident", PAGE)).rows) == 5
    assert grants == ["client_credentials"]
    tokens = {r.headers["Authorization"] for r in emu.journal.for_table("incident")}
    assert len(tokens) == 1
    assert tokens.pop().startswith("Bearer ")
    assert table_statuses(emu) == [200] * 5


async def test_oauth_password_grant_refreshes_on_emulator_expiry(
    emu: Emulator, make_client: Factory, grants: list[str]
) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET)
    client = await make_client(oauth("password"))
    for _ in range(3):
        await client.get_page("incident", PAGE)
    assert grants == ["password"]

    emu.clock.advance(1801)  # the access token expires on the instance's clock
    page = await client.get_page("incident", PAGE)
    assert len(page.rows) == 5
    assert grants == ["password", "refresh_token"]
    assert table_statuses(emu) == [200, 200, 200, 401, 200]


async def test_oauth_client_credentials_expiry_gets_a_new_token(
    emu: Emulator, make_client: Factory, grants: list[str]
) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET, user="admin")
    client = await make_client(oauth())
    await client.get_page("incident", PAGE)
    emu.clock.advance(3600)
    await client.get_page("incident", PAGE)
    # client_credentials issues no refresh token: the original grant again.
    assert grants == ["client_credentials", "client_credentials"]
    assert table_statuses(emu) == [200, 401, 200]


async def test_oauth_renews_before_expiry_without_a_401(
    emu: Emulator, make_client: Factory, grants: list[str]
) -> None:
    # A 1 s token is renewed after half its life on the local clock; the emulator clock stands
    # still, so only the client's own bookkeeping can trigger this renewal.
    emu.add_oauth_client("snow-client", CLIENT_SECRET, user="admin", access_lifetime=1)
    client = await make_client(oauth())
    await client.get_page("incident", PAGE)
    assert grants == ["client_credentials"]
    started = time.monotonic()
    await asyncio.sleep(0.6)  # lets local time pass the renewal point; nothing to wait for
    assert time.monotonic() - started >= 0.5
    await client.get_page("incident", PAGE)
    assert grants == ["client_credentials", "client_credentials"]
    assert table_statuses(emu) == [200, 200]


async def test_oauth_single_flight(emu: Emulator, make_client: Factory, grants: list[str]) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET)
    client = await make_client(oauth("password"), max_concurrent_requests=10)
    pages = await asyncio.gather(*(client.get_page("incident", PAGE) for _ in range(10)))
    assert all(len(p.rows) == 5 for p in pages)
    assert grants == ["password"]

    emu.clock.advance(1801)
    pages = await asyncio.gather(*(client.get_page("incident", PAGE) for _ in range(10)))
    assert all(len(p.rows) == 5 for p in pages)
    # Ten requests were refused with the same stale token; one refresh served them all.
    assert grants == ["password", "refresh_token"]
    assert table_statuses(emu).count(401) == 10


async def test_oauth_falls_back_to_the_original_grant_when_refresh_fails(
    emu: Emulator, make_client: Factory, grants: list[str]
) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET)
    client = await make_client(oauth("password"))
    await client.get_page("incident", PAGE)
    emu.auth.revoke_all()  # access and refresh tokens both gone (instance restart)
    assert len((await client.get_page("incident", PAGE)).rows) == 5
    assert grants == ["password", "refresh_token", "password"]
    assert table_statuses(emu) == [200, 401, 200]


async def test_oauth_second_401_is_auth_error(
    emu: Emulator, make_client: Factory, grants: list[str]
) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET, user="admin")
    client = await make_client(oauth())
    await client.get_page("incident", PAGE)
    emu.faults.add(status=401, times=2, table="incident")
    with pytest.raises(AuthError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.status == 401
    assert grants == ["client_credentials", "client_credentials"]  # one refresh, no more
    assert table_statuses(emu) == [200, 401, 401]
    assert_no_secret(caught.value, emu)
    # The next call works again with the refreshed token.
    await client.get_page("incident", PAGE)
    assert grants == ["client_credentials", "client_credentials"]


@pytest.mark.parametrize("grant", ["client_credentials", "password"])
async def test_oauth_token_endpoint_refusal(
    emu: Emulator, make_client: Factory, grants: list[str], grant: str
) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET, user="admin")
    client = await make_client(oauth(grant, secret="x" + CLIENT_SECRET))
    with pytest.raises(AuthError) as caught:
        await client.get_page("incident", PAGE)
    message = str(caught.value)
    assert "oauth_token.do" in message
    assert "client.secret" in message
    assert "access_denied" in message
    assert "x" + CLIENT_SECRET not in message
    assert_no_secret(caught.value, emu)
    assert grants == [grant]
    assert table_statuses(emu) == []  # no Table API request without a token


async def test_oauth_client_credentials_disabled(emu: Emulator, make_client: Factory) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET, user="admin")
    emu.client_credentials_enabled = False
    client = await make_client(oauth())
    with pytest.raises(AuthError, match=r"grant_type\.enabled") as caught:
        await client.get_page("incident", PAGE)
    assert_no_secret(caught.value, emu)


async def test_oauth_custom_token_url(emu: Emulator, url: str, make_client: Factory) -> None:
    emu.add_oauth_client("snow-client", CLIENT_SECRET, user="admin")
    auth = OAuth2Auth(
        "client_credentials", "snow-client", SecretStr(CLIENT_SECRET), f"{url}/nowhere.do"
    )
    client = await make_client(auth)
    with pytest.raises(AuthError, match=r"nowhere\.do"):
        await client.get_page("incident", PAGE)


# ---- faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error", "status", "text"),
    [
        ({"status": 503, "html": True}, RetriableError, 503, "HTTP 503"),
        ({"status": 500}, RetriableError, 500, "HTTP 500"),
        ({"status": 502}, RetriableError, 502, "HTTP 502"),
        ({"status": 200, "html": True}, RetriableError, 200, "HTML"),
        ({"kind": "malformed"}, RetriableError, 200, "malformed response"),
        ({"kind": "truncated"}, RetriableError, None, "incident"),
        # aiohttp itself re-sends an idempotent request once when the connection drops before
        # any answer (a stale keep-alive connection looks the same), so drop it twice.
        ({"kind": "disconnect", "times": 2}, RetriableError, None, "ServerDisconnected"),
        ({"status": 403}, TableError, 403, "Insufficient rights"),
        ({"status": 404}, TableError, 404, "No Record found"),
    ],
)
async def test_fault_classification(  # noqa: PLR0917 (parametrized test arguments)
    emu: Emulator,
    make_client: Factory,
    fault: dict[str, Any],
    error: type[ServiceNowError],
    status: int | None,
    text: str,
) -> None:
    responses: list[tuple[str, int, float]] = []
    client = await make_client(on_response=lambda *args: responses.append(args))
    emu.faults.add(**fault)
    with pytest.raises(ServiceNowError) as caught:
        await client.get_page("incident", PAGE)
    assert type(caught.value) is error
    assert caught.value.status == status
    assert text in str(caught.value)
    assert_no_secret(caught.value, emu)
    assert responses[0][1] == (status or 0)
    # The client is still usable afterwards.
    assert len((await client.get_page("incident", PAGE)).rows) == 5


async def test_429_with_and_without_retry_after(emu: Emulator, make_client: Factory) -> None:
    client = await make_client()
    emu.faults.add(status=429, retry_after=2)
    with pytest.raises(RateLimitedError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.retry_after == 2.0
    assert caught.value.status == 429
    emu.faults.add(status=429, retry_after=None)
    with pytest.raises(RateLimitedError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.retry_after is None


async def test_rate_limit_rule(emu: Emulator, make_client: Factory) -> None:
    emu.rate_limit(limit_per_hour=2, user="admin")
    client = await make_client()
    await client.get_page("incident", PAGE)
    await client.get_page("incident", PAGE)
    with pytest.raises(RateLimitedError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.retry_after is not None
    assert caught.value.retry_after > 0


async def test_slow_answer_beyond_request_timeout(emu: Emulator, make_client: Factory) -> None:
    responses: list[tuple[str, int, float]] = []
    client = await make_client(
        request_timeout=0.3, on_response=lambda *args: responses.append(args)
    )
    emu.faults.add(kind="slow", delay=1.0)
    started = time.monotonic()
    with pytest.raises(RetriableError, match="timeout") as caught:
        await client.get_page("incident", PAGE)
    assert type(caught.value) is RetriableError
    assert time.monotonic() - started < 0.9
    assert responses[0][:2] == ("incident", 0)
    assert_no_secret(caught.value, emu)


async def test_max_execution_time(emu: Emulator, make_client: Factory) -> None:
    emu.max_page_cost = 3
    client = await make_client()
    with pytest.raises(ExecutionTimeExceededError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.status == 500
    assert "maximum execution time exceeded" in str(caught.value)
    page = await client.get_page("incident", {**PAGE, "sysparm_limit": "3"})
    assert len(page.rows) == 3


async def test_denied_table_and_unknown_table(emu: Emulator, make_client: Factory) -> None:
    emu.deny_table("admin", "incident")
    client = await make_client()
    with pytest.raises(TableError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.status == 403
    assert "Insufficient rights to query records" in str(caught.value)
    with pytest.raises(TableError) as caught:
        await client.get_page("u_no_such_table", PAGE)
    assert caught.value.status == 400
    assert "Invalid table u_no_such_table" in str(caught.value)
    assert "/api/now/v2/table/u_no_such_table" in str(caught.value)


async def test_connection_refused_is_retriable(make_client: Factory) -> None:
    # A port nobody listens on: bind one, close it, then connect.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    client = await make_client(base_url=f"http://127.0.0.1:{port}", connect_timeout=2)
    with pytest.raises(RetriableError, match=f"127.0.0.1:{port}"):
        await client.get_page("incident", PAGE)


# ---- concurrency limit ----------------------------------------------------------------------


@asynccontextmanager
async def counting_server(emu: Emulator) -> AsyncIterator[tuple[str, list[int]]]:
    """Serve ``emu`` with an outermost middleware recording the in-flight count per arrival."""
    in_flight = 0
    seen: list[int] = []

    @web.middleware
    async def count(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        nonlocal in_flight
        in_flight += 1
        seen.append(in_flight)
        try:
            return await handler(request)
        finally:
            in_flight -= 1

    app = make_app(emu)
    app.middlewares.insert(0, count)
    async with TestServer(app) as server:
        yield str(server.make_url("")).rstrip("/"), seen


async def test_concurrency_limit_caps_in_flight_requests(emu: Emulator) -> None:
    emu.faults.add(kind="slow", delay=0.2, times=None)
    async with (
        counting_server(emu) as (base_url, seen),
        ServiceNowClient(base_url, BASIC, max_concurrent_requests=3) as client,
    ):
        tables = ["incident", "incident", "sys_user"] * 3  # shared by all tables
        pages = await asyncio.gather(*(client.get_page(t, PAGE) for t in tables))
    assert len(pages) == 9
    assert len(seen) == 9
    assert max(seen) == 3  # the cap is reached, never exceeded


async def test_requests_go_through_the_proxy(emu: Emulator, make_client: Factory) -> None:
    # The "proxy" serves the emulator itself: the instance host does not resolve, so a page only
    # arrives if the request really went to the proxy (absolute-form request target).
    async with counting_server(emu) as (proxy_url, seen):
        client = await make_client(base_url="http://instance.invalid", proxy=proxy_url)
        page = await client.get_page("incident", PAGE)
    assert len(page.rows) == 5
    assert len(seen) == 1
    assert emu.journal[-1].headers["Host"] == "instance.invalid"


def test_urls_with_credentials_are_refused() -> None:
    with pytest.raises(ValueError, match="base_url") as caught:
        ServiceNowClient("https://u:hunter2@acme.service-now.com", BASIC)
    assert "hunter2" not in str(caught.value)
    auth = OAuth2Auth("client_credentials", "c", SecretStr("s"), "https://u:hunter2@idp/token")
    with pytest.raises(ValueError, match="token_url"):
        ServiceNowClient("https://acme.service-now.com", auth)


# ---- TLS, lifecycle -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (cert, key)."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_tls_is_verified_and_ca_file_adds_trust(
    emu: Emulator, self_signed: tuple[Path, Path], make_client: Factory
) -> None:
    cert, key = self_signed
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    runner = web.AppRunner(make_app(emu), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = runner.addresses[0][1]
        base = f"https://127.0.0.1:{port}"
        untrusted = await make_client(base_url=base)
        with pytest.raises(RetriableError, match=r"(?i)certificate"):
            await untrusted.get_page("incident", PAGE)
        trusted = await make_client(base_url=base, ca_file=str(cert))
        assert len((await trusted.get_page("incident", PAGE)).rows) == 5
    finally:
        await runner.cleanup()


async def test_unreadable_ca_file_is_config_error(tmp_path: Path) -> None:
    client = ServiceNowClient("https://example.invalid", BASIC, ca_file=str(tmp_path / "none"))
    with pytest.raises(ConfigError, match=r"snow\.http\.ca\.file"):
        await client.__aenter__()
    await client.aclose()


async def test_lifecycle(url: str) -> None:
    client = ServiceNowClient(url, BASIC)
    with pytest.raises(RuntimeError, match="not started"):
        await client.get_page("incident", PAGE)
    async with client:
        assert len((await client.get_page("incident", PAGE)).rows) == 5
    await client.aclose()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await client.get_page("incident", PAGE)
