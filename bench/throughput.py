"""Backfill throughput and memory of the engine against the in-process emulator and real Kafka.

    python -m bench.throughput [--rows 50000] [--batch 1000] [--bootstrap 127.0.0.1:9092]

Prints rows/s for a full backfill and the process's peak RSS. Speed is measured here, never in
tests. The emulator runs in the same process and event loop, so the number is a lower bound
for the daemon alone (the emulator's filtering and JSON encoding share the CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from snowsource.emulator import Emulator, serve
from tests.integration.engine import base_config, caught_up, poll_until, running, settings_from


async def main(rows: int, batch: int, bootstrap: str) -> None:
    emu = Emulator(seed=3, now=datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC))
    emu.clock.follow_wall_clock(True)
    emu.seed(tables=("incident",), rows=rows)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    async with serve(emu) as url:
        doc = base_config(
            emulator_url=url,
            bootstrap=bootstrap,
            name=name,
            offsets_topic=f"{name}-offsets",
            tables={"incident": {"name": "incident", "topic": f"{name}.incident"}},
            **{"batch.size": batch, "log": {"format": "json", "level": "WARNING"}},
        )
        with tempfile.TemporaryDirectory() as tmp:
            settings = settings_from(Path(tmp), doc)
        started = time.perf_counter()
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident"), timeout=3600, interval=0.05)
            elapsed = time.perf_counter() - started
            emitted = daemon.pollers["incident"].status.rows_emitted
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"rows={emitted} batch={batch} seconds={elapsed:.2f} "
        f"rows_per_s={emitted / elapsed:.0f} peak_rss_mib={peak_mib:.0f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=50000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    args = parser.parse_args()
    asyncio.run(main(args.rows, args.batch, args.bootstrap))
