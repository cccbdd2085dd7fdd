"""Soak: does anything grow? (SPEC §15.4; docs/performance.md#soak)

    python -m bench.soak [--minutes 30] [--every 300] [--restart-every 300] [--rate 36]
                         [--bootstrap HOST:PORT] [--kafka-data DIR] [--json PATH]

Three tables (incident, change_request, cmdb_ci) change continuously on the session-synchronized
emulator (``--rate`` updates and inserts a second in all, never fewer than 30), served in this
process; a group of three ``snowsource run`` members (``tasks.assignment: group``) streams them
into Kafka (the single broker of ``scripts/kafka.sh``), and one member, in turn, is stopped
(SIGTERM) and started again every ``--restart-every`` seconds.

Every ``--every`` seconds, and before each restart, one line per measurement: each member's RSS
(MiB), asyncio tasks (``snowsource_asyncio_tasks``), open file descriptors, the offsets topic's
size on disk (``--kafka-data``, the broker's ``log.dirs``), the dedup entries of every table
(``snowsource_dedup_entries``) and the worst lag (``snowsource_lag_seconds``). At the end the
rows stop changing and the driver waits for every row's final version in Kafka ("nothing lost"),
then compares the last measurement with the one after the warm-up (``--warmup``, default 10
minutes, or a third of a shorter run): within +-10 % is flat.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.daemon import _command, config
from bench.procstat import memory_mib
from snowsource.emulator import Emulator, serve

TABLES = ("incident", "change_request", "cmdb_ci")
#: The field each table's changes write (cmdb_ci has no short_description).
FIELD = {"incident": "short_description", "change_request": "short_description", "cmdb_ci": "name"}
REPO = Path(__file__).resolve().parents[1]
FLAT = 0.10


@dataclass
class Sample:
    """One measurement of the whole group."""

    minute: float
    rss_mib: list[float]
    tasks: list[float]
    fds: list[int]
    offsets_bytes: int
    dedup_entries: float
    lag_s: float
    changes: int


class Member:
    """One ``snowsource run`` process of the group, with its REST port for /metrics."""

    def __init__(self, workdir: Path, document: dict[str, Any], n: int) -> None:
        self.port = _free_port()
        doc = {**document, "rest": {"enabled": True, "port": self.port, "console": False}}
        self.config = workdir / f"member{n}.yaml"
        self.config.write_text(yaml.safe_dump(doc))
        self.log = workdir / f"member{n}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*_command(), "run", "--config", str(self.config)], stdout=out, stderr=out
            )

    async def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, 90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)

    async def metrics(self, session: aiohttp.ClientSession) -> dict[str, float]:
        """Sums of the metrics the soak watches (max for lag); empty while it cannot answer."""
        out = {"tasks": 0.0, "dedup": 0.0, "lag": 0.0}
        try:
            async with session.get(f"http://127.0.0.1:{self.port}/metrics") as resp:
                text = await resp.text()
        except aiohttp.ClientError:
            return {}
        lines = [line.rpartition(" ") for line in text.splitlines()]
        # A table the member released keeps its last gauges: count the tables it runs.
        running = {
            _table_of(name)
            for name, _, value in lines
            if name.startswith('snowsource_table_state{state="RUNNING"') and value == "1.0"
        }

        for name, _, value in lines:
            if name.startswith("snowsource_asyncio_tasks"):
                out["tasks"] = float(value)
            elif name.startswith("snowsource_dedup_entries{") and _table_of(name) in running:
                out["dedup"] += float(value)
            elif name.startswith("snowsource_lag_seconds{") and _table_of(name) in running:
                out["lag"] = max(out["lag"], float(value))
        return out


def _table_of(sample: str) -> str:
    """The ``table`` label of a Prometheus sample line's name part ("" when it has none)."""
    _, found, rest = sample.partition('table="')
    return rest.partition('"')[0] if found else ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _dir_bytes(data: Path, topic: str) -> int:
    """Bytes of the topic's log segments (the index files are preallocated sparse files of
    10 MiB each, which say nothing about growth)."""
    return sum(f.stat().st_size for f in data.glob(f"{topic}-*/*.log"))


@contextlib.asynccontextmanager
async def _changing(emu: Emulator, rate: float, counter: list[int]) -> AsyncIterator[None]:
    """``rate`` changes a second over the three tables (an insert every fifth), until the block
    ends; ``counter[0]`` counts them."""
    rng = random.Random(30)

    async def change() -> None:
        started = time.monotonic()
        while True:
            n = counter[0] = counter[0] + 1
            table = TABLES[n % len(TABLES)]
            if n % 5 == 0:
                emu.insert(table, {FIELD[table]: f"new {n}"})
            else:
                ids = [r["sys_id"] for r in emu.rows(table)]
                emu.update(table, rng.choice(ids), {FIELD[table]: f"v{n}"})
            # Paced on the clock, not on sleeps: a slow tick is made up by the next ones.
            await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))

    task = asyncio.create_task(change())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _sample(
    members: list[Member], started: float, data: Path, topic: str, changes: int
) -> Sample:
    async with aiohttp.ClientSession() as session:
        scraped = [await m.metrics(session) for m in members]
    pids = [m.proc.pid for m in members if m.proc is not None and m.proc.poll() is None]
    return Sample(
        minute=round((time.monotonic() - started) / 60, 1),
        rss_mib=[round(memory_mib(pid)[0], 1) for pid in pids],
        tasks=[s.get("tasks", 0.0) for s in scraped],
        fds=[_fds(pid) for pid in pids],
        offsets_bytes=_dir_bytes(data, topic),
        dedup_entries=sum(s.get("dedup", 0.0) for s in scraped),
        lag_s=max((s.get("lag", 0.0) for s in scraped), default=0.0),
        changes=changes,
    )


def _show(sample: Sample) -> None:
    print(
        f"{sample.minute:6.1f} min  RSS MiB {sample.rss_mib}  tasks {sample.tasks}  "
        f"fds {sample.fds}  offsets topic {sample.offsets_bytes / 1024:.0f} KiB  "
        f"dedup {sample.dedup_entries:.0f}  lag {sample.lag_s:.1f} s  "
        f"changes {sample.changes}",
        flush=True,
    )


async def _lost(emu: Emulator, bootstrap: str, name: str, within: float) -> dict[str, int]:
    """Rows whose final version is not the last record of their key, per table, once Kafka
    has caught up (or after ``within`` seconds)."""
    deadline = time.monotonic() + within
    while True:
        missing = {t: await _missing(emu, bootstrap, f"{name}.{t}", t) for t in TABLES}
        if not any(missing.values()) or time.monotonic() > deadline:
            return missing
        await asyncio.sleep(2)


async def _missing(emu: Emulator, bootstrap: str, topic: str, table: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    latest: dict[bytes, Any] = {}
    try:
        await consumer._client.force_metadata_update()  # a consumer knows no topic at first
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        end = await consumer.end_offsets(parts)
        while [tp for tp in parts if await consumer.position(tp) < end[tp]]:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for r in records:
                    if r.key is not None and r.value is not None:
                        latest[r.key] = json.loads(r.value).get("sys_mod_count")
    finally:
        await consumer.stop()
    rows = emu.rows(table)
    return sum(1 for r in rows if latest.get(r["sys_id"].encode()) != r["sys_mod_count"])


def _growth(first: Sample, last: Sample) -> dict[str, float]:
    """last / first - 1 for each watched figure (sums over members)."""

    def ratio(a: float, b: float) -> float:
        return round(b / a - 1, 3) if a else 0.0

    return {
        "rss": ratio(sum(first.rss_mib), sum(last.rss_mib)),
        "tasks": ratio(sum(first.tasks), sum(last.tasks)),
        "fds": ratio(sum(first.fds), sum(last.fds)),
        "offsets_bytes": ratio(first.offsets_bytes, last.offsets_bytes),
        "dedup_entries": ratio(first.dedup_entries, last.dedup_entries),
    }


async def _soak(
    args: argparse.Namespace,
    emu: Emulator,
    *,
    name: str,
    members: list[Member],
    counter: list[int],
    samples: list[Sample],
) -> None:
    """Start the members, change rows for ``--minutes``, measure and restart on schedule."""
    for member in members:
        member.start()
    started = time.monotonic()
    end = started + args.minutes * 60
    next_sample, next_restart, turn = started + args.every, started + args.restart_every, 0
    topic = f"{name}-offsets"
    async with _changing(emu, args.rate, counter):
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample or now >= next_restart:
                samples.append(await _sample(members, started, args.kafka_data, topic, counter[0]))
                _show(samples[-1])
                next_sample = now + args.every
            if now >= next_restart:
                print(f"# restarting member {turn % len(members)}", flush=True)
                member = members[turn % len(members)]
                await member.stop()
                member.start()
                turn, next_restart = turn + 1, now + args.restart_every
            await asyncio.sleep(1)
    samples.append(await _sample(members, started, args.kafka_data, topic, counter[0]))
    _show(samples[-1])


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    name = f"soak-{uuid.uuid4().hex[:8]}"
    emu = Emulator(seed=5, now=datetime.now(UTC) - timedelta(seconds=5))
    emu.clock.follow_wall_clock(True)
    emu.instance.configure(nodes=2, session_sync=True)
    emu.seed(tables=TABLES, rows=args.rows)
    counter = [0]
    samples: list[Sample] = []
    async with serve(emu) as url:
        with tempfile.TemporaryDirectory() as tmp:
            doc = config(url, args.bootstrap, list(TABLES), name, 200)
            doc |= {"tasks.assignment": "group", "log": {"format": "json", "level": "INFO"}}
            members = [Member(Path(tmp), doc, n) for n in range(3)]
            lost: dict[str, int] = {}
            try:
                await _soak(args, emu, name=name, members=members, counter=counter, samples=samples)
                lost = await _lost(emu, args.bootstrap, name, 300)
            finally:  # an error or Ctrl-C must not leave the members running
                for member in members:
                    await member.stop()
    warm = args.warmup if args.warmup is not None else min(10.0, args.minutes / 3)
    reference = next((s for s in samples if s.minute >= warm), samples[0])
    growth = _growth(reference, samples[-1])
    return {
        "minutes": args.minutes,
        "rate": args.rate,
        "changes": counter[0],
        "lost": lost,
        "reference_minute": reference.minute,
        "growth": growth,
        "flat": all(abs(v) <= FLAT for k, v in growth.items() if k != "dedup_entries"),
        "samples": [asdict(s) for s in samples],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    port = os.environ.get("KAFKA_PORT", "9092")
    parser.add_argument("--bootstrap", default=f"127.0.0.1:{port}")
    parser.add_argument("--kafka-data", type=Path, default=REPO / ".kafka" / port / "data")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=300.0)
    parser.add_argument("--restart-every", type=float, default=300.0)
    parser.add_argument("--rate", type=float, default=36.0)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--warmup", type=float, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.rate < 30:
        parser.error("--rate must be at least 30 changes a second (the soak's minimum)")
    result = asyncio.run(_run(args))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
