"""Three group members share one rate budget (SPEC §15.3): the instance's rule counts per user,
and every member is the same integration user, so each takes budget ÷ live members.

Three ``snowsource run`` processes of one connector (``tasks.assignment: group``) backfill three
tables against an emulator whose rule allows ``LIMIT`` requests per compressed "hour". Counted
at the emulator over the windows once all three run: no 429, no window over the limit, and most
of the allowance spent: each member spends its third of it, so the group spends the thirds of
the members the group gave tables to (rendezvous hashing may leave one without).
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import pytest

from snowsource.emulator.ratelimit import RateLimitRule
from tests.integration.conftest import Env
from tests.integration.engine import write_config
from tests.integration.processes import start_run
from tests.polling import poll_until

WINDOW = 8
LIMIT = 60
ALIASES = tuple(f"ends{digit}" for digit in range(1, 10))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_three_members_share_one_budget(env: Env) -> None:
    emu = env.emu
    emu.instance.configure(enabled=False)
    emu.rate_limiter.window_seconds = WINDOW
    emu.rate_limiter.add(RateLimitRule(sys_id="rule1", limit_per_hour=LIMIT))
    emu.seed(tables=("incident",), rows=3000)
    document = env.document(
        {
            alias: {"name": "incident", "query": f"numberENDSWITH{alias[-1]}", "batch.size": 5}
            for alias in ALIASES
        },
        **{"tasks.assignment": "group", "group.session.timeout.ms": 6000},
    )
    config = write_config(env.tmp_path / "group.yaml", document)
    logs = [env.tmp_path / f"member{i}.log" for i in range(3)]
    procs = [await start_run(config, log) for log in logs]
    try:

        def settled() -> bool:
            # Every member joined, and every table runs somewhere.
            texts = [log.read_text() for log in logs]
            return all('"event": "group member"' in text for text in texts) and all(
                _started(alias, texts) for alias in ALIASES
            )

        await poll_until(settled, timeout=90, interval=0.5)
        first = int(emu.clock.timestamp() // WINDOW) + 1
        await poll_until(
            lambda: emu.clock.timestamp() // WINDOW >= first + 3, timeout=60, interval=0.2
        )
        working = sum(1 for log in logs if '"event": "tables started"' in log.read_text())
        assert all(p.returncode is None for p in procs)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), timeout=90)
    requests = [r for r in emu.journal if r.table is not None]
    refused = [r for r in requests if r.status == 429]
    assert not refused, f"{len(refused)} request(s) met the rule's 429"
    per_window = Counter(int(r.at.timestamp() // WINDOW) for r in requests)
    whole = [per_window[w] for w in range(first, first + 3)]
    assert all(n <= LIMIT for n in whole), whole
    assert all(n >= 0.85 * LIMIT * 0.9 * working / 3 for n in whole), (whole, working)


def _started(alias: str, texts: list[str]) -> bool:
    return any(f'"{alias}"' in text and '"event": "tables started"' in text for text in texts)
