"""Helpers to run the project's real local Kafka broker from tests."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KAFKA_SCRIPT = REPO / "scripts" / "kafka.sh"


@dataclass
class LocalBroker:
    """A broker started by ``scripts/kafka.sh`` on its own port and data directory."""

    port: int
    data_dir: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, action: str) -> None:
        env = {**os.environ, "KAFKA_PORT": str(self.port), "KAFKA_DATA": str(self.data_dir)}
        subprocess.run([str(KAFKA_SCRIPT), action], env=env, check=True, timeout=180)

    def start(self) -> None:
        self._run("start")

    def stop(self) -> None:
        self._run("stop")


def unique(prefix: str) -> str:
    """A name no other test uses (topics, connector names, groups)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def free_broker_port() -> int:
    """A listener port that is free, with its controller port (``+1000``) free too."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 1000 > 65535:
            continue
        with socket.socket() as c:
            try:
                c.bind(("127.0.0.1", port + 1000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of ports for a second broker")
