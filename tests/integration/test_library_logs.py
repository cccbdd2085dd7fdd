"""A Kafka outage at start, as the real process logs it: aiokafka's reconnect errors are JSON
lines, limited to one per message per 10 s, and the run ends with exit 1 naming the cause."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

from tests.integration.engine import base_config, write_config
from tests.kafka_support import REPO


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens once the socket is closed


async def test_kafka_outage_logs_are_json_and_rate_limited(tmp_path: Path) -> None:
    document = base_config(
        emulator_url="http://127.0.0.1:9",
        bootstrap=f"127.0.0.1:{_closed_port()}",
        name="outage",
        offsets_topic="outage-offsets",
        tables={"incident": {"name": "incident"}},
    )
    document["kafka"]["startup.timeout.seconds"] = 12
    config = write_config(tmp_path / "outage.yaml", document)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "snowsource", "run", "--config", str(config),
        cwd=REPO, env=clean, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 1
    assert err == b""
    events = [json.loads(line) for line in out.decode().splitlines()]
    assert all(isinstance(e, dict) for e in events)
    library = [e for e in events if str(e.get("logger", "")).startswith("aiokafka")]
    retries = [e for e in events if e["event"] == "kafka not reachable yet, retrying"]
    assert len(retries) >= 4  # the daemon did retry for 12 s ...
    assert 1 <= len(library) <= 3  # ... but aiokafka's identical errors were held back
    assert any("repeated" in e for e in library) or len(library) == 1
    assert events[-1]["event"] == "fatal"
    assert "could not be reached within 12s" in events[-1]["error"]
