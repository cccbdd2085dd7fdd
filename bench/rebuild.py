"""What rebuilding a table's dedup cache costs at a restart: ``read_window`` on a real topic.

    python -m bench.rebuild [--bootstrap HOST:PORT] [--records N] [--partitions P]
                            [--window W ...] [--runs R]

Fills a fresh topic with ``N`` records shaped like the daemon's (incident-sized JSON values, the
four ``snow.*`` headers, ten rows per second of ``snow.timestamp``), then times the rebuild for
re-read windows holding ``W`` of the newest records (what ``overlap.seconds`` times the table's
change rate amounts to). Prints one line per window: the records found, the records scanned and
the median wall time. The topic is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.topic_tail import read_window
from snowsource.engine.resume import scan_cap

BASE = datetime(2026, 9, 1, tzinfo=UTC)
ROWS_PER_SECOND = 10
INSTANCE = "bench.service-now.com"


def _ts(index: int) -> str:
    return (BASE + timedelta(seconds=index // ROWS_PER_SECOND)).strftime("%Y-%m-%d %H:%M:%S")


async def _fill(bootstrap: str, topic: str, records: int) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=1 << 20
    )
    await producer.start()
    try:
        filler = "x" * 500
        pending = []
        for i in range(records):
            key = uuid.UUID(int=i).hex
            value = f'{{"sys_id":"{key}","short_description":"{filler}","n":"{i}"}}'.encode()
            headers = [
                ("snow.instance", INSTANCE.encode()),
                ("snow.table", b"incident"),
                ("snow.timestamp", _ts(i).encode()),
                ("snow.phase", b"backfill"),
            ]
            pending.append(await producer.send(topic, value, key=key.encode(), headers=headers))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def run(bootstrap: str, records: int, partitions: int, windows: list[int], runs: int) -> None:
    topic = f"bench-rebuild-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
        began = time.monotonic()
        await _fill(bootstrap, topic, records)
        print(
            f"topic {topic}: {records} records, {partitions} partitions, filled in "
            f"{time.monotonic() - began:.1f} s"
        )
        conn = KafkaConnection(bootstrap)
        for window in windows:
            since = _ts(records - window)
            floor = _ts(max(records - 2 * window, 0))
            times: list[float] = []
            found = scanned = 0
            for _ in range(runs):
                began = time.monotonic()
                result = await read_window(
                    conn,
                    topic,
                    instance=INSTANCE,
                    table="incident",
                    since=since,
                    slack_floor=floor,
                    max_scanned=scan_cap(200_000),
                )
                times.append(time.monotonic() - began)
                found, scanned = len(result.records), result.scanned
            print(
                f"window {window:>7} records: found {found:>7}, scanned {scanned:>7}, "
                f"median {statistics.median(times):.3f} s over {runs} run(s)"
            )
    finally:
        await admin.delete_topics([topic])
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    default = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}"
    parser.add_argument("--bootstrap", default=default)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--window", type=int, action="append", dest="windows")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    windows = args.windows or [100, 1_000, 10_000, 50_000]
    asyncio.run(run(args.bootstrap, args.records, args.partitions, windows, args.runs))


if __name__ == "__main__":
    main()
