"""What exactly-once costs: the daemon with ``exactly.once`` false and true, side by side.

    python -m bench --case 1x50k-eos [--runs N]      (or 1x5k-eos for a quick look)

One emulator process is seeded per case; then, N times each, the daemon runs once with
``exactly.once: false`` and once with ``true`` (same defaults otherwise, ``batch.size: 1000``,
fresh topics and connector name per run). A ``read_committed`` consumer follows the output topic
from the start; the run ends when it has seen every row. Figures per mode:

- rows/s and daemon CPU µs per row, from the first Table API request to the last row seen;
- latency to visibility: for each record, the consumer's wall clock when it received the record
  minus the record's timestamp (set by the daemon's producer when it built the batch), as the
  median and the 99th percentile — with exactly-once a record becomes visible only when its
  page's transaction commits.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.case import Case, Emulator
from bench.daemon import config
from bench.procstat import cpu_seconds, memory_mib

#: name -> the tables of the case (rows per table).
CASES: dict[str, tuple[tuple[str, int], ...]] = {
    "1x50k-eos": (("incident", 50_000),),
    "1x5k-eos": (("incident", 5_000),),
}

MODES = (("at-least-once", False), ("exactly-once", True))


async def _stats(session: aiohttp.ClientSession, control: str) -> dict[str, float]:
    async with session.get(f"{control}/stats") as resp:
        result: dict[str, float] = await resp.json()
        return result


async def _follow(bootstrap: str, topic: str, rows: int, latencies: list[float]) -> float:
    """Consume ``topic`` read_committed until ``rows`` records; returns when the last arrived."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    )
    await consumer.start()
    try:
        while not consumer.partitions_for_topic(topic):
            await consumer._client.force_metadata_update()
            await asyncio.sleep(0.05)
        consumer.assign([TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)])
        seen = 0
        while seen < rows:
            batch = await consumer.getmany(timeout_ms=200, max_records=5000)
            now_ms = time.time() * 1000
            for records in batch.values():
                latencies.extend((now_ms - record.timestamp) / 1000 for record in records)
                seen += len(records)
        return time.perf_counter()
    finally:
        await consumer.stop()


async def run_mode(
    *,
    emulator_url: str,
    control: str,
    bootstrap: str,
    table: str,
    rows: int,
    exactly_once: bool,
    workdir: Path,
) -> dict[str, Any]:
    """One daemon run in one mode, measured from outside."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    topic = f"{name}.{table}"
    document = config(emulator_url, bootstrap, [table], name, 1000)
    document["exactly.once"] = exactly_once
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    latencies: list[float] = []
    log_path = workdir / f"{name}.log"
    async with aiohttp.ClientSession() as session:
        before = (await _stats(session, control))["requests"]
        script = Path(sys.executable).with_name("snowsource")
        with log_path.open("wb") as log:
            process = subprocess.Popen(  # noqa: ASYNC220  the daemon runs while we measure
                [str(script), "run", "--config", str(path)], stdout=log, stderr=log
            )
        try:
            follower = asyncio.create_task(_follow(bootstrap, topic, rows, latencies))
            while (await _stats(session, control))["requests"] <= before:
                if process.poll() is not None:
                    raise RuntimeError(log_path.read_text(errors="replace")[-3000:])
                await asyncio.sleep(0.005)
            first = time.perf_counter()
            cpu_before = cpu_seconds(process.pid)
            done = await asyncio.wait_for(follower, 3600)
            cpu = cpu_seconds(process.pid) - cpu_before
            _, peak = memory_mib(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(process.wait, 60)
    ordered = sorted(latencies)
    return {
        "rows": rows,
        "wall": done - first,
        "cpu": cpu,
        "peak_rss_mib": peak,
        "latency_p50": statistics.median(ordered),
        "latency_p99": ordered[int(len(ordered) * 0.99) - 1],
    }


def run_case(name: str, runs: int, bootstrap: str, workdir: Path) -> dict[str, Any]:
    """Every run of one exactly-once case, both modes, raw."""
    tables = CASES[name]
    emulator = Emulator(Case(name, tables))
    out: dict[str, Any] = {"case": name, "rows": sum(n for _, n in tables)}
    try:
        for run in range(runs):
            for mode, exactly_once in MODES:
                print(f"# {name}: run {run + 1}/{runs}, {mode}", flush=True)
                result = asyncio.run(
                    run_mode(
                        emulator_url=emulator.url,
                        control=emulator.control,
                        bootstrap=bootstrap,
                        table=tables[0][0],
                        rows=tables[0][1],
                        exactly_once=exactly_once,
                        workdir=workdir,
                    )
                )
                out.setdefault(mode, []).append(result)
    finally:
        emulator.close()
    return out


def _spread(values: list[float], fmt: str) -> str:
    median = statistics.median(values)
    if len(values) == 1:
        return fmt.format(median)
    return f"{fmt.format(median)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def table(result: dict[str, Any]) -> str:
    """The case's figures, a column per mode."""
    figures: list[tuple[str, Callable[[dict[str, Any]], float], str]] = [
        ("daemon rows/s", lambda r: r["rows"] / r["wall"], "{:.0f}"),
        ("daemon CPU us/row", lambda r: r["cpu"] / r["rows"] * 1e6, "{:.1f}"),
        ("latency to visibility p50 ms", lambda r: r["latency_p50"] * 1000, "{:.0f}"),
        ("latency to visibility p99 ms", lambda r: r["latency_p99"] * 1000, "{:.0f}"),
        ("peak RSS MiB", lambda r: r["peak_rss_mib"], "{:.0f}"),
    ]
    lines = [f"{result['case']} ({result['rows']} rows)   " + "   ".join(m for m, _ in MODES)]
    for label, value, fmt in figures:
        cells = [_spread([value(r) for r in result[mode]], fmt) for mode, _ in MODES]
        lines.append(f"  {label:<30}" + "   ".join(cells))
    return "\n".join(lines)
