"""The benchmark driver: cases, runs, statistics and the printed table.

    python -m bench [--quick] [--runs N] [--case NAME ...] [--bootstrap HOST:PORT] [--json PATH]

``--case 8x20k@250ms-sessions`` runs only the real-instance concurrency case (bench/sessions.py);
the full suite runs it after its other cases. ``--case 1x200k@250ms-slices`` runs the parallel
backfill case (bench/slices.py), which the full suite leaves out (it takes minutes),
``--case 1x50k-avro`` the Schema Registry output case (bench/avro.py), and
``--case 1x20k-ratelimited`` the rate-budget case (bench/ratelimit.py).

For each case one emulator process is seeded; then, N times each, (a) the bare pager, (b) bare
aiokafka produce (and the sink's batch path, b'), (c) the daemon. Each figure is printed as the
median and the min-max of its runs. The bootstrap defaults to ``127.0.0.1:$KAFKA_PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import avro, discover, eos, ratelimit, sessions, slices
from bench.case import Case, Emulator
from bench.daemon import DaemonRun, run_daemon


def _many(count: int, rows: int) -> tuple[tuple[str, int], ...]:
    return tuple((f"bench_t{i:02d}", rows) for i in range(count))


FULL = (
    Case("1x50k", (("incident", 50_000),)),
    Case("10x10k", _many(10, 10_000)),
    Case("1x20k@200ms", (("incident", 20_000),), latency_ms=200),
    Case("10x2k@200ms", _many(10, 2_000), latency_ms=200),
    Case("50x2k", _many(50, 2_000)),
    Case("1x1M", (("incident", 1_000_000),)),
)
QUICK = (
    Case("1x5k", (("incident", 5_000),)),
    Case("10x1k", _many(10, 1_000)),
    Case("1x2k@200ms", (("incident", 2_000),), latency_ms=200),
    Case("10x500@200ms", _many(10, 500), latency_ms=200),
    Case("50x200", _many(50, 200)),
    Case("1x50k", (("incident", 50_000),)),
)


def _child(*args: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, check=False, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_case(case: Case, runs: int, bootstrap: str, workdir: Path) -> dict[str, Any]:
    """Every measurement of one case, raw."""
    print(f"# {case.name}: seeding {case.rows} rows", file=sys.stderr, flush=True)
    emulator = Emulator(case)
    tables = [t for t, _ in case.tables]
    out: dict[str, Any] = {
        "case": case.name,
        "rows": case.rows,
        "seed_seconds": emulator.seed_seconds,
        "index_seconds": emulator.index_seconds,
        "pager": [],
        "produce": [],
        "page": [],
        "daemon": [],
    }
    try:
        for run in range(runs):
            print(f"# {case.name}: run {run + 1}/{runs}", file=sys.stderr, flush=True)
            before = emulator.cpu()
            pager = _child("bench.pager", emulator.url, *tables)
            pager["emulator_cpu"] = emulator.cpu() - before
            out["pager"].append(pager)
            for mode, key in (("send", "produce"), ("page", "page")):
                topic = f"bench-{uuid.uuid4().hex[:8]}-{mode}"
                out[key].append(
                    _child("bench.produce", emulator.url, bootstrap, topic, *tables, "--mode", mode)
                )
            daemon: DaemonRun = asyncio.run(
                run_daemon(
                    emulator_url=emulator.url,
                    control=emulator.control,
                    bootstrap=bootstrap,
                    tables=tables,
                    expected_rows=case.rows,
                    workdir=workdir,
                )
            )
            out["daemon"].append(dataclasses.asdict(daemon))
    finally:
        emulator.close()
    return out


# --- the table ------------------------------------------------------------------------------


def _spread(values: Sequence[float], fmt: str) -> str:
    if not values:
        return "-"
    median = statistics.median(values)
    if len(values) == 1:
        return fmt.format(median)
    return f"{fmt.format(median)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def _per_row(runs: list[dict[str, Any]], key: str = "cpu") -> list[float]:
    return [r[key] / r["rows"] * 1e6 for r in runs if r["rows"]]


def _rate(runs: list[dict[str, Any]]) -> list[float]:
    return [r["rows"] / r["wall"] for r in runs if r["wall"] > 0]


def _daemon(case: dict[str, Any], key: str, fmt: str) -> str:
    return _spread([r[key] for r in case["daemon"]], fmt)


def _rss_trace(case: dict[str, Any]) -> str:
    """Where the per-second RSS samples start and end: a flat run ends where it started."""
    traces = [r["rss_samples"] for r in case["daemon"] if r["rss_samples"]]
    first = _spread([t[0][1] for t in traces], "{:.0f}")
    return f"{first} / {_spread([t[-1][1] for t in traces], '{:.0f}')}"


Figure = tuple[str, Callable[[dict[str, Any]], str]]

FIGURES: list[Figure] = [
    ("rows", lambda c: str(c["rows"])),
    ("emulator seed s / index s", lambda c: f"{c['seed_seconds']:.1f} / {c['index_seconds']:.1f}"),
    ("(a) pager rows/s", lambda c: _spread(_rate(c["pager"]), "{:.0f}")),
    ("(a) pager CPU us/row", lambda c: _spread(_per_row(c["pager"]), "{:.1f}")),
    ("(b) aiokafka send rows/s", lambda c: _spread(_rate(c["produce"]), "{:.0f}")),
    ("(b) aiokafka send CPU us/row", lambda c: _spread(_per_row(c["produce"]), "{:.1f}")),
    ("(b') sink.send_page CPU us/row", lambda c: _spread(_per_row(c["page"]), "{:.1f}")),
    ("(c) daemon rows/s", lambda c: _spread(_rate(c["daemon"]), "{:.0f}")),
    ("(c) daemon CPU us/row", lambda c: _spread(_per_row(c["daemon"]), "{:.1f}")),
    ("(c) start-up s (to 1st request)", lambda c: _daemon(c, "startup_wall", "{:.2f}")),
    ("(c) start-up CPU s", lambda c: _daemon(c, "startup_cpu", "{:.2f}")),
    ("(c) start-up s (to 1st page)", lambda c: _daemon(c, "first_page_wall", "{:.2f}")),
    ("(c) peak RSS MiB", lambda c: _daemon(c, "peak_rss_mib", "{:.0f}")),
    ("(c) RSS MiB at 1st page / end", _rss_trace),
    ("emulator CPU us/row during (a)",
     lambda c: _spread(_per_row(c["pager"], "emulator_cpu"), "{:.1f}")),
    ("emulator CPU us/row during (c)",
     lambda c: _spread(_per_row(c["daemon"], "emulator_cpu"), "{:.1f}")),
    ("c/a rows/s", lambda c: _ratio(_rate(c["daemon"]), _rate(c["pager"]))),
    ("c/b CPU per row", lambda c: _ratio(_per_row(c["daemon"]), _per_row(c["produce"]))),
]  # fmt: skip


def _ratio(top: list[float], bottom: list[float]) -> str:
    if not top or not bottom:
        return "-"
    return f"{statistics.median(top) / statistics.median(bottom):.2f}"


def table(results: list[dict[str, Any]]) -> str:
    """One table: a row per figure, a column per case."""
    header = ["figure", *(c["case"] for c in results)]
    rows = [header] + [[label, *(fn(c) for c in results)] for label, fn in FIGURES]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine() -> str:
    """A one-line description of where the figures were taken."""
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{platform.platform()}, {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1 run, smaller sizes")
    parser.add_argument("--runs", type=int, help="runs per case (default 3, 1 with --quick)")
    parser.add_argument("--case", action="append", help="only these cases (repeatable)")
    default_bootstrap = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}"
    parser.add_argument("--bootstrap", default=default_bootstrap)
    parser.add_argument("--json", type=Path, help="also write every raw measurement here")
    args = parser.parse_args(argv)
    cases: tuple[Case, ...] = QUICK if args.quick else FULL
    if args.case and set(args.case) <= set(eos.CASES):  # exactly-once cases: bench/eos.py
        with tempfile.TemporaryDirectory(prefix="snowsource-bench-") as tmp:
            for name in args.case:
                print(eos.table(eos.run_case(name, args.runs or 1, args.bootstrap, Path(tmp))))
        return
    if args.case and set(args.case) <= set(avro.CASES):  # Schema Registry output: bench/avro.py
        with tempfile.TemporaryDirectory(prefix="snowsource-bench-") as tmp:
            for name in args.case:
                result = avro.run_case(name, args.runs or 1, args.bootstrap, Path(tmp))
                print(f"machine: {machine()}")
                print(avro.table(result))
        return
    if args.case and set(args.case) <= set(slices.CASES):  # parallel backfill of one table
        with tempfile.TemporaryDirectory(prefix="snowsource-bench-") as tmp:
            for name in args.case:
                result = slices.run_case(name, args.runs or 1, args.bootstrap, Path(tmp))
                print(f"machine: {machine()}")
                print(slices.table(result))
        return
    if args.case and set(args.case) <= set(ratelimit.CASES):  # a rate-limit rule (SPEC §15.3)
        with tempfile.TemporaryDirectory(prefix="snowsource-bench-") as tmp:
            for name in args.case:
                result = ratelimit.run_case(name, args.runs or 1, args.bootstrap, Path(tmp))
                print(f"machine: {machine()}")
                print(ratelimit.table(result))
        return
    if args.case and set(args.case) <= set(discover.CASES):  # the whole instance
        with tempfile.TemporaryDirectory(prefix="snowsource-bench-") as tmp:
            for name in args.case:
                result = discover.run_case(name, args.runs or 1, args.bootstrap, Path(tmp))
                print(f"machine: {machine()}")
                print(discover.table(result))
        return
    if args.case and set(args.case) <= set(sessions.CASES):  # real-instance concurrency
        with tempfile.TemporaryDirectory(prefix="snowsource-bench-") as tmp:
            for name in args.case:
                result = sessions.run_case(name, args.runs or 1, args.bootstrap, Path(tmp))
                print(f"machine: {machine()}")
                print(sessions.table(result))
        return
    if args.case:
        cases = tuple(c for c in cases if c.name in args.case)
        if not cases:
            parser.error(f"no such case; choose from {', '.join(c.name for c in (*FULL, *QUICK))}")
    runs = args.runs or (1 if args.quick else 3)
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="snowsource-bench-") as tmp:
            for case in cases:
                results.append(run_case(case, runs, args.bootstrap, Path(tmp)))
                if args.json:  # after every case: a long suite that fails late keeps the rest
                    args.json.write_text(
                        json.dumps({"machine": machine(), "results": results}, indent=1)
                    )
    finally:
        if results:
            print(f"machine: {machine()}")
            print(f"kafka: {args.bootstrap}; runs per case: {runs}; figures: median [min-max]")
            print(table(results))
    if not args.case:  # the whole suite ends with the real-instance concurrency case
        name = "8x2k@250ms-sessions" if args.quick else "8x20k@250ms-sessions"
        with tempfile.TemporaryDirectory(prefix="snowsource-bench-") as tmp:
            print(sessions.table(sessions.run_case(name, 1, args.bootstrap, Path(tmp))))
