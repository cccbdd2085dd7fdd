"""Group mode (``tasks.assignment: group``): throughput of 3 members vs one process, and how
long a killed or stopped member's tables take to resume elsewhere.

    python -m bench.group [--bootstrap HOST:PORT] [--rows N] [--runs R] [--session-ms MS]
                          [--latency-ms MS]

One emulator process serves 9 tables of ``N`` rows, each answer delayed by ``--latency-ms``
(a real instance answers a page in a few hundred ms; that latency, not CPU, is what more
processes share out). Throughput: (a) one static process, (b)
three group-mode processes, each from process start until the output topics hold every row
(start-up included, since the group's first rounds are part of what group mode costs), with
the CPU seconds of all processes. Failover: with three members caught up, kill -9 one and time
until the last of its tables is started by a survivor (each member logs "tables started");
then SIGTERM another and time the same. Wall times are inflated on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer

from bench.case import Case, Emulator
from bench.daemon import _command, _rows_in_kafka, config
from bench.procstat import cpu_seconds

TABLES = 9


def _group_config(doc: dict[str, Any], session_ms: int) -> dict[str, Any]:
    return {
        **doc,
        "tasks.assignment": "group",
        "group.session.timeout.ms": session_ms,
        "log": {"format": "json", "level": "INFO"},
    }


class Procs:
    """The ``snowsource run`` processes of one measurement."""

    def __init__(self, workdir: Path, path: Path) -> None:
        self.workdir, self.path = workdir, path
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, count: int) -> None:
        for _ in range(count):
            log = self.workdir / f"{uuid.uuid4().hex[:8]}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [*_command(), "run", "--config", str(self.path)], stdout=out, stderr=out
                )
            self.procs.append((proc, log))

    def cpu(self) -> float:
        total = 0.0
        for proc, _ in self.procs:
            if proc.poll() is None:
                total += cpu_seconds(proc.pid)
        return total

    def running(self, log: Path) -> set[str]:
        tables: set[str] = set()
        for entry in _events(log):
            if entry["event"] == "tables started":
                tables |= set(entry["tables"])
            elif entry["event"] == "tables released":
                tables -= set(entry["tables"])
        return tables

    def started_after(self, alias: str, after: float) -> float | None:
        for proc, log in self.procs:
            if proc.poll() is not None:
                continue
            for entry in _events(log):
                if entry["event"] == "tables started" and alias in entry["tables"]:
                    at = _wall(entry["timestamp"])
                    if at >= after:
                        return at
        return None

    def stop(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _ in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") in ("tables started", "tables released"):
                out.append(entry)
    return out


def _wall(iso: object) -> float:
    return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()


async def _wait_rows(bootstrap: str, topics: list[str], rows: int, within: float) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        deadline = time.monotonic() + within
        while await _rows_in_kafka(consumer, topics) < rows:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every row reached Kafka within {within}s")
            await consumer._client.force_metadata_update()  # new topics appear
            await asyncio.sleep(0.5)
    finally:
        await consumer.stop()


def _write(workdir: Path, doc: dict[str, Any]) -> Path:
    path = workdir / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


async def throughput(
    emu: Emulator, bootstrap: str, tables: list[str], rows: int, workdir: Path, *, members: int
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of all processes) until every row is in Kafka."""
    name = f"bench-group-{uuid.uuid4().hex[:8]}"
    doc = config(emu.url, bootstrap, tables, name, 1000)
    if members > 1:
        doc = _group_config(doc, 10000)
    procs = Procs(workdir, _write(workdir, doc))
    started = time.perf_counter()
    procs.start(members)
    try:
        cpu = 0.0
        waiting = asyncio.create_task(
            _wait_rows(bootstrap, [f"{name}.{t}" for t in tables], rows, 1800)
        )
        while not waiting.done():
            cpu = max(cpu, procs.cpu())
            await asyncio.sleep(0.5)
        waiting.result()
        return time.perf_counter() - started, cpu
    finally:
        procs.stop()


async def failover(
    emu: Emulator, bootstrap: str, tables: list[str], rows: int, workdir: Path, *, session_ms: int
) -> tuple[float, float]:
    """(seconds after kill -9, seconds after SIGTERM) until the member's last table resumed."""
    name = f"bench-group-{uuid.uuid4().hex[:8]}"
    doc = _group_config(config(emu.url, bootstrap, tables, name, 1000), session_ms)
    procs = Procs(workdir, _write(workdir, doc))
    procs.start(3)
    try:
        await _wait_rows(bootstrap, [f"{name}.{t}" for t in tables], rows, 1800)
        results = []
        for sig in (signal.SIGKILL, signal.SIGTERM):
            live = [(p, log) for p, log in procs.procs if p.poll() is None]
            proc, log = next((p, log) for p, log in live if procs.running(log))
            moving = procs.running(log)
            at = time.time()
            proc.send_signal(sig)
            await asyncio.to_thread(proc.wait, 60)
            deadline = time.monotonic() + session_ms / 1000 + 60
            while True:
                taken = [procs.started_after(a, at) for a in moving]
                if all(t is not None for t in taken):
                    results.append(max(t for t in taken if t is not None) - at)
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tables {sorted(moving)} did not resume")
                await asyncio.sleep(0.2)
        return results[0], results[1]
    finally:
        procs.stop()


async def _main(args: argparse.Namespace) -> None:
    tables = [f"bench_t{i:02d}" for i in range(TABLES)]
    emu = Emulator(Case("group", tuple((t, args.rows) for t in tables), latency_ms=args.latency_ms))
    rows = TABLES * args.rows
    figures: dict[str, list[float]] = {k: [] for k in ("one", "one_cpu", "three", "three_cpu")}
    figures |= {"kill9": [], "sigterm": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            for _ in range(args.runs):
                wall, cpu = await throughput(emu, args.bootstrap, tables, rows, workdir, members=1)
                figures["one"].append(rows / wall)
                figures["one_cpu"].append(cpu * 1e6 / rows)
                wall, cpu = await throughput(emu, args.bootstrap, tables, rows, workdir, members=3)
                figures["three"].append(rows / wall)
                figures["three_cpu"].append(cpu * 1e6 / rows)
                killed, stopped = await failover(
                    emu, args.bootstrap, tables, rows, workdir, session_ms=args.session_ms
                )
                figures["kill9"].append(killed)
                figures["sigterm"].append(stopped)
    finally:
        emu.close()

    def show(key: str) -> str:
        values = figures[key]
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    print(
        f"9 tables x {args.rows} rows, {args.latency_ms:g} ms latency, {args.runs} run(s), "
        "median (min-max)"
    )
    print(f"one process:      {show('one')} rows/s, {show('one_cpu')} CPU us/row")
    print(f"3 group members:  {show('three')} rows/s, {show('three_cpu')} CPU us/row (all three)")
    print(f"kill -9 failover: {show('kill9')} s (session {args.session_ms} ms)")
    print(f"SIGTERM handover: {show('sigterm')} s")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.group", description=__doc__)
    port = os.environ.get("KAFKA_PORT", "9092")
    parser.add_argument("--bootstrap", default=f"127.0.0.1:{port}")
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
