"""``GET /console`` and its assets over HTTP: headers, the token rule, ``rest.console: false``, and
the two metrics the dashboard and alerts added (``snowsource_ready``, offset commit latency)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import resources

import pytest
from aiohttp import ClientSession
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from snowsource.api.console import ASSETS, CONTENT_SECURITY_POLICY
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, running
from tests.integration.test_rest import rest_of, rest_settings
from tests.polling import poll_until

pytestmark = pytest.mark.kafka

TOKEN = "console-routes-tok-not-a-real-secret"
TYPES = {
    "index.html": "text/html",
    "console.css": "text/css",
    "console.js": "text/javascript",
    "icon.svg": "image/svg+xml",
}


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession() as session:
        yield session


async def test_assets_are_served_with_a_strict_policy_and_without_a_token(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=10)
    settings = rest_settings(env, {"incident": {"name": "incident"}}, rest={"auth.token": TOKEN})
    async with running(settings) as daemon:
        root = rest_of(daemon).url
        package = resources.files("snowsource.api.console")
        for path, (name, _) in ASSETS.items():
            async with http.get(f"{root}{path}") as resp:
                assert resp.status == 200, path
                assert resp.content_type == TYPES[name]
                assert resp.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
                assert resp.headers["X-Content-Type-Options"] == "nosniff"
                assert await resp.read() == package.joinpath(name).read_bytes()
        assert "default-src 'self'" in CONTENT_SECURITY_POLICY
        assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
        # The page is open so that it can ask for the token; the API behind it is not.
        async with http.get(f"{root}/connectors") as resp:
            assert resp.status == 401
        async with http.get(f"{root}/console/other.js") as resp:
            assert resp.status == 401  # only the assets are open


async def test_rest_console_false_serves_no_page(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident",), rows=10)
    settings = rest_settings(env, {"incident": {"name": "incident"}}, rest={"console": False})
    async with running(settings) as daemon:
        root = rest_of(daemon).url
        for path in ASSETS:
            async with http.get(f"{root}{path}") as resp:
                assert resp.status == 404, path
        async with http.get(f"{root}/connectors") as resp:
            assert resp.status == 200


async def scrape(http: ClientSession, root: str) -> dict[str, Metric]:
    async with http.get(f"{root}/metrics") as resp:
        return {f.name: f for f in text_string_to_metric_families(await resp.text())}


async def ready_now(http: ClientSession, root: str) -> bool:
    async with http.get(f"{root}/health/ready") as resp:
        return resp.status == 200


async def test_metrics_carry_readiness_and_offset_commit_latency(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        root = rest_of(daemon).url
        await poll_until(caught_up(daemon, "incident"))
        await poll_until(lambda: daemon.pollers["incident"].status.committed is not None)
        families = await scrape(http, root)
        assert await ready_now(http, root)
        assert [s.value for s in families["snowsource_ready"].samples] == [1.0]
        count = next(
            s.value
            for s in families["snowsource_offset_commit_seconds"].samples
            if s.name == "snowsource_offset_commit_seconds_count"
        )
        assert count >= 1


async def test_ready_gauge_is_zero_while_ready_answers_503(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident",), rows=20)
    env.emu.deny_table("admin", "incident")
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        root = rest_of(daemon).url
        await poll_until(lambda: daemon.pollers["incident"].status.state == "FAILED")
        assert not await ready_now(http, root)
        families = await scrape(http, root)
        assert [s.value for s in families["snowsource_ready"].samples] == [0.0]
