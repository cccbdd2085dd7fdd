"""The session pool against the instance-modelling emulator (SPEC §14.1), reached by host name.

Sessions, nodes and semaphores are the emulator's (``emulator.instance``); what the instance saw
is read from its statistics, never inferred from timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from snowsource.adapters.servicenow import ApiKeyAuth, Auth, BasicAuth, OAuth2Auth, ServiceNowClient
from snowsource.adapters.session_pool import SessionPool
from snowsource.core.errors import RateLimitedError, RetriableError
from snowsource.core.grants import GROW_AFTER_SUCCESSES, Priority
from snowsource.emulator import Emulator, serve
from tests.integration.conftest import by_host_name

NOW = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)
BASIC = BasicAuth("admin", SecretStr("admin"))
PAGE = {"sysparm_limit": "2", "sysparm_query": "ORDERBYsys_updated_on^ORDERBYsys_id"}
TABLES = ("incident", "change_request", "cmdb_ci")

Factory = Callable[..., Awaitable[ServiceNowClient]]


@pytest.fixture
def emu() -> Emulator:
    emulator = Emulator(seed=5, now=NOW)
    emulator.clock.follow_wall_clock(True)
    emulator.seed(tables=TABLES, rows=20)
    emulator.instance.configure(nodes=2)
    return emulator


@pytest.fixture
async def served(emu: Emulator) -> AsyncIterator[str]:
    async with serve(emu) as url:
        yield url


@pytest.fixture
async def make_client(served: str) -> AsyncIterator[Factory]:
    async with AsyncExitStack() as stack:

        async def make(
            auth: Auth = BASIC, *, host_name: bool = True, **kw: Any
        ) -> ServiceNowClient:
            url = by_host_name(served) if host_name else served
            return await stack.enter_async_context(ServiceNowClient(url, auth, **kw))

        yield make


async def readers(client: ServiceNowClient, count: int, pages: int) -> None:
    """``count`` tables' readers, each asking ``pages`` pages one after the other."""

    async def reader(n: int) -> None:
        for _ in range(pages):
            await client.get_page(TABLES[n % len(TABLES)], PAGE, label=f"table{n}")

    await asyncio.gather(*(reader(n) for n in range(count)))


@pytest.mark.parametrize("host_name", [True, False], ids=["localhost", "ip-address"])
async def test_eight_readers_run_in_parallel_over_at_most_k_sessions(
    emu: Emulator, make_client: Factory, host_name: bool
) -> None:
    emu.latency_ms = 60
    client = await make_client(host_name=host_name, max_concurrent_requests=8)
    await readers(client, 8, 6)
    stats = emu.instance.statistics()
    assert stats["peak_in_flight"] >= 6  # type: ignore[operator]
    assert stats["sessions_opened"] <= 8  # type: ignore[operator]
    assert stats["responses_202"] == 0
    pool = client.pool_status()
    assert pool is not None
    assert pool.sessions_opened == stats["sessions_opened"]
    assert pool.sessions_open <= 8
    assert (pool.in_flight, pool.waiting, pool.limit) == (0, 0, 8)
    # Every request but each session's first carried that session's cookie, and only it.
    table_requests = [r for r in emu.journal if r.table is not None]
    without = [r for r in table_requests if "JSESSIONID=" not in r.headers.get("Cookie", "")]
    assert len(without) == stats["sessions_opened"]
    assert all(r.headers.get("Cookie", "").count("JSESSIONID=") <= 1 for r in table_requests)


async def test_two_requests_per_session_need_half_the_sessions(
    emu: Emulator, make_client: Factory
) -> None:
    emu.instance.configure(nodes=2, per_session=2)
    emu.latency_ms = 60
    client = await make_client(max_concurrent_requests=8, requests_per_session=2)
    await readers(client, 8, 6)
    stats = emu.instance.statistics()
    assert stats["sessions_opened"] <= 4  # type: ignore[operator]
    assert stats["peak_in_flight"] >= 6  # type: ignore[operator]


def oauth() -> OAuth2Auth:
    return OAuth2Auth("client_credentials", "snow-client", SecretStr("cl1ent-secret"))


async def test_oauth2_token_renewals_keep_the_sessions(emu: Emulator, make_client: Factory) -> None:
    # Tokens live 2 s and are renewed a second before: several renewals during the run.
    emu.add_oauth_client("snow-client", "cl1ent-secret", user="admin", access_lifetime=2)
    tokens: list[str] = []
    original = emu.auth.token_request

    def recording(form: Any, now: float) -> Any:
        answer = original(form, now)
        if answer is not None:
            tokens.append(str(answer["access_token"]))
        return answer

    emu.auth.token_request = recording  # type: ignore[method-assign]
    emu.latency_ms = 100
    client = await make_client(oauth(), max_concurrent_requests=8)
    await readers(client, 8, 30)
    stats = emu.instance.statistics()
    assert len(tokens) >= 2, "the run was too short to renew a token"
    assert stats["sessions_opened"] <= 10  # type: ignore[operator]
    assert stats["peak_in_flight"] >= 6  # type: ignore[operator]
    used = {r.headers.get("Authorization") for r in emu.journal if r.table is not None}
    assert len(used) >= 2  # the requests really went out with the renewed tokens


async def test_api_key_requests_go_through_the_pool(emu: Emulator, make_client: Factory) -> None:
    emu.add_user("key.user", "unused", api_key="ap1-key-0123456789", roles=("admin",), admin=True)
    emu.latency_ms = 60
    client = await make_client(ApiKeyAuth(SecretStr("ap1-key-0123456789")))
    await readers(client, 8, 6)
    stats = emu.instance.statistics()
    assert stats["sessions_opened"] <= 8  # type: ignore[operator]
    assert stats["peak_in_flight"] >= 6  # type: ignore[operator]


async def test_a_session_the_instance_expired_is_replaced(
    emu: Emulator, make_client: Factory
) -> None:
    client = await make_client(max_concurrent_requests=1)
    await client.get_page("incident", PAGE)
    emu.instance.expire_sessions()
    await client.get_page("incident", PAGE)
    await client.get_page("incident", PAGE)
    pool = client.pool_status()
    assert pool is not None
    assert (pool.sessions_opened, pool.sessions_replaced, pool.sessions_open) == (2, 1, 1)
    assert emu.instance.statistics()["sessions_opened"] == 2


async def test_a_401_drops_the_sessions_cookies(emu: Emulator, make_client: Factory) -> None:
    client = await make_client(max_concurrent_requests=1)
    await client.get_page("incident", PAGE)
    emu.faults.add(status=401)
    with pytest.raises(Exception, match="401"):
        await client.get_page("incident", PAGE)
    await client.get_page("incident", PAGE)
    after = emu.journal[-1]
    assert "JSESSIONID" not in after.headers.get("Cookie", "")  # a fresh session
    assert emu.instance.statistics()["sessions_opened"] == 2


async def test_429_without_retry_after_halves_the_limit_down_to_one_and_recovers(
    emu: Emulator, make_client: Factory
) -> None:
    client = await make_client(max_concurrent_requests=8)

    def limit() -> int:
        status = client.pool_status()
        assert status is not None
        return status.limit

    emu.faults.add(status=429, times=5)
    seen = []
    for _ in range(5):
        with pytest.raises(RateLimitedError) as caught:
            await client.get_page("incident", PAGE)
        assert caught.value.retry_after is None
        seen.append(limit())
    assert seen == [4, 2, 1, 1, 1]
    for expected in (2, 3):
        for _ in range(GROW_AFTER_SUCCESSES):
            await client.get_page("incident", PAGE)
        assert limit() == expected
    # A 429 with Retry-After is the rate-limit rule's answer, not saturation: the limit stays.
    emu.faults.add(status=429, retry_after=7)
    with pytest.raises(RateLimitedError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.retry_after == 7
    assert limit() == 3


async def test_429s_to_requests_already_in_flight_halve_the_limit_once(
    emu: Emulator, make_client: Factory
) -> None:
    client = await make_client(max_concurrent_requests=8)
    emu.faults.add(status=429, times=8)
    results = await asyncio.gather(
        *(client.get_page("incident", PAGE) for _ in range(8)), return_exceptions=True
    )
    assert all(isinstance(r, RateLimitedError) for r in results)
    status = client.pool_status()
    assert status is not None
    assert status.limit == 4


async def test_the_limit_bounds_requests_in_flight(emu: Emulator, make_client: Factory) -> None:
    emu.latency_ms = 60
    client = await make_client(max_concurrent_requests=8)
    emu.faults.add(status=429, times=2)
    for _ in range(2):
        with pytest.raises(RateLimitedError):
            await client.get_page("incident", PAGE)
    emu.instance.reset_statistics()
    await readers(client, 8, 2)  # 16 answers: fewer than the 20 that would raise the limit
    assert emu.instance.statistics()["peak_in_flight"] == 2


@pytest.mark.parametrize(
    "fault",
    [{"status": 202}, {"kind": "empty"}, {"status": 200, "html": True}, {"status": 204}],
    ids=["202", "empty-object", "html", "204"],
)
async def test_a_2xx_that_is_not_a_page_is_retriable(
    emu: Emulator, make_client: Factory, fault: dict[str, Any]
) -> None:
    client = await make_client()
    emu.faults.add(**fault)
    with pytest.raises(RetriableError) as caught:
        await client.get_page("incident", PAGE)
    assert caught.value.status == fault.get("status", 200)
    if fault.get("status") == 202:
        assert "session" in str(caught.value)
    assert len((await client.get_page("incident", PAGE)).rows) == 2


async def test_close_is_idempotent_and_fails_waiting_requests(emu: Emulator, served: str) -> None:
    emu.latency_ms = 200
    client = ServiceNowClient(by_host_name(served), BASIC, max_concurrent_requests=1)
    await client.start()
    running = asyncio.create_task(client.get_page("incident", PAGE))
    waiting = asyncio.create_task(client.get_page("incident", PAGE, label="other"))
    await poll(lambda: (s := client.pool_status()) is not None and s.waiting == 1)
    await client.close()
    await client.close()
    assert client.pool_status() is None
    with pytest.raises(RuntimeError, match="closed"):
        await waiting
    # The daemon closes the client only after its pollers ended; one still in flight fails.
    with pytest.raises(BaseException):  # noqa: B017, PT011 - whatever aiohttp raises then
        await running
    with pytest.raises(RuntimeError, match="closed"):
        await client.get_page("incident", PAGE)


async def test_a_cancelled_waiter_leaves_the_queue(emu: Emulator, make_client: Factory) -> None:
    emu.latency_ms = 200
    client = await make_client(max_concurrent_requests=1)
    running = asyncio.create_task(client.get_page("incident", PAGE))
    waiting = asyncio.create_task(client.get_page("incident", PAGE, label="other"))
    await poll(lambda: (s := client.pool_status()) is not None and s.waiting == 1)
    waiting.cancel()
    await poll(lambda: (s := client.pool_status()) is not None and s.waiting == 0)
    await running
    status = client.pool_status()
    assert status is not None
    assert (status.in_flight, status.waiting) == (0, 0)


async def test_fair_grants_a_stream_never_waits_behind_two_pages_of_one_backfill(
    emu: Emulator, served: str
) -> None:
    """5 backfilling tables and 1 streaming table on a pool of 2 (SPEC §14.1 fairness): between
    the stream asking and being granted, each backfill gets at most one page."""
    emu.latency_ms = 20
    url = by_host_name(served) + "/api/now/v2/table/incident?sysparm_limit=1"
    grants: list[str] = []
    waits: list[list[str]] = []
    stop = asyncio.Event()

    def session(jar: aiohttp.abc.AbstractCookieJar) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(cookie_jar=jar, headers={"Authorization": auth_header()})

    pool = SessionPool(session, max_concurrent_requests=2)
    async with pool:

        async def request(key: str) -> int:
            async with pool.lease(key) as lease:
                granted = len(grants)
                grants.append(key)
                async with lease.session.get(url) as resp:
                    assert resp.status == 200
                    await resp.read()
                pool.answered(lease, resp.status, session_id=None, retry_after=False)
            return granted

        async def backfill(key: str) -> None:
            while not stop.is_set():
                await request(key)

        async def stream() -> None:
            for _ in range(10):
                asked_at = len(grants)
                granted = await request("stream")
                waits.append(grants[asked_at:granted])

        # Three readers per backfilling table (its slices) keep three requests queued under
        # one key: first-come-first-served would put the stream behind all fifteen.
        backfills = [
            asyncio.create_task(backfill(f"backfill{n}")) for n in range(5) for _ in range(3)
        ]
        await stream()
        stop.set()
        await asyncio.gather(*backfills)
    assert len(waits) == 10
    for before in waits:
        # A grant is recorded when its task resumes: up to two (the pool's size) were granted
        # before the stream asked and recorded after. Beyond those, one page per backfill.
        assert "stream" not in before
        assert len(before) <= 5 + 2, before
        assert all(before.count(f"backfill{n}") <= 2 for n in range(5)), before


async def test_low_priority_waits_while_normal_requests_wait(
    emu: Emulator, make_client: Factory
) -> None:
    emu.latency_ms = 30
    client = await make_client(max_concurrent_requests=1)
    order: list[str] = []

    async def ask(label: str, priority: Priority) -> None:
        await client.get_page("incident", PAGE, label=label, priority=priority)
        order.append(label)

    first = asyncio.create_task(ask("first", Priority.STREAM))
    await poll(lambda: (s := client.pool_status()) is not None and s.in_flight == 1)
    sweep = asyncio.create_task(ask("sweep", Priority.LOW))
    pages = [asyncio.create_task(ask(f"t{n}", Priority.STREAM)) for n in range(3)]
    await asyncio.gather(first, sweep, *pages)
    assert order == ["first", "t0", "t1", "t2", "sweep"]


def auth_header() -> str:
    return aiohttp.encode_basic_auth("admin", "admin")


async def poll(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        assert loop.time() < end, "condition never held"
        await asyncio.sleep(0.005)
