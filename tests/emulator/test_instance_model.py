"""The emulator's instance model: sessions by JSESSIONID, sticky nodes, semaphores, statistics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from snowsource.emulator import Emulator, serve
from snowsource.emulator.instance import POOL_COOKIE, ROUTE_COOKIE, SESSION_COOKIE
from tests.emulator.conftest import AUTH

PAGE = "/api/now/table/incident?sysparm_limit=1"


@pytest.fixture
async def served(emulator: Emulator) -> AsyncIterator[str]:
    emulator.seed(tables=("incident",), rows=5)
    async with serve(emulator) as url:
        # A host name, as the client's tests use: cookie jars treat IP addresses differently.
        yield url.replace("127.0.0.1", "localhost")


def jar_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(headers=AUTH, cookie_jar=aiohttp.CookieJar())


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, bytes, dict[str, str]]:
    async with session.get(url) as resp:
        cookies = {name: morsel.value for name, morsel in resp.cookies.items()}
        return resp.status, await resp.read(), cookies


async def statistics(session: aiohttp.ClientSession, url: str) -> dict[str, object]:
    async with session.get(f"{url}/emulator/statistics") as resp:
        assert resp.status == 200
        stats: dict[str, object] = await resp.json()
        return stats


async def test_off_by_default_no_cookies_and_nothing_counted(
    emulator: Emulator, served: str
) -> None:
    async with jar_session() as http:
        status, _, cookies = await get(http, served + PAGE)
        assert status == 200
        assert cookies == {}
        stats = await statistics(http, served)
    assert stats["enabled"] is False
    assert stats["sessions_opened"] == 0


async def test_a_request_without_a_session_opens_one_and_gets_its_cookies(
    emulator: Emulator, served: str
) -> None:
    emulator.instance.configure(nodes=2)
    async with aiohttp.ClientSession(
        headers=AUTH, cookie_jar=aiohttp.DummyCookieJar()
    ) as cookieless:
        answers = [await get(cookieless, served + PAGE) for _ in range(4)]
        stats = await statistics(cookieless, served)
    assert [status for status, _, _ in answers] == [200] * 4
    for _, _, cookies in answers:
        assert set(cookies) == {SESSION_COOKIE, POOL_COOKIE, ROUTE_COOKIE}
    assert len({cookies[SESSION_COOKIE] for _, _, cookies in answers}) == 4
    # A new session goes to the next node in turn.
    assert len({cookies[POOL_COOKIE] for _, _, cookies in answers}) == 2
    assert stats["sessions_opened"] == 4
    assert stats["sessions_live"] == 4


async def test_one_session_is_served_one_request_at_a_time(emulator: Emulator, served: str) -> None:
    emulator.instance.configure(nodes=2)
    emulator.latency_ms = 50
    async with jar_session() as http:
        status, _, cookies = await get(http, served + PAGE)
        assert status == 200
        assert SESSION_COOKIE in cookies
        answers = await asyncio.gather(*(get(http, served + PAGE) for _ in range(6)))
        stats = await statistics(http, served)
    assert [status for status, _, _ in answers] == [200] * 6
    assert all(cookies == {} for _, _, cookies in answers)  # the jar sent the session back
    assert stats["sessions_opened"] == 1
    assert stats["peak_in_flight"] == 1
    assert stats["served"] == 7


async def test_yokohama_runs_two_transactions_per_session(emulator: Emulator, served: str) -> None:
    emulator.instance.configure(nodes=1, per_session=2)
    emulator.latency_ms = 100
    async with jar_session() as http:
        await get(http, served + PAGE)
        answers = await asyncio.gather(*(get(http, served + PAGE) for _ in range(6)))
        stats = await statistics(http, served)
    assert [status for status, _, _ in answers] == [200] * 6
    assert stats["sessions_opened"] == 1
    assert stats["peak_in_flight"] == 2


async def test_more_than_ten_waiting_on_one_session_get_an_empty_202(
    emulator: Emulator, served: str
) -> None:
    emulator.instance.configure(nodes=1)
    async with jar_session() as http:
        await get(http, served + PAGE)
        emulator.faults.add(kind="slow", delay=1.0)  # the first one holds the session
        first = asyncio.create_task(get(http, served + PAGE))
        await _until(lambda: emulator.instance.in_flight == 1)
        queued = [asyncio.create_task(get(http, served + PAGE)) for _ in range(13)]
        answers = await asyncio.gather(first, *queued)
        stats = await statistics(http, served)
    statuses = [status for status, _, _ in answers]
    assert statuses.count(200) == 11  # one running, ten waiting
    assert statuses.count(202) == 3
    assert all(body == b"" for status, body, _ in answers if status == 202)
    assert stats["responses_202"] == 3
    assert [r.status for r in emulator.journal].count(202) == 3


async def test_a_full_node_answers_429_without_retry_after(emulator: Emulator, served: str) -> None:
    emulator.instance.configure(nodes=1, node_threads=2, node_queue=1)
    emulator.faults.add(kind="slow", delay=0.5, times=3)
    async with aiohttp.ClientSession(
        headers=AUTH, cookie_jar=aiohttp.DummyCookieJar()
    ) as cookieless:
        held = [asyncio.create_task(get(cookieless, served + PAGE)) for _ in range(3)]
        await _until(lambda: emulator.instance.in_flight == 2)
        await _until(lambda: emulator.instance.statistics()["nodes"][0]["queued"] == 1)  # type: ignore[index]
        async with cookieless.get(served + PAGE) as resp:
            assert resp.status == 429
            assert "Retry-After" not in resp.headers
            body = await resp.json()
        assert "semaphore" in body["error"]["detail"]
        assert [status for status, _, _ in await asyncio.gather(*held)] == [200] * 3
        stats = await statistics(cookieless, served)
    assert stats["responses_429"] == 1
    node = stats["nodes"][0]  # type: ignore[index]
    assert node["peak_in_flight"] == 2


async def test_the_pool_cookie_pins_a_session_to_its_node(emulator: Emulator, served: str) -> None:
    emulator.instance.configure(nodes=3)
    async with jar_session() as first, jar_session() as second:
        for http in (first, second):
            for _ in range(3):
                assert (await get(http, served + PAGE))[0] == 200
        stats = await statistics(first, served)
    served_per_node = [node["served"] for node in stats["nodes"]]  # type: ignore[attr-defined]
    assert sorted(served_per_node) == [0, 3, 3]
    assert stats["sessions_opened"] == 2


async def test_an_expired_session_is_replaced_with_a_new_jsessionid(
    emulator: Emulator, served: str
) -> None:
    emulator.instance.configure(nodes=2)
    async with jar_session() as http:
        _, _, before = await get(http, served + PAGE)
        assert emulator.instance.expire_sessions() == 1
        _, _, after = await get(http, served + PAGE)
        _, _, again = await get(http, served + PAGE)
    assert after[SESSION_COOKIE] != before[SESSION_COOKIE]
    assert again == {}
    assert emulator.instance.sessions_opened == 2


async def test_a_session_unused_past_the_timeout_is_gone(emulator: Emulator, served: str) -> None:
    emulator.instance.configure(nodes=1, session_timeout=0.0)
    async with jar_session() as http:
        _, _, first = await get(http, served + PAGE)
        _, _, second = await get(http, served + PAGE)
    assert second[SESSION_COOKIE] != first[SESSION_COOKIE]
    emulator.instance.configure(nodes=1)  # the default: 30 minutes
    async with jar_session() as http:
        await get(http, served + PAGE)
        _, _, kept = await get(http, served + PAGE)
    assert kept == {}


async def test_statistics_measure_served_time_and_reset(emulator: Emulator, served: str) -> None:
    emulator.instance.configure(nodes=2)
    emulator.latency_ms = 20
    async with jar_session() as a, jar_session() as b:
        await asyncio.gather(get(a, served + PAGE), get(b, served + PAGE))
        stats = await statistics(a, served)
        assert stats["served"] == 2
        assert stats["served_seconds"] >= 0.04  # type: ignore[operator]
        assert stats["window_seconds"] > 0  # type: ignore[operator]
        async with a.delete(f"{served}/emulator/statistics") as resp:
            until_reset = await resp.json()
        after = await statistics(a, served)
    assert until_reset["served"] == 2  # the DELETE answers what was counted up to it
    assert until_reset["sessions_opened"] == 2
    assert (after["served"], after["sessions_opened"]) == (0, 0)
    assert after["sessions_live"] == 2  # resetting counts keeps the sessions


def test_configure_refuses_impossible_settings(emulator: Emulator) -> None:
    with pytest.raises(ValueError, match="per_session"):
        emulator.instance.configure(per_session=0)
    with pytest.raises(ValueError, match="node_queue"):
        emulator.instance.configure(node_queue=-1)


async def _until(condition: object, timeout: float = 5.0) -> None:
    assert callable(condition)
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        assert loop.time() < end, "condition never held"
        await asyncio.sleep(0.005)


async def test_a_reset_mid_request_counts_only_the_time_after_it(
    emulator: Emulator, served: str
) -> None:
    emulator.instance.configure(nodes=1)
    emulator.faults.add(kind="slow", delay=0.6)
    async with jar_session() as http:
        slow = asyncio.create_task(get(http, served + PAGE))
        await _until(lambda: emulator.instance.in_flight == 1)
        emulator.instance.reset_statistics()
        assert emulator.instance.statistics()["in_flight"] == 1
        await slow
    stats = emulator.instance.statistics()
    assert stats["in_flight"] == 0
    assert stats["served"] == 1
    assert 0 < stats["served_seconds"] <= stats["window_seconds"] + 1e-6  # type: ignore[operator]
