"""The emulator in its own process, seeded for one benchmark case.

    python -m bench.emulator_proc --table incident=50000 [--table t01=2000 ...] [--latency-ms 200]
        [--nodes 2] [--no-instance-model] [--rate-limit N --rate-window SECONDS]

``incident`` is seeded by the emulator's own ``seed``; any other name becomes a table shaped
like ``incident`` (a child of ``task`` with incident's columns) filled with incident-like rows
(a name containing ``skew``: 90 % of them updated in the last tenth of the 30 days).
Prints one JSON line ``{"url", "control", "seed_seconds", "index_seconds"}`` when ready, then
serves until stdin closes. ``GET <control>/stats`` answers the Table API request count, the
page request count and this process's CPU seconds, so the driver can tell when the daemon's
first request and first page arrived and how much CPU the emulator spent serving a run.

The emulator models an instance (SPEC §14.1) unless ``--no-instance-model``: sessions by
``JSESSIONID``, ``--nodes`` nodes with 4 API threads each; ``<url>/emulator/statistics`` has
what it saw (sessions opened, requests in flight, served time).

``--rate-limit N`` adds a rate-limit rule of N requests "per hour" for every user, whose hour
is compressed to ``--rate-window`` seconds (``X-RateLimit-Reset`` names each window's end);
``/stats`` then also counts the 429 answers and the Table API requests per window.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import re
import sys
import time
from datetime import UTC, datetime, timedelta

import orjson
from aiohttp import web

from snowsource.emulator import Emulator, seeding, serve
from snowsource.emulator.clock import stamp
from snowsource.emulator.journal import Request
from snowsource.emulator.ratelimit import RateLimitRule


def _seed_like_incident(
    emu: Emulator, name: str, rows: int, rng: random.Random, *, skewed: bool = False
) -> None:
    """``skewed``: 90 % of the rows updated in the last tenth of the 30 days (a table whose rows
    sit mostly in the last days, as the parallel backfill's work stealing must handle)."""
    incident = emu.tables["incident"]
    emu.create_table(name, {f.name: f for f in incident.own_fields}, parent="task")
    users = [u["sys_id"] for u in emu.rows("sys_user")]
    now = emu.clock.now()
    span = 30 * 86400
    for _ in range(rows):
        if skewed:
            recent = rng.random() < 0.9
            age = rng.uniform(60, span / 10) if recent else rng.uniform(span / 10, span)
            updated = now - timedelta(seconds=age)
            created = updated - timedelta(seconds=rng.uniform(0, 3600))
        else:
            created = now - timedelta(seconds=rng.uniform(60, span))
            updated = created + timedelta(
                seconds=rng.uniform(0, (now - created).total_seconds() - 30)
            )
        values = seeding.incident_values(rng, users, [], created)
        values.update(sys_updated_on=stamp(updated), sys_mod_count=str(rng.randint(0, 8)))
        emu.insert(name, values, at=created, visible_at=updated)


def _per_window(emu: Emulator, requests: list[Request]) -> dict[str, int]:
    if not emu.rate_limiter.rules:
        return {}
    width = emu.rate_limiter.window_seconds
    counts: dict[str, int] = {}
    for request in requests:
        key = str(int(request.at.timestamp() // width))
        counts[key] = counts.get(key, 0) + 1
    return counts


_HI = re.compile(r"<=(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


_KEYSET = re.compile(r"ORDERBY(?!sys_id\b)\w+\^ORDERBYsys_id")


def _keyset_page(request: Request) -> bool:
    """Whether ``request`` is a keyset page of a table (SPEC §5's query)."""
    query = request.params.get("sysparm_query", "")
    return "/stats/" not in request.path and _KEYSET.search(query) is not None


def _backfill_pages(requests: list[Request], table: str) -> int:
    """The keyset page requests of ``table``'s backfill among ``requests`` (SPEC §15.3: every
    page request from the backfill's first to its last): those up to the first page's
    high-water mark. Every page of one backfill, sliced or not, has the same one; the sweep and
    the polls after it have later ones (the emulator's clock follows the wall clock here)."""
    pages = [
        r
        for r in requests
        if r.table == table
        and "/stats/" not in r.path  # not the Aggregate API's counts
        and "ORDERBY" in r.params.get("sysparm_query", "")
    ]
    marks = [_HI.search(r.params["sysparm_query"]) for r in pages]
    if not marks or marks[0] is None:
        return 0
    first = marks[0].group(1)
    return sum(1 for mark in marks if mark is not None and mark.group(1) == first)


async def _serve(emu: Emulator, report: dict[str, float]) -> None:
    async def stats(request: web.Request) -> web.Response:
        table_requests = [r for r in emu.journal if r.table]
        body = {
            "requests": len(table_requests),
            # Keyset pages: ordered by a timestamp, then sys_id. Not the clock probe (no query),
            # not the Aggregate API's counts, not the dictionary reads before the first page
            # nor a key sweep's pages (ordered by sys_id alone).
            "pages": sum(1 for r in table_requests if _keyset_page(r)),
            "cpu": time.process_time(),
            "responses_429": sum(1 for r in table_requests if r.status == 429),
            # Requests per rate-limit window (emulator epoch // window), when a rule is set.
            "per_window": _per_window(emu, table_requests),
            # snow.discover's own requests: sys_db_object pages and readability probes.
            "discovery": sum(1 for r in table_requests if r.table == "sys_db_object"),
            "probes": sum(
                1
                for r in table_requests
                if r.params.get("sysparm_fields") == "sys_id" and "sysparm_query" not in r.params
            ),
        }
        wanted = request.query.get("table")
        if wanted:
            body["table_pages"] = sum(
                1 for r in table_requests if r.table == wanted and "sysparm_query" in r.params
            )
            since = int(request.query.get("since", "0"))
            body["backfill_pages"] = _backfill_pages(table_requests[since:], wanted)
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    control = web.Application()
    control.router.add_get("/stats", stats)
    runner = web.AppRunner(control, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    control_port = runner.addresses[0][1]
    try:
        async with serve(emu) as url:
            print(
                orjson.dumps(
                    {"url": url, "control": f"http://127.0.0.1:{control_port}", **report}
                ).decode(),
                flush=True,
            )
            # Serve until the driver closes our stdin (or dies).
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--table", action="append", default=[], help="NAME=ROWS")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--no-instance-model", action="store_true")
    parser.add_argument("--rate-limit", type=int, default=0)
    parser.add_argument("--rate-window", type=float, default=3600.0)
    args = parser.parse_args()
    emu = Emulator(seed=3, now=datetime.now(UTC) - timedelta(seconds=5))
    emu.clock.follow_wall_clock(True)
    emu.latency_ms = args.latency_ms
    emu.instance.configure(enabled=not args.no_instance_model, nodes=args.nodes)
    if args.rate_limit:
        emu.rate_limiter.window_seconds = args.rate_window
        emu.rate_limiter.add(RateLimitRule(sys_id="bench-rule", limit_per_hour=args.rate_limit))
    started = time.process_time()
    rng = random.Random(11)
    tables = []
    for spec in args.table:
        name, _, count = spec.partition("=")
        tables.append(name)
        if name == "incident":
            emu.seed(tables=("incident",), rows=int(count))
        else:
            _seed_like_incident(emu, name, int(count), rng, skewed="skew" in name)
    seeded = time.process_time()
    # The first keyset page of a table builds its index; build it now so every run (the
    # first one too) measures the steady state. Reported separately.
    for name in tables:
        next(emu.store.read_ordered(name, "sys_updated_on", float("inf"), None), None)
    indexed = time.process_time()
    # Seeded rows live as long as the process: keep the collector from rescanning them.
    gc.freeze()
    report = {"seed_seconds": seeded - started, "index_seconds": indexed - seeded}
    asyncio.run(_serve(emu, report))


if __name__ == "__main__":
    main()
