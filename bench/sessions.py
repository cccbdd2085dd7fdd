"""Real-instance concurrency (SPEC §14.1): the session pool beside the two patterns peers use.

    python -m bench --case 8x20k@250ms-sessions [--runs N]    (8x2k@250ms-sessions: quick look)

One emulator process models an instance (session synchronization by ``JSESSIONID``, 2 nodes
with 4 API threads each) and adds 250 ms to every page. Three readers page 8 tables x 20,000
rows, 100 rows a page (latency-bound, as on an instance), at most 8 requests in flight:

- **cookie-less pager**: a bare aiohttp pager that keeps no cookie, so every request opens a
  new session on the instance (the Go bridge's pattern);
- **one-session pager**: the same pager with one cookie jar, as a default HTTP client keeps it:
  every request is in one session, which the instance serves one at a time (stopped after
  20 s: a full run would take 1,600 x 250 ms);
- **daemon**: ``snowsource run`` with ``max.concurrent.requests: 8`` (its session pool).

Per reader, from the emulator's statistics (reset before each run, and for the daemon again at
its first page request, from where its run is timed: its start-up is not paging): effective
concurrency = the seconds requests were served (holding a node thread) over the wall time from
the first served request to the last, sessions opened, 202 and 429 answers; rows/s from the
reader's own clock (the daemon's: first page request to every row in Kafka). The goals are
printed as checks.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench.case import Case, Emulator
from bench.daemon import run_daemon

K = 8
NODES = 2
THREADS_PER_NODE = 4
# Small pages keep every reader latency-bound on a 2-core machine that also runs the emulator
# and Kafka (1,000-row pages would make the daemon CPU-bound first): the case is about sessions.
BATCH = 100
# The one-session pager is served one page at a time: stopped after this long, rows/s so far.
ONE_SESSION_SECONDS = 20.0

CASES: dict[str, Case] = {
    "8x20k@250ms-sessions": Case(
        "8x20k@250ms-sessions",
        tuple((f"bench_s{i}", 20_000) for i in range(8)),
        latency_ms=250,
        nodes=NODES,
    ),
    "8x2k@250ms-sessions": Case(
        "8x2k@250ms-sessions",
        tuple((f"bench_s{i}", 2_000) for i in range(8)),
        latency_ms=250,
        nodes=NODES,
    ),
}

READERS = ("cookie-less pager", "one-session pager", "daemon")


def _statistics(url: str, method: str = "GET") -> dict[str, Any]:
    request = urllib.request.Request(f"{url}/emulator/statistics", method=method)
    with urllib.request.urlopen(request, timeout=30) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def _pager(url: str, tables: list[str], cookies: str) -> dict[str, float]:
    limit = ("--seconds", str(ONE_SESSION_SECONDS)) if cookies == "one-session" else ()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench.pager", url, *tables),
            *("--concurrency", str(K), "--cookies", cookies, "--batch", str(BATCH), *limit),
        ],
        capture_output=True,
        check=False,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.pager failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


_COUNTS = ("sessions_opened", "responses_202", "responses_429")


def _measured(
    url: str, rows: int, wall: float, earlier: dict[str, Any] | None = None
) -> dict[str, float]:
    """The reader's figures; ``earlier`` holds the counts taken before a mid-run reset."""
    seen = _statistics(url)
    window = seen["window_seconds"] or 1e-9
    counts = {key: seen[key] + (earlier or {}).get(key, 0) for key in _COUNTS}
    return {
        "rows": rows,
        "wall": wall,
        "rows_per_s": rows / wall if wall > 0 else 0.0,
        "effective_concurrency": seen["served_seconds"] / window,
        "peak_in_flight": seen["peak_in_flight"],
        **counts,
    }


def run_case(name: str, runs: int, bootstrap: str, workdir: Path) -> dict[str, Any]:
    """Every reader ``runs`` times; raw figures per reader."""
    case = CASES[name]
    print(f"# {name}: seeding {case.rows} rows", file=sys.stderr, flush=True)
    emulator = Emulator(case)
    tables = [t for t, _ in case.tables]
    out: dict[str, Any] = {"case": name, "rows": case.rows, **{r: [] for r in READERS}}
    try:
        for run in range(runs):
            for reader in READERS:
                print(f"# {name}: run {run + 1}/{runs}: {reader}", file=sys.stderr, flush=True)
                _statistics(emulator.url, "DELETE")
                earlier: dict[str, Any] = {}
                if reader == "daemon":

                    async def reset(
                        url: str = emulator.url, kept: dict[str, Any] = earlier
                    ) -> None:
                        # Timed from the daemon's first page, as its rows/s: its start-up
                        # (Kafka, topics, the clock probe) is not paging. Counts run on.
                        kept.update(await asyncio.to_thread(_statistics, url, "DELETE"))

                    measured = asyncio.run(
                        run_daemon(
                            emulator_url=emulator.url,
                            control=emulator.control,
                            bootstrap=bootstrap,
                            tables=tables,
                            expected_rows=case.rows,
                            workdir=workdir,
                            batch=BATCH,
                            on_first_page=reset,
                        )
                    )
                    rows, wall = measured.rows, measured.wall
                else:
                    cookies = "none" if reader == "cookie-less pager" else "one-session"
                    paged = _pager(emulator.url, tables, cookies)
                    rows, wall = int(paged["rows"]), paged["wall"]
                out[reader].append(_measured(emulator.url, rows, wall, earlier))
    finally:
        emulator.close()
    return out


def _median(result: dict[str, Any], reader: str, key: str) -> float:
    return float(statistics.median(float(r[key]) for r in result[reader]))


def table(result: dict[str, Any]) -> str:
    """The three readers side by side, then the goals of SPEC §14.1 as checks."""
    figures = (
        ("rows/s", "rows_per_s", "{:.0f}"),
        ("wall s", "wall", "{:.2f}"),
        ("effective concurrency", "effective_concurrency", "{:.2f}"),
        ("sessions opened", "sessions_opened", "{:.0f}"),
        ("peak in flight", "peak_in_flight", "{:.0f}"),
        ("202 answers", "responses_202", "{:.0f}"),
        ("429 answers", "responses_429", "{:.0f}"),
    )
    header = ["figure (median)", *READERS]
    rows = [header] + [
        [label, *(fmt.format(_median(result, r, key)) for r in READERS)]
        for label, key, fmt in figures
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    goal = 0.9 * min(K, NODES * THREADS_PER_NODE)
    concurrency = _median(result, "daemon", "effective_concurrency")
    sessions = _median(result, "daemon", "sessions_opened")
    ratio = _median(result, "daemon", "rows_per_s") / _median(
        result, "cookie-less pager", "rows_per_s"
    )
    checks = (
        (f"effective concurrency {concurrency:.2f} >= {goal:.1f}", concurrency >= goal),
        (f"sessions opened {sessions:.0f} <= K + 2 = {K + 2}", sessions <= K + 2),
        (f"rows/s {ratio:.2f} x the cookie-less pager's >= 0.90", ratio >= 0.9),
    )
    lines += [f"goal: {text}: {'met' if ok else 'MISSED'}" for text, ok in checks]
    return "\n".join(lines)
