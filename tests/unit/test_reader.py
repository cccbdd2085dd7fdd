"""A table's requests: the page size after "maximum execution time exceeded" (SPEC §9)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.core.cursor import Position
from snowsource.core.retry import GROW_AFTER_SUCCESSES, RetryPolicy
from snowsource.emulator import Emulator, serve
from snowsource.engine.reader import TableReader
from snowsource.engine.snow_requests import SnowRequests
from tests.fakes import make_spec

T0 = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)
HI = "2026-09-29 07:00:00"
EXPENSIVE = "Transaction cancelled: maximum execution time exceeded"


@pytest.fixture
async def reader_and_emulator() -> AsyncIterator[tuple[TableReader, Emulator]]:
    emu = Emulator(seed=3, now=T0)
    emu.seed(tables=("incident",), rows=5)
    async with (
        serve(emu) as url,
        ServiceNowClient(url, BasicAuth("admin", SecretStr("admin"))) as client,
    ):
        stop = asyncio.Event()
        requests = SnowRequests(
            client, alias="incident", retry=RetryPolicy(0.001, 0.002), stop=stop
        )
        reader = TableReader(make_spec(snow_url=url, batch_size=100), requests, stop=stop)
        yield reader, emu


async def _pages(reader: TableReader, n: int) -> None:
    for _ in range(n):
        await reader.page(Position("1970-01-01 00:00:00", ""), HI)


async def test_a_too_expensive_page_is_asked_again_at_half_the_size(
    reader_and_emulator: tuple[TableReader, Emulator],
) -> None:
    reader, emu = reader_and_emulator
    emu.faults.add(status=500, message=EXPENSIVE, table="incident")
    page, limit = await reader.page(Position("1970-01-01 00:00:00", ""), HI)
    assert (limit, reader.sizer.size) == (50, 50)
    assert len(page.rows) == 5
    await _pages(reader, GROW_AFTER_SUCCESSES - 1)
    assert reader.sizer.size == 100, "20 good pages in a row double it back"


async def test_a_failed_request_breaks_the_run_of_good_pages(
    reader_and_emulator: tuple[TableReader, Emulator],
) -> None:
    reader, emu = reader_and_emulator
    emu.faults.add(status=500, message=EXPENSIVE, table="incident")
    await _pages(reader, GROW_AFTER_SUCCESSES - 1)
    emu.faults.add(status=503, table="incident")  # retried, and the streak starts again
    await _pages(reader, 1)
    assert reader.sizer.size == 50
    await _pages(reader, GROW_AFTER_SUCCESSES - 1)
    assert reader.sizer.size == 100
