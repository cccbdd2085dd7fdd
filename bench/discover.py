"""The whole instance (SPEC §15.2): discovery and backfill admission over many small tables.

    python -m bench --case 300x1k-discover        (30x1k-discover: quick look)

One emulator process models an instance (session synchronization by ``JSESSIONID``, 2 nodes)
whose ``sys_db_object`` lists 300 tables of 1,000 incident-like rows (plus the built-in ones).
The daemon lists no table: ``snow.discover`` (``include: [bench_d*]``) finds them, and
``backfill.max.tables: 4`` admits four backfills at a time. Measured: the discovery requests
(``sys_db_object`` pages, readability probes), every Table API request, the wall time from the
first request to every row in Kafka, the daemon's peak RSS; then a table is created through
the emulator's control call and the time until its first page request is taken (bounded by
``interval.seconds``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

import aiohttp

from bench.case import Case, Emulator
from bench.daemon import run_daemon

INTERVAL: Final = 20
MAX_TABLES: Final = 4
RSS_GOAL_MIB: Final = 300

CASES: dict[str, Case] = {
    name: Case(name, tuple((f"bench_d{i:03d}", 1000) for i in range(count)), nodes=2)
    for name, count in (("300x1k-discover", 300), ("30x1k-discover", 30))
}


def _stats(control: str, table: str | None = None) -> dict[str, Any]:
    query = f"?table={table}" if table else ""
    with urllib.request.urlopen(f"{control}/stats{query}", timeout=30) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def run_case(name: str, runs: int, bootstrap: str, workdir: Path) -> dict[str, Any]:
    """One daemon run per ``runs``; the figures of each."""
    case = CASES[name]
    print(f"# {name}: seeding {case.rows} rows", file=sys.stderr, flush=True)
    emulator = Emulator(case)
    tables = [t for t, _ in case.tables]
    results: list[dict[str, Any]] = []
    try:
        for run in range(runs):
            print(f"# {name}: run {run + 1}/{runs}", file=sys.stderr, flush=True)
            results.append(
                asyncio.run(
                    _run(emulator, tables, case.rows, run=run, bootstrap=bootstrap, workdir=workdir)
                )
            )
    finally:
        emulator.close()
    return {"case": name, "tables": len(tables), "rows": case.rows, "runs": results}


async def _run(
    emulator: Emulator, tables: list[str], rows: int, *, run: int, bootstrap: str, workdir: Path
) -> dict[str, Any]:
    before = _stats(emulator.control)
    waited: dict[str, float] = {}
    new = f"bench_dnew{run}"

    async def create_and_wait(_name: str) -> None:
        async with aiohttp.ClientSession() as http:
            body = {"name": new, "rows": 10}
            async with http.post(f"{emulator.url}/emulator/tables", json=body) as response:
                assert response.status == 201, await response.text()
        created = time.perf_counter()
        while _stats(emulator.control, new).get("table_pages", 0) == 0:
            if time.perf_counter() - created > INTERVAL * 3 + 60:
                raise TimeoutError(f"{new} had no page request within {INTERVAL * 3 + 60} s")
            await asyncio.sleep(0.1)
        waited["seconds"] = time.perf_counter() - created

    measured = await run_daemon(
        emulator_url=emulator.url,
        control=emulator.control,
        bootstrap=bootstrap,
        tables=tables,
        expected_rows=rows,
        workdir=workdir,
        extra={"backfill.max.tables": MAX_TABLES},
        discover={"include": ["bench_d*"], "interval.seconds": INTERVAL},
        after=create_and_wait,
        within=3600,
    )
    after = _stats(emulator.control)
    return {
        "wall": measured.wall,
        "rows_per_s": rows / measured.wall if measured.wall > 0 else 0.0,
        "cpu": measured.cpu,
        "peak_rss_mib": measured.peak_rss_mib,
        "requests": after["requests"] - before["requests"],
        "discovery_requests": after["discovery"] - before["discovery"],
        "probes": after["probes"] - before["probes"],
        "new_table_wait": waited.get("seconds"),
    }


def table(result: dict[str, Any]) -> str:
    """Each run's figures, then the memory goal as a check."""
    lines = [f"{result['case']}: {result['tables']} tables, {result['rows']:,} rows"]
    for index, run in enumerate(result["runs"], start=1):
        lines.append(
            f"run {index}: wall {run['wall']:.1f} s ({run['rows_per_s']:.0f} rows/s), "
            f"daemon CPU {run['cpu']:.1f} s, peak RSS {run['peak_rss_mib']:.0f} MiB, "
            f"requests {run['requests']} (discovery: {run['discovery_requests']} sys_db_object "
            f"pages + {run['probes']} probes), new table's first page after "
            f"{run['new_table_wait']:.1f} s (interval.seconds {INTERVAL})"
        )
    peak = max(run["peak_rss_mib"] for run in result["runs"])
    verdict = "met" if peak <= RSS_GOAL_MIB else "MISSED"
    lines.append(f"goal: peak RSS {peak:.0f} MiB <= {RSS_GOAL_MIB} MiB: {verdict}")
    return "\n".join(lines)
