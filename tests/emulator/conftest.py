"""Fixtures for tests that drive the ServiceNow emulator.

- ``emulator``: an :class:`Emulator` with a fixed clock (``FIXED_NOW``), seed 7, user
  ``admin``/``admin`` in America/Los_Angeles with date format ``MM/dd/yyyy hh:mm:ss a``. Nothing
  seeded: each test creates or seeds what it needs.
- ``emulator_url``: the same emulator served on a free port via ``serve`` (closed at teardown).
- ``emulator_client``: an in-process aiohttp ``TestClient`` for the emulator's app.

Helpers for requests: ``AUTH`` (Basic admin/admin headers) and ``get_json``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from snowsource.emulator import Emulator, make_app, serve

FIXED_NOW = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)
AUTH: dict[str, str] = {"Authorization": aiohttp.encode_basic_auth("admin", "admin")}

Client = TestClient[web.Request, web.Application]


@pytest.fixture
def emulator() -> Emulator:
    """An emulator with a fixed clock at ``FIXED_NOW`` and the default admin user."""
    return Emulator(seed=7, now=FIXED_NOW)


@pytest.fixture
async def emulator_url(emulator: Emulator) -> AsyncIterator[str]:
    """``emulator`` served on a free local port; yields its base URL."""
    async with serve(emulator) as url:
        yield url


@pytest.fixture
async def emulator_client(emulator: Emulator) -> AsyncIterator[Client]:
    """An in-process test client for ``emulator``'s app."""
    async with TestClient(TestServer(make_app(emulator))) as client:
        yield client


async def get_json(
    client: Client,
    path: str,
    params: Mapping[str, str] | None = None,
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> tuple[Any, Mapping[str, str]]:
    """GET ``path`` (admin Basic auth unless ``headers`` given), assert ``status``, decode JSON."""
    async with client.get(
        path, params=params, headers=AUTH if headers is None else headers
    ) as resp:
        body = await resp.read()
        assert resp.status == status, body
        return orjson.loads(body), resp.headers


async def table(client: Client, name: str, **params: str) -> tuple[list[Any], Mapping[str, str]]:
    """A successful list request on ``/api/now/table/{name}``: (result list, headers)."""
    body, headers = await get_json(client, f"/api/now/table/{name}", params)
    result = body["result"]
    assert isinstance(result, list)
    return result, headers
