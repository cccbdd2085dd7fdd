"""`scripts/registry.sh`: idempotent start, status, a port someone else holds is refused."""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.request
from pathlib import Path

from tests.kafka_support import free_broker_port
from tests.registry_support import REGISTRY_SCRIPT, LocalRegistry


def _script(action: str, port: int, data: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REGISTRY_PORT": str(port), "REGISTRY_DATA": str(data)}
    return subprocess.run(
        [str(REGISTRY_SCRIPT), action],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_start_is_idempotent_and_status_says_so(schema_registry: LocalRegistry) -> None:
    again = _script("start", schema_registry.port, schema_registry.data_dir)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    status = _script("status", schema_registry.port, schema_registry.data_dir)
    assert status.returncode == 0
    assert schema_registry.url in status.stdout
    with urllib.request.urlopen(f"{schema_registry.url}/config", timeout=5) as resp:
        assert b"BACKWARD" in resp.read()  # the global rule the script sets


def test_start_refuses_a_port_held_by_another_process(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_broker_port()))
        sock.listen()
        port = int(sock.getsockname()[1])
        result = _script("start", port, tmp_path / "registry")
    assert result.returncode == 1
    assert f"port {port} is in use" in result.stderr
    assert _script("status", port, tmp_path / "registry").returncode == 1
