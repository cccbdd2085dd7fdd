"""Harness for engine tests: config files, an in-process daemon, reading Kafka back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from snowsource.cli.run import compose
from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.offsets_codec import parse_key
from snowsource.core.table_status import TableStatus
from snowsource.engine.supervisor import Daemon
from tests.polling import poll_until


def write_config(path: Path, document: dict[str, Any]) -> Path:
    """Write a YAML configuration file."""
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def base_config(
    *,
    emulator_url: str,
    bootstrap: str,
    name: str,
    offsets_topic: str,
    tables: dict[str, dict[str, Any]],
    **top: Any,
) -> dict[str, Any]:
    """A configuration document for tests: fast polling, no REST server, tiny safety lag."""
    doc: dict[str, Any] = {
        "name": name,
        "snow": {
            "url": emulator_url,
            "auth": {"type": "basic", "username": "admin", "password": "admin"},
            "http": {"retry.initial.backoff.ms": 50, "retry.max.backoff.ms": 500},
            "tables": tables,
        },
        "batch.size": 100,
        "poll.interval.ms": 200,
        "overlap.seconds": 10,
        "safety.lag.seconds": 0,
        "shutdown.timeout.seconds": 20,
        "kafka": {"bootstrap.servers": bootstrap, "startup.timeout.seconds": 20},
        "offset.storage.topic": offsets_topic,
        "offset.storage.partitions": 3,
        "rest": {"enabled": False},
        "log": {"format": "json", "level": "INFO"},
    }
    doc.update(top)
    return doc


def settings_from(tmp_path: Path, document: dict[str, Any]) -> Settings:
    """Load a document through the real loader (validation included)."""
    path = write_config(tmp_path / f"config-{time.monotonic_ns()}.yaml", document)
    return load_config(path, env={}).settings


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Daemon]:
    """Run a daemon (with REST when enabled) in this event loop until the block ends
    (graceful shutdown)."""
    daemon = compose(settings)
    shutdown = asyncio.Event()
    task = asyncio.create_task(daemon.run(shutdown), name="daemon")
    ready = asyncio.create_task(daemon.ready.wait())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        ready.cancel()
        await task  # raises the start-up error
    try:
        yield daemon
    finally:
        shutdown.set()
        assert await task == 0


def caught_up(daemon: Daemon, *aliases: str) -> Callable[[], bool]:
    """Predicate: every named table finished a sweep that reached its high-water mark."""

    def check() -> bool:
        pollers = daemon.pollers
        return all(a in pollers and pollers[a].status.caught_up for a in aliases)

    return check


async def sweeps_after(daemon: Daemon, alias: str, extra: int = 1, timeout: float = 30) -> None:
    """Wait until ``alias`` completed ``extra`` more sweeps than now."""
    start = daemon.pollers[alias].status.sweeps
    await poll_until(lambda: daemon.pollers[alias].status.sweeps >= start + extra, timeout=timeout)


@dataclass
class Record:
    """One consumed Kafka record."""

    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    partition: int
    offset: int
    timestamp: int

    @property
    def json(self) -> Any:
        assert self.value is not None
        return orjson.loads(self.value)


async def read_topic(
    bootstrap: str, topic: str, *, isolation_level: str = "read_uncommitted"
) -> list[Record]:
    """Every record of ``topic`` from the beginning to its current end (with
    ``read_committed``: to its last stable offset, aborted records left out)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation_level
    )
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic)
        if parts is None:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        if not tps:
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[Record] = []
        remaining = [tp for tp in tps if end[tp] > 0]
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, records in batch.items():
                out.extend(
                    Record(r.key, r.value, dict(r.headers), tp.partition, r.offset, r.timestamp)
                    for r in records
                    if r.offset < end[tp]
                )
            remaining = [tp for tp in remaining if await consumer.position(tp) < end[tp]]
        return out
    finally:
        await consumer.stop()


async def read_offsets(bootstrap: str, topic: str, connector: str) -> dict[str, dict[str, Any]]:
    """Live offsets of ``connector`` keyed by the partition's table name (last write wins)."""
    live: dict[bytes, bytes | None] = {}
    for record in await read_topic(bootstrap, topic):
        assert record.key is not None
        live[record.key] = record.value
    out: dict[str, dict[str, Any]] = {}
    for key, value in live.items():
        parsed = parse_key(key)
        if parsed is None or value is None or parsed[0] != connector:
            continue
        out[str(parsed[1]["table"])] = orjson.loads(value)
    return out


def status(daemon: Daemon, alias: str) -> TableStatus:
    """The live status of one table."""
    return daemon.pollers[alias].status


def committed_stream(daemon: Daemon, *aliases: str) -> Callable[[], bool]:
    """Predicate: every named table committed an offset whose phase is ``stream``."""

    def check() -> bool:
        for alias in aliases:
            committed = status(daemon, alias).committed
            if committed is None or committed.phase != "stream":
                return False
        return True

    return check


def keys_of(records: list[Record]) -> list[str]:
    """Record keys as text, in topic order."""
    return [r.key.decode() for r in records if r.key is not None]


def latest_by_key(records: list[Record]) -> dict[str, Any]:
    """The last value per record key (what a compacted consumer would see)."""
    return {r.key.decode(): r.json for r in records if r.key is not None}
