"""``make demo`` headless: every table's rows reach Kafka, then a clean stop (scripts/demo.py)."""

from __future__ import annotations

import asyncio
import os
import re
import sys

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from snowsource.config.settings import load_config
from tests.integration.engine import read_offsets, read_topic
from tests.kafka_support import REPO, unique

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TABLES = ("incident", "change_request", "cmdb_ci")


async def test_headless_demo_streams_every_table(
    kafka_bootstrap: str, kafka_admin: AIOKafkaAdminClient
) -> None:
    prefix = unique("demo") + "."
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNOWSOURCE_", "DEMO_"))}
    env.update(
        {
            "DEMO_SECONDS": "20",
            "DEMO_ROWS": "300",
            "DEMO_LATENCY_MS": "0",
            "DEMO_TOPIC_PREFIX": prefix,
            "KAFKA_BOOTSTRAP": kafka_bootstrap,
        }
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "scripts" / "demo.py"),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=100)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    output = out.decode("utf-8", "replace")
    topics = [prefix + table for table in TABLES]
    try:
        assert proc.returncode == 0, output[-4000:]
        assert "Summary" in output
        assert "OK: every table delivered rows" in output
        config = re.search(r"offsets list --config (\S+)", output)
        assert config is not None, output[-2000:]

        for table, topic in zip(TABLES, topics, strict=True):
            records = await read_topic(kafka_bootstrap, topic)
            assert records, f"no records in {topic}"
            assert {r.headers["snow.table"] for r in records} == {table.encode()}
            assert all(r.key for r in records)

        # The clean shutdown committed every table's position in the offsets topic.
        settings = load_config(config.group(1), env={}).settings
        offsets = await read_offsets(kafka_bootstrap, settings.offset_storage_topic, settings.name)
        assert set(offsets) == set(TABLES)
        assert {offset["phase"] for offset in offsets.values()} == {"stream"}
    finally:
        existing = [t for t in topics if t in await kafka_admin.list_topics()]
        if existing:
            await kafka_admin.delete_topics(existing)
