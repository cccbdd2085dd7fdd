"""The project's real Schema Registry (``scripts/registry.sh``: Apicurio, in memory) from tests."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.kafka_support import REPO

REGISTRY_SCRIPT = REPO / "scripts" / "registry.sh"


@dataclass
class LocalRegistry:
    """A registry started by ``scripts/registry.sh`` on its own port and data directory.

    Its storage is in memory: :meth:`restart` gives a registry that knows no schema.
    """

    port: int
    data_dir: Path

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    @property
    def apicurio_url(self) -> str:
        """Apicurio's own v2 API (what Apicurio's Kafka Connect converter talks to)."""
        return f"http://127.0.0.1:{self.port}/apis/registry/v2"

    def _run(self, action: str) -> None:
        env = {**os.environ, "REGISTRY_PORT": str(self.port), "REGISTRY_DATA": str(self.data_dir)}
        subprocess.run([str(REGISTRY_SCRIPT), action], env=env, check=True, timeout=300)

    def start(self) -> None:
        self._run("start")

    def stop(self) -> None:
        self._run("stop")


def session_registry() -> LocalRegistry:
    """The registry of ``REGISTRY_PORT`` (default 8081), as ``make test`` and CI start it."""
    port = int(os.environ.get("REGISTRY_PORT", "8081"))
    return LocalRegistry(port=port, data_dir=REPO / ".kafka" / f"registry-{port}")
