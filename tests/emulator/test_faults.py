"""Injected faults, the page-cost quota, and rate-limit rules."""

from __future__ import annotations

import time

import aiohttp
import orjson
import pytest

from snowsource.emulator import Emulator
from snowsource.emulator.faults import window_start
from tests.emulator.conftest import AUTH, Client, get_json, table

LIST = "/api/now/table/incident"


async def _read(session: aiohttp.ClientSession, url: str) -> bytes:
    async with session.get(url, headers=AUTH) as resp:
        return await resp.read()


async def test_html_503_and_200(emulator: Emulator, emulator_client: Client) -> None:
    emulator.faults.add(status=503, html=True, table="incident")
    emulator.faults.add(status=200, html=True)
    for status in (503, 200):
        async with emulator_client.get(LIST, headers=AUTH) as resp:
            assert resp.status == status
            assert resp.headers["Content-Type"].startswith("text/html")
            assert "<html>" in await resp.text()
    await table(emulator_client, "incident")  # consumed: back to normal


async def test_json_5xx_and_fifo_matching(emulator: Emulator, emulator_client: Client) -> None:
    emulator.faults.add(status=500, table="change_request")
    emulator.faults.add(status=502, times=2)
    body, _ = await get_json(emulator_client, LIST, status=502)
    assert body == {"error": {"message": "Bad Gateway", "detail": None}, "status": "failure"}
    await get_json(emulator_client, "/api/now/table/change_request", status=500)
    await get_json(emulator_client, "/api/now/table/change_request", status=502)
    await get_json(emulator_client, LIST)
    assert len(emulator.faults) == 0


async def test_429_with_and_without_retry_after(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.faults.add(status=429, retry_after=2)
    emulator.faults.add(status=429, retry_after=None)
    async with emulator_client.get(LIST, headers=AUTH) as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "2"
        assert (await resp.json())["error"]["message"] == "Rate limit exceeded"
    async with emulator_client.get(LIST, headers=AUTH) as resp:
        assert resp.status == 429
        assert "Retry-After" not in resp.headers


async def test_malformed_body(emulator: Emulator, emulator_client: Client) -> None:
    emulator.faults.add(kind="malformed")
    async with emulator_client.get(LIST, headers=AUTH) as resp:
        assert resp.status == 200
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(await resp.read())


async def test_truncated_body(emulator: Emulator, emulator_url: str) -> None:
    emulator.seed(tables=("incident",), rows=30)
    emulator.faults.add(kind="truncated")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientPayloadError):
            await _read(session, emulator_url + LIST)
        async with session.get(emulator_url + LIST, headers=AUTH) as resp:
            assert len((await resp.json())["result"]) == 30
    assert emulator.journal[0].status == 200


async def test_disconnect(emulator: Emulator, emulator_url: str) -> None:
    # aiohttp's client silently retries an idempotent request once after a disconnect, so one
    # disconnect fault is invisible to it: two make it see the error.
    emulator.faults.add(kind="disconnect", times=2)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await _read(session, emulator_url + LIST)
        async with session.get(emulator_url + LIST, headers=AUTH) as resp:
            assert resp.status == 200
    assert [r.status for r in emulator.journal] == [0, 0, 200]


async def test_slow_response(emulator: Emulator, emulator_client: Client) -> None:
    emulator.faults.add(kind="slow", delay=0.3)
    started = time.monotonic()
    await table(emulator_client, "incident")
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    await table(emulator_client, "incident")
    assert time.monotonic() - started < 0.3


async def test_a_window_fault_matches_only_pages_starting_in_its_time_range(
    emulator: Emulator, emulator_client: Client
) -> None:
    fault = emulator.faults.add(
        kind="slow", delay=0.01, times=2, window=("2026-01-02 00:00:00", "2026-01-03 00:00:00")
    )
    before = "sys_updated_on>=2026-01-01 00:00:00^sys_updated_on<=2026-01-01 23:59:59"
    inside = (
        "sys_updated_on>2026-01-02 10:00:00^sys_updated_on<=2026-01-02 23:59:59^NQ"
        "sys_updated_on=2026-01-02 10:00:00^sys_id>abc^sys_updated_on<=2026-01-02 23:59:59"
    )
    at_end = "active=true^sys_updated_on>=2026-01-03 00:00:00^ORDERBYsys_updated_on"
    for query in (before, at_end, ""):
        await table(emulator_client, "incident", sysparm_query=query)
    assert fault.times == 2, "pages outside the window are not delayed"
    await table(emulator_client, "incident", sysparm_query=inside)
    assert fault.times == 1


async def test_a_counting_fault_matches_only_requests_that_ask_for_the_count(
    emulator: Emulator, emulator_client: Client
) -> None:
    counts = emulator.faults.add(kind="slow", delay=0.01, times=None, counting=True)
    pages = emulator.faults.add(kind="slow", delay=0.01, times=None, counting=False)
    await table(emulator_client, "incident", sysparm_no_count="true")
    assert emulator.faults.take("incident", "", counting=False) is pages
    # No sysparm_no_count means the instance counts (its default): the counting fault.
    assert emulator.faults.take("incident", "", counting=True) is counts
    emulator.faults.clear()
    only_counts = emulator.faults.add(kind="slow", delay=0.01, times=2, counting=True)
    await table(emulator_client, "incident", sysparm_no_count="true")
    assert only_counts.times == 2, "a page without a count is not delayed"
    await table(emulator_client, "incident", sysparm_no_count="false", sysparm_limit="1")
    await table(emulator_client, "incident")
    assert len(emulator.faults) == 0, "both counting requests took the fault"


def test_window_start_reads_the_lower_bound_of_a_keyset_query() -> None:
    assert window_start("a=b^ts>=2026-01-01 00:00:05^ts<=2026-01-02 00:00:00") == (
        "2026-01-01 00:00:05"
    )
    assert window_start("ts>2026-01-01 00:00:05^ts<=x") == "2026-01-01 00:00:05"
    assert window_start("ts<=2026-01-01 00:00:05") is None
    assert window_start("") is None


async def test_slow_response_trips_a_client_timeout(emulator: Emulator, emulator_url: str) -> None:
    emulator.faults.add(kind="slow", delay=2.0)
    timeout = aiohttp.ClientTimeout(total=0.2)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        with pytest.raises(TimeoutError):
            await _read(session, emulator_url + LIST)


async def test_max_page_cost(emulator: Emulator, emulator_client: Client) -> None:
    emulator.burst("incident", n=300)
    emulator.max_page_cost = 500
    body, _ = await get_json(
        emulator_client,
        LIST,
        {"sysparm_limit": "300", "sysparm_fields": "sys_id,number"},
        status=500,
    )
    assert body["error"]["message"] == "Transaction cancelled: maximum execution time exceeded"
    rows, _ = await table(
        emulator_client, "incident", sysparm_limit="250", sysparm_fields="sys_id,number"
    )
    assert len(rows) == 250
    # Display values double the cost: 250 rows * 2 fields * 2 > 500.
    await get_json(
        emulator_client,
        LIST,
        {"sysparm_limit": "250", "sysparm_display_value": "all", "sysparm_fields": "sys_id,number"},
        status=500,
    )


async def test_rate_limit_rules(emulator: Emulator, emulator_client: Client) -> None:
    _, headers = await get_json(emulator_client, LIST)
    assert not any(h.lower().startswith("x-ratelimit") for h in headers)
    rule = emulator.rate_limit(limit_per_hour=2, user="admin")
    reset = str((int(emulator.clock.timestamp()) // 3600 + 1) * 3600)
    for _ in range(2):
        _, headers = await get_json(emulator_client, LIST)
        assert (
            headers["X-RateLimit-Limit"],
            headers["X-RateLimit-Reset"],
            headers["X-RateLimit-Rule"],
        ) == ("2", reset, rule)
    async with emulator_client.get(LIST, headers=AUTH) as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == str(int(reset) - int(emulator.clock.timestamp()))
        assert resp.headers["X-RateLimit-Rule"] == rule
        body = await resp.json()
    assert body["error"]["message"] == "Rate limit exceeded"
    assert "2 requests per hour" in body["error"]["detail"]
    # Another user is not limited by a user rule; the next hour starts afresh.
    emulator.add_user("other", "pw")
    other = {"Authorization": aiohttp.encode_basic_auth("other", "pw")}
    _, headers = await get_json(emulator_client, LIST, headers=other)
    assert "X-RateLimit-Limit" not in headers
    emulator.clock.advance(3600)
    await get_json(emulator_client, LIST)


async def test_rule_precedence(emulator: Emulator, emulator_client: Client) -> None:
    emulator.rate_limit(limit_per_hour=100)
    emulator.rate_limit(limit_per_hour=3, role="admin")
    emulator.rate_limit(limit_per_hour=1, role="admin")
    emulator.rate_limit(limit_per_hour=50, role="admin", table="change_request")
    _, headers = await get_json(emulator_client, LIST)
    assert headers["X-RateLimit-Limit"] == "1"  # a role rule beats everyone; lowest role wins
    await get_json(emulator_client, LIST, status=429)
    emulator.rate_limit(limit_per_hour=7, user="admin")
    _, headers = await get_json(emulator_client, LIST)
    assert headers["X-RateLimit-Limit"] == "7"  # a user rule beats role rules
