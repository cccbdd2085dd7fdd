"""(c) The daemon: ``snowsource run`` as a subprocess on a generated config, measured from outside.

The run starts at the daemon's first page request (the emulator's control endpoint counts
requests and pages) and ends when the output topics hold every row. CPU is the daemon process's
own (``/proc/<pid>/stat``), RSS is sampled every second and the peak taken from ``VmHWM``.
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import dataclasses
import functools
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

import snowsource
from bench.procstat import cpu_seconds, memory_mib


@dataclasses.dataclass
class DaemonRun:
    """What one daemon run measured."""

    name: str  # the connector name: its topics are ``<name>.<table>``
    rows: int
    wall: float  # first request -> every row in Kafka
    cpu: float  # daemon CPU seconds over ``wall``
    startup_wall: float  # process start -> first request
    startup_cpu: float
    first_page_wall: float  # process start -> first page request
    peak_rss_mib: float
    rss_samples: list[tuple[float, float]]
    emulator_cpu: float  # emulator CPU seconds over ``wall``
    page_requests: int = 0  # keyset page requests from the first to every row in Kafka
    # Of those, the backfill's (SPEC §15.3), when one table was read: the pages up to its HI.
    backfill_page_requests: int = 0


def config(
    emulator_url: str,
    bootstrap: str,
    tables: list[str],
    name: str,
    batch: int,
    *,
    extra: dict[str, Any] | None = None,
    discover: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A default configuration, apart from what a benchmark must pin (and ``extra`` keys).
    With ``discover`` the tables are not listed: ``snow.discover`` finds them."""
    if discover is not None:
        document = config(emulator_url, bootstrap, [], name, batch, extra=extra)
        document["snow"]["discover"] = discover
        document["topic.prefix"] = f"{name}."
        return document
    return {
        **(extra or {}),
        "name": name,
        "snow": {
            "url": emulator_url,
            "auth": {"type": "basic", "username": "admin", "password": "admin"},
            "tables": {t: {"name": t, "topic": f"{name}.{t}"} for t in tables},
        },
        "batch.size": batch,
        "kafka": {"bootstrap.servers": bootstrap},
        "offset.storage.topic": f"{name}-offsets",
        "rest": {"enabled": False},
        "log": {"format": "json", "level": "WARNING"},
    }


@functools.cache
def _byte_compiled() -> None:
    """Compile the package's modules once, as ``pip install`` and the image do: an editable
    install under ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module at every
    start and measure that instead of the daemon's own start-up."""
    compileall.compile_dir(str(Path(snowsource.__file__).parent), quiet=1)


def _command() -> list[str]:
    _byte_compiled()
    script = Path(sys.executable).with_name("snowsource")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "snowsource"]


async def _stats(
    session: aiohttp.ClientSession, control: str, params: dict[str, str] | None = None
) -> dict[str, float]:
    async with session.get(f"{control}/stats", params=params) as resp:
        result: dict[str, float] = await resp.json()
        return result


async def _rows_in_kafka(consumer: AIOKafkaConsumer, topics: list[str]) -> int:
    partitions = []
    for topic in topics:
        found = consumer.partitions_for_topic(topic)
        if not found:
            return 0
        partitions += [TopicPartition(topic, p) for p in found]
    ends = await consumer.end_offsets(partitions)
    return sum(ends.values())


async def run_daemon(
    *,
    emulator_url: str,
    control: str,
    bootstrap: str,
    tables: list[str],
    expected_rows: int,
    workdir: Path,
    batch: int = 1000,
    within: float = 3600.0,
    on_first_page: Callable[[], Awaitable[None]] | None = None,
    extra: dict[str, Any] | None = None,
    discover: dict[str, Any] | None = None,
    after: Callable[[str], Awaitable[None]] | None = None,
) -> DaemonRun:
    """Run the daemon until ``expected_rows`` records are in its topics; then stop it.

    With ``discover``, ``tables`` are the names ``snow.discover`` will find. ``after`` is
    awaited with the connector name once every row is in Kafka, before the daemon stops.

    ``on_first_page`` is awaited as soon as the emulator saw the first page request (the
    sessions case resets the emulator's statistics there, as the run is timed from it)."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    topics = [f"{name}.{t}" for t in tables]
    path = workdir / f"{name}.yaml"
    document = config(emulator_url, bootstrap, tables, name, batch, extra=extra, discover=discover)
    path.write_text(yaml.safe_dump(document))
    log_path = workdir / f"{name}.log"
    async with aiohttp.ClientSession() as session:
        before = await _stats(session, control)
        with log_path.open("wb") as log:
            started = time.perf_counter()
            process = subprocess.Popen(  # noqa: ASYNC220  the daemon runs while we poll
                [*_command(), "run", "--config", str(path)], stdout=log, stderr=log
            )
        try:
            return await _measure(
                session,
                control,
                process,
                bootstrap=bootstrap,
                topics=topics,
                expected_rows=expected_rows,
                before=before,
                started=started,
                within=within,
                log_path=log_path,
                on_first_page=on_first_page,
                after=after,
            )
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.to_thread(process.wait, 60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


async def _measure(
    session: aiohttp.ClientSession,
    control: str,
    process: subprocess.Popen[bytes],
    *,
    bootstrap: str,
    topics: list[str],
    expected_rows: int,
    before: dict[str, float],
    started: float,
    within: float,
    log_path: Path,
    on_first_page: Callable[[], Awaitable[None]] | None = None,
    after: Callable[[str], Awaitable[None]] | None = None,
) -> DaemonRun:
    pid = process.pid
    deadline = started + within

    def check_alive() -> None:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the daemon exited with {process.returncode}:\n{tail}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the daemon did not finish within {within} s")

    # Start-up: until the emulator sees the daemon's first Table API request (the instance
    # clock probe, sent while Kafka start-up runs), then its first keyset page request. The run
    # is timed from the first page, like the bare pager's, which needs no clock and reads no
    # dictionary (the daemon's dictionary reads before it are start-up, and were counted in the
    # run until 2026-12-06: about 0.75 s at 250 ms a request).
    first_request: float | None = None
    startup_cpu = 0.0
    while True:
        check_alive()
        stats = await _stats(session, control)
        if first_request is None and stats["requests"] > before["requests"]:
            first_request = time.perf_counter()
            startup_cpu = cpu_seconds(pid)
        if stats["pages"] > before["pages"]:
            break
        await asyncio.sleep(0.005)
    if on_first_page is not None:
        await on_first_page()
    first_page = time.perf_counter()
    first_request = first_request or first_page
    page_cpu = cpu_seconds(pid)
    emulator_cpu = stats["cpu"]

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    samples: list[tuple[float, float]] = []
    next_sample = first_page
    try:
        consumer.subscribe(topics)  # only so that metadata for these topics is fetched
        while True:
            check_alive()
            now = time.perf_counter()
            if now >= next_sample:
                samples.append((now - first_page, memory_mib(pid)[0]))
                next_sample += 1.0
            if not all(consumer.partitions_for_topic(t) for t in topics):
                with contextlib.suppress(Exception):
                    await consumer._client.force_metadata_update()
            # Often enough that the end of a one-second run is seen within a few percent.
            if await _rows_in_kafka(consumer, topics) >= expected_rows:
                break
            await asyncio.sleep(0.02)
        done = time.perf_counter()
        cpu = cpu_seconds(pid) - page_cpu
        _, peak = memory_mib(pid)
        # One table read: its backfill's own page requests, counted from this run's first.
        tables = {t.rsplit(".", 1)[-1] for t in topics}
        params = {"table": next(iter(tables)), "since": str(int(before["requests"]))}
        final = await _stats(session, control, params if len(tables) == 1 else None)
        emulator_cpu = final["cpu"] - emulator_cpu
        page_requests = int(final["pages"] - before["pages"])
        if after is not None:
            await after(log_path.stem)
    finally:
        await consumer.stop()
    return DaemonRun(
        name=log_path.stem,
        rows=expected_rows,
        wall=done - first_page,
        cpu=cpu,
        startup_wall=first_request - started,
        startup_cpu=startup_cpu,
        first_page_wall=first_page - started,
        peak_rss_mib=peak,
        rss_samples=samples,
        emulator_cpu=emulator_cpu,
        page_requests=page_requests,
        backfill_page_requests=int(final.get("backfill_pages", 0)),
    )
