"""A rate-limited instance (SPEC §15.3): no 429 from the rule, and most of the budget spent.

    python -m bench --case 1x20k-ratelimited [--runs N]

One emulator process with a rate-limit rule of ``LIMIT`` requests per "hour" compressed to
``WINDOW`` seconds: it sends ``X-RateLimit-Limit``/``-Reset`` with every answer and answers 429
past the limit, as an instance does per hour. The daemon backfills one table (100 rows a page,
4 slices: far more requests than the budget allows) with the default headroom (0.1). From the
emulator's journal: the 429 answers (goal: none), and the requests of each whole window (the
first, begun before the daemon, and the last, cut by the end of the run, are left out) as a
share of the allowance ``LIMIT x 0.9`` (goal: at least 85 %) and of the limit.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench.case import Case, Emulator
from bench.daemon import run_daemon

LIMIT = 60
WINDOW = 10.0
HEADROOM = 0.1
BATCH = 100

CASES: dict[str, Case] = {
    "1x20k-ratelimited": Case(
        "1x20k-ratelimited", (("incident", 20_000),), rate_limit=LIMIT, rate_window=WINDOW
    ),
}


def _stats(control: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{control}/stats", timeout=30) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def run_case(name: str, runs: int, bootstrap: str, workdir: Path) -> dict[str, Any]:
    """The daemon ``runs`` times; per run its 429s and requests per whole window."""
    case = CASES[name]
    print(f"# {name}: seeding {case.rows} rows", file=sys.stderr, flush=True)
    emulator = Emulator(case)
    out: dict[str, Any] = {"case": name, "rows": case.rows, "runs": []}
    try:
        for run in range(runs):
            print(f"# {name}: run {run + 1}/{runs}", file=sys.stderr, flush=True)
            before = _stats(emulator.control)
            measured = asyncio.run(
                run_daemon(
                    emulator_url=emulator.url,
                    control=emulator.control,
                    bootstrap=bootstrap,
                    tables=[t for t, _ in case.tables],
                    expected_rows=case.rows,
                    workdir=workdir,
                    batch=BATCH,
                    extra={"backfill.slices": 4},
                )
            )
            after = _stats(emulator.control)
            windows = {
                key: count - before["per_window"].get(key, 0)
                for key, count in after["per_window"].items()
            }
            ran = sorted(key for key, count in windows.items() if count > 0)
            whole = [windows[key] for key in ran[1:-1]]
            out["runs"].append(
                {
                    "wall": measured.wall,
                    "responses_429": after["responses_429"] - before["responses_429"],
                    "whole_windows": whole,
                }
            )
    finally:
        emulator.close()
    return out


def table(result: dict[str, Any]) -> str:
    """The printed report with its checks."""
    allowance = LIMIT * (1 - HEADROOM)
    lines = [
        f"case {result['case']}: {result['rows']} rows, rule {LIMIT} requests per "
        f"{WINDOW:g} s window, headroom {HEADROOM} (allowance {allowance:g} per window)"
    ]
    for i, run in enumerate(result["runs"], 1):
        whole = run["whole_windows"]
        used = [n / allowance for n in whole]
        lines.append(
            f"run {i}: {run['wall']:.1f} s, 429 answers {run['responses_429']}, requests per "
            f"whole window {whole}"
        )
        if used:
            low, mean = min(used), sum(used) / len(used)
            lines.append(
                f"  budget used: min {low:.1%}, mean {mean:.1%} of the allowance "
                f"({max(whole) / LIMIT:.1%} of the limit at most)"
            )
            lines.append(f"  check: no 429: {'PASS' if run['responses_429'] == 0 else 'FAIL'}")
            lines.append(f"  check: >= 85 % of the allowance: {'PASS' if low >= 0.85 else 'FAIL'}")
    return "\n".join(lines)
