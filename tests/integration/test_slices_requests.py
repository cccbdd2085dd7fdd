"""Request efficiency of a sliced backfill (SPEC §15.3): at most 1.05 keyset page requests per
full page of rows it delivers, counted at the emulator's journal (every keyset page request of
the table from the backfill's first to its last; the clock probe is no page request).

The emulator's clock is fixed, so the sweep after the backfill (one pager, up to the same HI)
reads nothing new: it asks exactly one page, which is taken off the count.
"""

from __future__ import annotations

import pytest

from snowsource.core.cursor import format_ts
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, committed_stream, read_topic, running
from tests.polling import poll_until

PAGE = 500


def _page_requests(env: Env) -> int:
    """Keyset page requests of the table (not counts, not the clock probe)."""
    return sum(
        1
        for request in env.emu.journal.for_table("incident")
        if "ORDERBY" in request.params.get("sysparm_query", "")
        and request.params.get("sysparm_limit") == str(PAGE)
    )


async def _backfill_requests(env: Env, rows: int, slices: int) -> float:
    """Requests per full page of rows of a sliced backfill of ``rows`` rows."""
    env.emu.clock.follow_wall_clock(False)
    env.emu.seed(("incident",), rows=rows)
    total = len(env.emu.rows("incident"))
    settings = env.settings(
        {"incident": {"name": "incident", "poll.interval.ms": 3_600_000}},
        **{"backfill.slices": slices, "batch.size": PAGE},
    )
    env.emu.journal.clear()
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=180, interval=0.5)
        await poll_until(committed_stream(daemon, "incident"), timeout=60)
        requests = _page_requests(env) - 1  # the sweep after the backfill: one page

    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert len({r.key for r in records}) == total
    assert format_ts(env.emu.clock.now())  # the clock did not move: one HI throughout
    return requests / (total / PAGE)


@pytest.mark.parametrize(("rows", "slices"), [(20_000, 4), (24_000, 4), (40_000, 8)])
async def test_a_uniform_table_costs_at_most_1_05_requests_a_page(
    env: Env, rows: int, slices: int
) -> None:
    ratio = await _backfill_requests(env, rows, slices=slices)
    # Ranges placed by their first pages end on whole pages: however the slices' pages
    # interleave (a loaded machine changes which slice splits which range), the bound holds.
    assert ratio <= 1.05, f"{ratio:.3f} requests per page of rows"


async def test_a_table_of_a_few_pages_costs_at_most_1_05_requests_a_page(env: Env) -> None:
    # 2,000 rows, four pages: 1.05 a page leaves no request beyond them (before: ten).
    ratio = await _backfill_requests(env, 2_000, slices=4)
    assert ratio <= 1.05, f"{ratio:.3f} requests a page"
