"""Parallel backfill of one table (SPEC §14.2): rows/s with 1, 4 and 8 slices, and a skewed table.

    python -m bench --case 1x200k@250ms-slices [--runs N]    (1x20k@250ms-slices: quick look)

One emulator process models an instance (session synchronization by ``JSESSIONID``, 2 nodes
with 4 API threads each) and adds 250 ms to every page. It holds two tables of the same size:
``bench_uniform``, rows spread evenly over 30 days, and ``bench_skewed``, 90 % of its rows in
the last tenth of that range. ``snowsource run`` backfills one of them at a time, 1,000 rows a
page, with defaults otherwise (``max.concurrent.requests`` 8, ``backfill.max.ahead.rows``
50,000):

- uniform with ``backfill.slices`` 1, 4 and 8;
- skewed with 1 and 4.

Per run: rows/s from the daemon's first page request to every row in Kafka (``bench.daemon``),
its peak RSS, and the set of (sys_id, value digest) in the topic, which must equal the one-slice
run's. The goals are printed as checks.
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import sys
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.case import Case, Emulator
from bench.daemon import run_daemon

BATCH = 1000
UNIFORM, SKEWED = "bench_uniform", "bench_skewed"

CASES: dict[str, Case] = {
    "1x200k@250ms-slices": Case(
        "1x200k@250ms-slices", ((UNIFORM, 200_000), (SKEWED, 200_000)), latency_ms=250, nodes=2
    ),
    "1x20k@250ms-slices": Case(
        "1x20k@250ms-slices", ((UNIFORM, 20_000), (SKEWED, 20_000)), latency_ms=250, nodes=2
    ),
}

# (label, table, slices)
RUNS = (
    ("uniform, 1 slice", UNIFORM, 1),
    ("uniform, 4 slices", UNIFORM, 4),
    ("uniform, 8 slices", UNIFORM, 8),
    ("skewed, 1 slice", SKEWED, 1),
    ("skewed, 4 slices", SKEWED, 4),
)


async def _contents(bootstrap: str, topic: str) -> frozenset[tuple[bytes, bytes]]:
    """The topic's (key, SHA-256 of value) pairs, to compare runs without holding the values."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        seen: set[tuple[bytes, bytes]] = set()
        remaining = [tp for tp in tps if end[tp] > 0]
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000, max_records=20_000)
            for tp, records in batch.items():
                for r in records:
                    if r.offset < end[tp] and r.key is not None:
                        seen.add((r.key, hashlib.sha256(r.value or b"").digest()))
            remaining = [tp for tp in remaining if await consumer.position(tp) < end[tp]]
        return frozenset(seen)
    finally:
        await consumer.stop()


def run_case(name: str, runs: int, bootstrap: str, workdir: Path) -> dict[str, Any]:
    """Every configuration ``runs`` times; raw figures per configuration."""
    case = CASES[name]
    rows = dict(case.tables)
    print(f"# {name}: seeding {case.rows} rows", file=sys.stderr, flush=True)
    emulator = Emulator(case)
    out: dict[str, Any] = {"case": name, "rows": rows[UNIFORM], "runs": {}, "same": {}}
    contents: dict[str, frozenset[tuple[bytes, bytes]]] = {}
    try:
        for run in range(runs):
            for label, table, slices in RUNS:
                print(f"# {name}: run {run + 1}/{runs}: {label}", file=sys.stderr, flush=True)
                measured = asyncio.run(
                    run_daemon(
                        emulator_url=emulator.url,
                        control=emulator.control,
                        bootstrap=bootstrap,
                        tables=[table],
                        expected_rows=rows[table],
                        workdir=workdir,
                        batch=BATCH,
                        extra={"backfill.slices": slices},
                    )
                )
                out["runs"].setdefault(label, []).append(
                    {
                        "rows_per_s": measured.rows / measured.wall,
                        "wall": measured.wall,
                        "peak_rss_mib": measured.peak_rss_mib,
                        "daemon_cpu": measured.cpu / measured.wall,
                        "emulator_cpu": measured.emulator_cpu / measured.wall,
                        # SPEC §15.3: the backfill's page requests (its first to its
                        # last) per full page of rows delivered; and every page request to
                        # every row in Kafka (the sweep and polls after the backfill too).
                        "requests_per_page": measured.backfill_page_requests
                        / (rows[table] / BATCH),
                        "all_requests_per_page": measured.page_requests / (rows[table] / BATCH),
                    }
                )
                if run == 0:
                    topic = f"{measured.name}.{table}"
                    contents[label] = asyncio.run(_contents(bootstrap, topic))
                    reference = contents[f"{label.split(',')[0]}, 1 slice"]
                    out["same"][label] = contents[label] == reference
    finally:
        emulator.close()
    return out


def _median(result: dict[str, Any], label: str, key: str) -> float:
    return float(statistics.median(r[key] for r in result["runs"][label]))


def table(result: dict[str, Any]) -> str:
    """Each configuration's figures, then the goals of SPEC §14.2 as checks."""
    header = [
        "configuration",
        "rows/s",
        "wall s",
        "peak RSS MiB",
        "daemon CPU",
        "emulator CPU",
        "requests/page",
        "(to all in Kafka)",
        "same records as 1 slice",
    ]
    rows = [header]
    for label, _, _ in RUNS:
        rows.append(
            [
                label,
                f"{_median(result, label, 'rows_per_s'):.0f}",
                f"{_median(result, label, 'wall'):.1f}",
                f"{_median(result, label, 'peak_rss_mib'):.0f}",
                f"{_median(result, label, 'daemon_cpu'):.0%}",
                f"{_median(result, label, 'emulator_cpu'):.0%}",
                f"{_median(result, label, 'requests_per_page'):.3f}",
                f"{_median(result, label, 'all_requests_per_page'):.3f}",
                "yes" if result["same"].get(label) else "NO",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))

    def ratio(label: str, base: str) -> float:
        return _median(result, label, "rows_per_s") / _median(result, base, "rows_per_s")

    four = ratio("uniform, 4 slices", "uniform, 1 slice")
    eight = ratio("uniform, 8 slices", "uniform, 1 slice")
    skewed = ratio("skewed, 4 slices", "skewed, 1 slice")
    peak = max(_median(result, label, "peak_rss_mib") for label, _, _ in RUNS)
    same = all(result["same"].get(label) for label, _, _ in RUNS)
    requests = max(_median(result, label, "requests_per_page") for label, _, _ in RUNS)
    checks = (
        (f"4 slices {four:.2f}x one slice's rows/s >= 3.5", four >= 3.5),
        (f"8 slices {eight:.2f}x one slice's rows/s >= 6.5", eight >= 6.5),
        (f"skewed table, 4 slices {skewed:.2f}x one slice's rows/s >= 3", skewed >= 3),
        (f"peak RSS {peak:.0f} MiB <= 150", peak <= 150),
        (f"at most {requests:.3f} page requests per page of rows <= 1.05", requests <= 1.05),
        ("every run's (sys_id, value) set equals its one-slice run's", same),
    )
    lines += [f"goal: {text}: {'met' if ok else 'MISSED'}" for text, ok in checks]
    return "\n".join(lines)
