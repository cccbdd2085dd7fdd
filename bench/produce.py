"""(b) Bare aiokafka produce of the records the daemon would write for the same rows.

    python -m bench.produce URL BOOTSTRAP TOPIC TABLE [TABLE ...] [--mode send|page]

Pages are read from the emulator and turned into the daemon's records (key = sys_id, value =
the row's compact JSON, the four ``snow.*`` headers) outside the measurement; only handing the
records to Kafka and waiting for their acks is timed. ``send`` is aiokafka's per-record path as
the daemon uses it today (one awaited ``send`` and one future per record, then wait for all);
``page`` is the batch path for the poller switch (``RecordSink.send_page``, one batch per
partition). Prints one JSON line: rows, wall seconds and CPU seconds of the timed sections.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
from aiokafka import AIOKafkaProducer

from bench.pager import START, page_params
from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.sink import RecordSink, ensure_topics
from snowsource.core.cursor import Position, format_ts, page_query
from snowsource.core.outbound import PageRecord

Record = tuple[bytes, bytes, bytes]
"""key, value and the row's raw timestamp (for the ``snow.timestamp`` header)."""


async def pages(url: str, table: str, batch: int) -> AsyncIterator[list[Record]]:
    """The daemon's records for ``table``, one page at a time."""
    hi = format_ts(datetime.now(UTC))
    position = Position(START, "")
    async with aiohttp.ClientSession(auth=aiohttp.BasicAuth("admin", "admin")) as session:
        while True:
            params = page_params(page_query("", "sys_updated_on", "sys_id", position, hi), batch)
            async with session.get(f"{url}/api/now/table/{table}", params=params) as resp:
                rows: list[dict[str, Any]] = orjson.loads(await resp.read())["result"]
            yield [
                (row["sys_id"].encode(), orjson.dumps(row), row["sys_updated_on"].encode())
                for row in rows
            ]
            if len(rows) < batch:
                return
            position = Position(rows[-1]["sys_updated_on"], rows[-1]["sys_id"])


async def run(
    url: str, bootstrap: str, topic: str, tables: list[str], *, mode: str, batch: int
) -> dict[str, float]:
    conn = KafkaConnection(bootstrap)
    problems = await ensure_topics(
        conn, [topic], create=True, partitions=-1, replication_factor=-1, configs={}
    )
    assert not problems, problems
    rows = 0
    wall = cpu = 0.0
    producer = AIOKafkaProducer(**conn.client_kwargs(), acks="all", enable_idempotence=True)
    sink = RecordSink(conn)
    await producer.start()
    await sink.start()
    try:
        for table in tables:
            common = [("snow.instance", b"127.0.0.1"), ("snow.table", table.encode())]
            phase = ("snow.phase", b"backfill")
            async for page in pages(url, table, batch):
                started, used = time.perf_counter(), time.process_time()
                if mode == "send":
                    futures = [
                        await producer.send(
                            topic, value, key=key, headers=[*common, ("snow.timestamp", ts), phase]
                        )
                        for key, value, ts in page
                    ]
                    await asyncio.gather(*futures)
                else:
                    records = [
                        PageRecord(key, value, [("snow.timestamp", ts), phase])
                        for key, value, ts in page
                    ]
                    ack = await (await sink.send_page(topic, records, headers=common))
                    assert ack.complete, ack
                wall += time.perf_counter() - started
                cpu += time.process_time() - used
                rows += len(page)
    finally:
        await sink.close()
        await producer.stop()
    return {"rows": rows, "wall": wall, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("tables", nargs="+")
    parser.add_argument("--mode", choices=("send", "page"), default="send")
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    result = asyncio.run(
        run(args.url, args.bootstrap, args.topic, args.tables, mode=args.mode, batch=args.batch)
    )
    print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()
