"""The rate budget against the emulator's rate-limit rules (SPEC §15.3), real broker.

A rule's hour is compressed to a few seconds (``RateLimiter.window_seconds``): the emulator then
allows N requests per window and names the window's end in ``X-RateLimit-Reset``, as a real
instance does for its hour. The daemon must meet no 429 from the rule and still spend most of
the budget; a configured ``snow.http.max.requests.per.hour`` paces the same way without headers;
and a streaming table's polls are not held back by a backfill that the budget binds.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from snowsource.config.models import Settings
from snowsource.emulator.journal import Request
from snowsource.emulator.ratelimit import RateLimitRule
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, running, settings_from
from tests.polling import poll_until

WINDOW = 8  # seconds of emulator time per rate-limit "hour"
LIMIT = 60  # requests per window
HEADROOM = 0.1

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _window_of(request: Request) -> int:
    return int(request.at.timestamp() // WINDOW)


def _table_requests(env: Env) -> list[Request]:
    return [r for r in env.emu.journal if r.table is not None]


async def _windows_passed(env: Env, first: int, count: int) -> None:
    await poll_until(
        lambda: int(env.emu.clock.timestamp() // WINDOW) >= first + count,
        timeout=WINDOW * (count + 2),
        interval=0.2,
    )


async def test_an_announced_rule_is_never_hit_and_mostly_spent(env: Env) -> None:
    emu = env.emu
    emu.instance.configure(enabled=False)  # the 429s counted here are the rule's only
    emu.rate_limiter.window_seconds = WINDOW
    emu.rate_limiter.add(RateLimitRule(sys_id="rule1", limit_per_hour=LIMIT))
    emu.seed(tables=("incident",), rows=2000)
    settings = _settings(
        env,
        {"incident": {"name": "incident", "batch.size": 10}},
        {"rate.limit.headroom": HEADROOM},
        **{"backfill.slices": 4},
    )
    async with running(settings):
        first = int(emu.clock.timestamp() // WINDOW)
        await _windows_passed(env, first, 4)
    requests = _table_requests(env)
    refused = [r for r in requests if r.status == 429]
    assert not refused, f"{len(refused)} request(s) met the rule's 429"
    per_window = Counter(_window_of(r) for r in requests)
    # Whole windows only: the first began before the daemon, the last is cut by the stop.
    whole = [per_window[w] for w in range(first + 1, first + 4)]
    allowance = LIMIT * (1 - HEADROOM)
    assert all(n <= LIMIT for n in whole), whole
    assert all(n >= 0.85 * allowance for n in whole), (whole, allowance)


async def test_a_configured_budget_paces_without_headers(env: Env) -> None:
    emu = env.emu
    emu.seed(tables=("incident",), rows=2000)
    per_hour = 7200  # two a second, 1.8 after the headroom
    settings = _settings(
        env,
        {"incident": {"name": "incident", "batch.size": 10}},
        {"max.requests.per.hour": per_hour, "rate.limit.headroom": 0.1},
        **{"backfill.slices": 4},
    )
    async with running(settings):
        await poll_until(lambda: len(_table_requests(env)) >= 40, timeout=60, interval=0.2)
    requests = _table_requests(env)
    span = requests[-1].wall - requests[0].wall
    rate = per_hour * 0.9 / 3600
    burst = settings.snow.http.max_concurrent_requests
    # At most the paced rate over the span plus one burst, and not much below it either.
    assert len(requests) <= rate * span + burst + 1
    assert len(requests) >= 0.85 * rate * span


async def test_a_streaming_table_polls_on_time_while_the_budget_binds_a_backfill(
    env: Env,
) -> None:
    emu = env.emu
    emu.instance.configure(enabled=False)
    emu.rate_limiter.window_seconds = WINDOW
    emu.rate_limiter.add(RateLimitRule(sys_id="rule1", limit_per_hour=LIMIT))
    emu.seed(tables=("incident", "change_request"), rows=2000)
    # change_request is caught up before the budget binds: its offset starts at the end.
    settings = env.settings(
        {
            "big": {"name": "incident", "batch.size": 10},
            "live": {"name": "change_request", "start.timestamp": "2030-01-01 00:00:00"},
        },
        **{"backfill.slices": 4, "poll.interval.ms": 1000},
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "live"), timeout=30)
        first = int(emu.clock.timestamp() // WINDOW)
        await _windows_passed(env, first, 3)
    polls = sorted(r.wall for r in emu.journal if r.table == "change_request")
    later = [t for t in polls if t >= polls[0] + WINDOW]
    gaps = [b - a for a, b in itertools.pairwise(later)]
    assert gaps, "the streaming table stopped polling"
    # Its poll interval is 1 s; a sweep is one page. Granted first, it waits for no backfill
    # page: a gap stays near the interval even though the backfill spends the whole budget.
    assert max(gaps) < 2.5, gaps
    assert not [r for r in emu.journal if r.status == 429]


def _settings(
    env: Env, tables: dict[str, dict[str, Any]], http: dict[str, Any], **top: Any
) -> Settings:
    """The test's settings with extra ``snow.http`` keys."""
    document = env.document(tables, **top)
    document["snow"]["http"].update(http)
    return settings_from(env.tmp_path, document)
