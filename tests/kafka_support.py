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


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_broker_port() -> int:
    """A port for a second broker: free, and so is its controller port (``port + 1000``, as
    ``scripts/kafka.sh`` uses), so it never collides with a broker someone else runs."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + 1000 < 65536 and _bindable(port + 1000):
            return port
    raise RuntimeError("no free port pair (port, port + 1000) found for a second broker")


def unique(prefix: str) -> str:
    """A name no other test uses (topics, connector names, groups)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


CONNECT_SCRIPT = REPO / "scripts" / "connect.sh"


@dataclass
class LocalConnect:
    """A Kafka Connect standalone worker started by ``scripts/connect.sh`` for a broker."""

    bootstrap: str
    port: int
    data_dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, action: str) -> None:
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": self.bootstrap,
            "CONNECT_PORT": str(self.port),
            "CONNECT_DATA": str(self.data_dir),
        }
        subprocess.run([str(CONNECT_SCRIPT), action], env=env, check=True, timeout=300)

    def start(self) -> None:
        self._run("start")

    def stop(self) -> None:
        self._run("stop")
