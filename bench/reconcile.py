"""What one key sweep (``deletes: reconcile``) costs: memory and requests for N keys.

    python -m bench.reconcile [--bootstrap HOST:PORT] [--rows N] [--deleted D] [--unsent U]

Seeds the emulator (its own process, ``bench.emulator_proc``) with ``N`` incidents, fills a
fresh topic with one small record per incident except ``U`` of them (keys missing in Kafka),
deletes ``D`` incidents through the Table API (keys missing in the instance), then runs one
sweep of the daemon's own :class:`~snowsource.engine.reconcile.KeySweep` against both: real
ServiceNow client, real producer, real topic read. The offsets store is a dict (one write per
page; the offsets topic is not what is measured).

Prints the sweep's requests (key pages, re-checks), the tombstones, the wall time, the size of
the live-key array, the Python heap peak of the sweep (tracemalloc) and this process's RSS
before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.procstat import memory_mib
from snowsource.adapters.kafka import is_retriable
from snowsource.adapters.sink import RecordSink
from snowsource.adapters.topic_keys import TopicKeys
from snowsource.config.models import Settings
from snowsource.core.offsets_codec import SourcePartition, StoredEntry, encode_key
from snowsource.core.reconcile import KEY_PAGE_SIZE, fresh_sweep, key_query, reconcile_spec
from snowsource.core.retry import RetryPolicy
from snowsource.core.table_status import TableStatus
from snowsource.engine.reconcile import KeySweep
from snowsource.engine.snow_requests import SnowRequests
from snowsource.engine.streams import SweepMark
from snowsource.engine.table_specs import table_spec
from snowsource.engine.wiring import kafka_connection, snow_client
from snowsource.runtime.deadline import StopSignal


class _Offsets:
    """The offsets store as a dict: the sweep writes one offset per page."""

    def __init__(self) -> None:
        self.values: dict[bytes, bytes | None] = {}
        self.writes = 0

    def retriable(self, error: BaseException) -> bool:
        return is_retriable(error)

    def get(self, partition: SourcePartition) -> bytes | None:
        return self.values.get(encode_key("bench", partition))

    def foreign_spelling(self, partition: SourcePartition) -> StoredEntry | None:
        return None

    def written_at(self, partition: SourcePartition) -> int | None:
        return None

    def moved_back(self, partition: SourcePartition) -> bool:
        return False

    async def write(
        self, partition: SourcePartition | Mapping[str, object], value: bytes | None
    ) -> None:
        self.writes += 1
        self.values[encode_key("bench", partition)] = value

    async def write_raw(self, key: bytes, value: bytes | None) -> None:
        self.values[key] = value


def _settings(url: str, bootstrap: str, topic: str) -> Settings:
    return Settings(
        snow={
            "url": url,
            "auth": {"username": "admin", "password": "admin"},
            "tables": {"incident": {"name": "incident", "topic": topic}},
        },
        kafka={"bootstrap.servers": bootstrap},
    )


async def _instance_keys(session: aiohttp.ClientSession, url: str) -> list[str]:
    keys: list[str] = []
    after = ""
    while True:
        params = {
            "sysparm_query": key_query("", after),
            "sysparm_fields": "sys_id",
            "sysparm_limit": str(KEY_PAGE_SIZE),
            "sysparm_no_count": "true",
            "sysparm_suppress_pagination_header": "true",
        }
        async with session.get(f"{url}/api/now/table/incident", params=params) as response:
            rows = (await response.json())["result"]
        keys += [row["sys_id"] for row in rows]
        if len(rows) < KEY_PAGE_SIZE:
            return keys
        after = keys[-1]


async def _fill(bootstrap: str, topic: str, keys: list[str], instance: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=1 << 20
    )
    await producer.start()
    try:
        headers = [("snow.instance", instance.encode()), ("snow.table", b"incident")]
        pending = []
        for key in keys:
            value = b'{"sys_id":"' + key.encode() + b'"}'
            pending.append(await producer.send(topic, value, key=key.encode(), headers=headers))
            if len(pending) >= 10000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def _sweep(settings: Settings, *, trace: bool) -> dict[str, Any]:
    spec = reconcile_spec(
        table_spec(settings, "incident", settings.tables["incident"]), snow_url=settings.snow.url
    )
    conn = kafka_connection(settings)
    mark = SweepMark()
    mark.completed("9999-12-31 23:59:59")  # the table's stream is not part of this run
    store = _Offsets()
    retry, stop = RetryPolicy(0.1, 1.0), StopSignal()
    async with snow_client(settings) as client, RecordSink(conn) as sink:
        sweep = KeySweep(
            spec,
            requests=SnowRequests(client, alias=spec.alias, retry=retry, stop=stop.event),
            sink=sink,
            store=store,
            retry=retry,
            stop=stop,
            mark=mark,
            keys=TopicKeys(conn),
            status=TableStatus(),
        )
        rss_before, _ = memory_mib_self()
        if trace:
            tracemalloc.start()
        began = time.monotonic()
        summary = await sweep.sweep(fresh_sweep(datetime.now(UTC)))
        wall = time.monotonic() - began
        heap_peak = tracemalloc.get_traced_memory()[1] / 2**20 if trace else None
        tracemalloc.stop()
        rss_after, peak = memory_mib_self()
    return {
        **asdict(summary),
        "wall": wall,
        "heap_peak_mib": heap_peak,
        "rss_before": rss_before,
        "rss_after": rss_after,
        "rss_peak": peak,
        "offset_writes": store.writes,
    }


def memory_mib_self() -> tuple[float, float]:
    """This process's (RSS, peak RSS) in MiB."""

    return memory_mib(os.getpid())


async def prepare(url: str, bootstrap: str, deleted: int, unsent: int) -> str:
    """Fill a topic with the instance's keys but ``unsent``, delete ``deleted`` rows; the topic."""
    topic = f"bench-reconcile-{uuid.uuid4().hex[:8]}"
    settings = _settings(url, bootstrap, topic)
    basic = "Basic " + base64.b64encode(b"admin:admin").decode()
    async with aiohttp.ClientSession(headers={"Authorization": basic}) as session:
        keys = await _instance_keys(session, url)
        began = time.monotonic()
        instance = table_spec(settings, "incident", settings.tables["incident"])
        await _fill(bootstrap, topic, keys[unsent:], instance.partition.instance)
        filled = time.monotonic() - began
        print(f"topic {topic}: {len(keys) - unsent:,} records in {filled:.1f} s")
        step = max(1, len(keys) // max(deleted, 1))
        for key in keys[unsent::step][:deleted]:
            async with session.delete(f"{url}/api/now/table/incident/{key}") as response:
                assert response.status == 204, response.status
    return topic


def _swept(url: str, bootstrap: str, topic: str, *, trace: bool) -> dict[str, Any]:
    """One sweep in a fresh process, so its memory is all the sweep's."""
    command = [sys.executable, "-m", "bench.reconcile", "--sweep", url, topic]
    command += ["--bootstrap", bootstrap, *(["--trace"] if trace else [])]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _report(result: dict[str, Any], traced: dict[str, Any], rows: int) -> None:
    # Pages until the first short one (an exact multiple ends with an empty page).
    key_pages = result["instance_keys"] // KEY_PAGE_SIZE + 1
    live = result["live_in_kafka"]
    print(
        f"sweep of {rows:,} keys: {result['requests']} requests ({key_pages} key pages of "
        f"{KEY_PAGE_SIZE:,}, {result['requests'] - key_pages} re-check), "
        f"{result['offset_writes']} offset writes, {result['tombstones']} tombstones, "
        f"{result['missing_in_kafka']} missing in Kafka, {result['wall']:.1f} s"
    )
    print(f"live keys: {live:,} in a {live * 16 / 2**20:.1f} MiB sorted array (16 bytes a key)")
    grown = result["rss_peak"] - result["rss_before"]
    per_million = 1_000_000 / max(live, 1)
    print(
        f"memory: RSS {result['rss_before']:.0f} MiB before the sweep, peak "
        f"{result['rss_peak']:.0f} MiB (+{grown:.0f} MiB, {grown * per_million:.0f} MiB per "
        f"million keys); Python heap peak {traced['heap_peak_mib']:.0f} MiB "
        f"({traced['heap_peak_mib'] * per_million:.0f} MiB per million keys, tracemalloc run)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--deleted", type=int, default=1000)
    parser.add_argument("--unsent", type=int, default=100)
    parser.add_argument("--sweep", nargs=2, metavar=("URL", "TOPIC"), help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sweep:
        url, topic = args.sweep
        result = asyncio.run(_sweep(_settings(url, args.bootstrap, topic), trace=args.trace))
        print(json.dumps(result))
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.emulator_proc", "--table", f"incident={args.rows}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        url = ready["url"]
        print(f"emulator: {args.rows:,} incidents seeded in {ready['seed_seconds']:.1f} s")
        topic = asyncio.run(prepare(url, args.bootstrap, args.deleted, args.unsent))
        result = _swept(url, args.bootstrap, topic, trace=False)
        # The tombstones are sent: the traced sweep finds nothing more to delete.
        traced = _swept(url, args.bootstrap, topic, trace=True)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=60)
    _report(result, traced, args.rows)


if __name__ == "__main__":
    main()
