"""Reading the output topics back: rows that really reached Kafka; ``peek`` at a topic."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from snowsource.adapters.kafka import KafkaConnection, admin_client, existing_topics
from snowsource.demo.progress import TableView

_BACKLOG_EVERY: Final = 1.0  # seconds between end-offset requests


class KafkaTracker:
    """Counts each view's records from where its topic ended when the demo started, and how
    many the topic holds that were not read back yet (``TableView.backlog``)."""

    def __init__(self, bootstrap: str, views: list[TableView]) -> None:
        self._conn = KafkaConnection(bootstrap_servers=bootstrap, client_id="snowsource-demo")
        self._views = {view.topic: view for view in views}
        self._consumer = AIOKafkaConsumer(**self._conn.client_kwargs(), enable_auto_commit=False)
        self._assigned: set[TopicPartition] = set()
        self._next_backlog = 0.0

    async def __aenter__(self) -> KafkaTracker:
        await self._consumer.start()
        await self._discover(baseline=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def _discover(self, *, baseline: bool = False) -> None:
        """Assign partitions of topics that exist now (the daemon creates them at start)."""
        async with admin_client(self._conn) as admin:
            found = await existing_topics(admin, list(self._views))
        new = {
            TopicPartition(topic, partition)
            for topic, count in found.items()
            for partition in range(count)
        } - self._assigned
        if not new:
            return
        # Topics that existed before this run: count only what this run adds.
        ends = await self._consumer.end_offsets(list(new)) if baseline else {}
        # assign() replaces the whole assignment and forgets every position: without putting
        # them back, partitions already followed would jump to the end and their rows go uncounted.
        kept = {tp: await self._consumer.position(tp) for tp in self._assigned}
        self._assigned |= new
        self._consumer.assign(sorted(self._assigned))
        for tp, position in kept.items():
            self._consumer.seek(tp, position)
        for tp in new:
            self._consumer.seek(tp, ends.get(tp, 0))

    async def poll(self) -> None:
        """Consume what arrived; call repeatedly."""
        if len({tp.topic for tp in self._assigned}) < len(self._views):
            with contextlib.suppress(KafkaError, OSError):
                await self._discover()
        if not self._assigned:
            await asyncio.sleep(0.2)
            return
        batches = await self._consumer.getmany(timeout_ms=200, max_records=20000)
        for tp, records in batches.items():
            self._views[tp.topic].rows += len(records)
        if time.monotonic() >= self._next_backlog:
            self._next_backlog = time.monotonic() + _BACKLOG_EVERY
            with contextlib.suppress(KafkaError, OSError):
                await self._measure_backlog()

    async def _measure_backlog(self) -> None:
        assigned = sorted(self._assigned)
        ends = await self._consumer.end_offsets(assigned)
        behind: dict[str, int] = {}
        for tp in assigned:
            position = await self._consumer.position(tp)
            behind[tp.topic] = behind.get(tp.topic, 0) + max(ends[tp] - position, 0)
        for topic, count in behind.items():
            self._views[topic].backlog = count

    async def drain(self, within: float) -> None:
        """Read up to the current end of every topic (after the daemon stopped)."""
        deadline = time.monotonic() + within
        with contextlib.suppress(KafkaError, OSError):
            await self._discover()
        if not self._assigned:
            return
        ends = await self._consumer.end_offsets(sorted(self._assigned))
        while time.monotonic() < deadline:
            positions = {tp: await self._consumer.position(tp) for tp in self._assigned}
            if all(positions[tp] >= ends[tp] for tp in self._assigned):
                await self._measure_backlog()
                return
            await self.poll()


def _shown(value: bytes | None) -> Any:
    """A record value as JSON, or what a Schema Registry-framed value is (``demo-avro``)."""
    if value is None:
        return None
    if value[:1] == b"\x00" and len(value) >= 5:
        schema_id = int.from_bytes(value[1:5], "big")
        return f"<Confluent-framed: schema id {schema_id}, {len(value) - 5} bytes>"
    return json.loads(value)


async def peek(topic: str, count: int, bootstrap: str) -> int:
    """Print the last ``count`` records of ``topic``: key, headers, value."""
    conn = KafkaConnection(bootstrap_servers=bootstrap, client_id="snowsource-demo-peek")
    async with admin_client(conn) as admin:
        found = await existing_topics(admin, [topic])
    if topic not in found:
        print(f"peek: topic {topic!r} not found at {bootstrap}", file=sys.stderr)
        return 1
    consumer = AIOKafkaConsumer(**conn.client_kwargs(), enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(found[topic])]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        for tp in tps:
            consumer.seek(tp, max(ends[tp] - count, starts[tp]))
        records: list[Any] = []
        pending = [tp for tp in tps if ends[tp] > starts[tp]]
        while pending:
            for tp, batch in (await consumer.getmany(*pending, timeout_ms=1000)).items():
                records.extend(r for r in batch if r.offset < ends[tp])
            pending = [tp for tp in pending if await consumer.position(tp) < ends[tp]]
        for record in sorted(records, key=lambda r: r.timestamp)[-count:]:
            headers = {k: v.decode("utf-8", "replace") for k, v in record.headers}
            key = record.key.decode("utf-8", "replace") if record.key else None
            value = _shown(record.value)
            print(f"--- {topic}[{record.partition}]@{record.offset} key={key}")
            print(f"    headers: {json.dumps(headers)}")
            print("    value: " + json.dumps(value, indent=2).replace("\n", "\n    "))
        if not records:
            print(f"peek: topic {topic!r} is empty")
        return 0
    finally:
        await consumer.stop()
