"""What Schema Registry output costs: the daemon with ``value.format: string`` and ``avro``.

    python -m bench --case 1x50k-avro [--runs N]      (or 1x5k-avro for a quick look)

One emulator process is seeded per case; the project's registry (``scripts/registry.sh``, on
``REGISTRY_PORT``, default 8081) is started if it is not running. Then, N times each, the daemon
runs once per format (same defaults otherwise, fresh topics and connector name per run) until
its topic holds every row. Figures per format: rows/s, daemon CPU µs per row (from the first
page request to the last row in Kafka) and peak RSS, and the CPU ratio avro / string (SPEC
§15.1 asks for at most 1.3).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.case import Case, Emulator
from bench.daemon import DaemonRun, run_daemon

#: name -> the tables of the case (rows per table).
CASES: dict[str, tuple[tuple[str, int], ...]] = {
    "1x50k-avro": (("incident", 50_000),),
    "1x5k-avro": (("incident", 5_000),),
}
FORMATS = ("string", "avro")
_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "registry.sh"


def registry_url() -> str:
    """The project's registry, started when it is not running (idempotent)."""
    subprocess.run([str(_SCRIPT), "start"], check=True, timeout=600)
    port = os.environ.get("REGISTRY_PORT", "8081")
    return f"http://127.0.0.1:{port}/apis/ccompat/v7"


def run_case(name: str, runs: int, bootstrap: str, workdir: Path) -> dict[str, Any]:
    """Every run of one case, both formats, raw."""
    tables = CASES[name]
    url = registry_url()
    emulator = Emulator(Case(name, tables))
    out: dict[str, Any] = {"case": name, "rows": sum(n for _, n in tables)}
    try:
        for run in range(runs):
            for value_format in FORMATS:
                print(f"# {name}: run {run + 1}/{runs}, {value_format}", flush=True)
                extra: dict[str, Any] = {"value.format": value_format}
                if value_format == "avro":
                    extra["schema.registry"] = {"url": url}
                result = asyncio.run(
                    run_daemon(
                        emulator_url=emulator.url,
                        control=emulator.control,
                        bootstrap=bootstrap,
                        tables=[t for t, _ in tables],
                        expected_rows=out["rows"],
                        workdir=workdir,
                        extra=extra,
                    )
                )
                out.setdefault(value_format, []).append(result)
    finally:
        emulator.close()
    return out


def _spread(values: list[float], fmt: str) -> str:
    median = statistics.median(values)
    if len(values) == 1:
        return fmt.format(median)
    return f"{fmt.format(median)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def table(result: dict[str, Any]) -> str:
    """The case's figures, a column per format, and the CPU ratio."""
    rows = result["rows"]
    lines = [f"{result['case']} ({rows} rows)   " + "   ".join(FORMATS)]
    figures: list[tuple[str, Callable[[DaemonRun], float], str]] = [
        ("daemon rows/s", lambda r: rows / r.wall, "{:.0f}"),
        ("daemon CPU us/row", lambda r: r.cpu / rows * 1e6, "{:.1f}"),
        ("peak RSS MiB", lambda r: r.peak_rss_mib, "{:.0f}"),
    ]
    for label, value, fmt in figures:
        cells = [_spread([value(r) for r in result[f]], fmt) for f in FORMATS]
        lines.append(f"  {label:<22}" + "   ".join(cells))
    cpu = {f: statistics.median(r.cpu for r in result[f]) for f in FORMATS}
    lines.append(f"  CPU per row avro / string: {cpu['avro'] / cpu['string']:.2f}x (limit 1.3x)")
    return "\n".join(lines)
