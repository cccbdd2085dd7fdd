"""`scripts/kafka.sh start` is ready only when *its own* broker serves the port; first runs say
what they fetch."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kafka_support import KAFKA_SCRIPT, free_broker_port


def _script(action: str, port: int, data: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_DATA": str(data)}
    return subprocess.run(
        [str(KAFKA_SCRIPT), action],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A plain socket listening on a port: it accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_broker_port()))
        sock.listen()
        yield sock


def test_start_refuses_a_port_held_by_a_plain_listener(
    listener: socket.socket, tmp_path: Path
) -> None:
    port = int(listener.getsockname()[1])
    result = _script("start", port, tmp_path / "kafka")
    assert result.returncode != 0
    assert f"port {port} is in use by another process (pid {os.getpid()})" in result.stderr
    assert "ready" not in result.stderr
    assert not (tmp_path / "kafka" / "kafka.pid").exists()


def test_start_refuses_when_the_controller_port_is_taken(tmp_path: Path) -> None:
    port = free_broker_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port + 1000))
        sock.listen()
        result = _script("start", port, tmp_path / "kafka")
    assert result.returncode != 0
    assert f"port {port + 1000} is in use by another process" in result.stderr


def test_start_refuses_a_port_served_by_another_broker(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # Something that answers Kafka metadata requests, but not a broker of this data directory.
    port = int(kafka_bootstrap.rsplit(":", 1)[1])
    result = _script("start", port, tmp_path / "elsewhere")
    assert result.returncode != 0
    assert f"port {port} is in use by another process" in result.stderr
    assert _script("status", port, tmp_path / "elsewhere").returncode == 1


def test_a_pid_file_naming_an_unrelated_process_is_not_a_running_broker(
    listener: socket.socket, tmp_path: Path
) -> None:
    port = int(listener.getsockname()[1])
    data = tmp_path / "kafka"
    data.mkdir()
    (data / "kafka.pid").write_text(f"{os.getpid()}\n")  # alive, but not a broker
    status = _script("status", port, data)
    assert (status.returncode, status.stdout.strip()) == (1, "not running")
    start = _script("start", port, data)
    assert start.returncode != 0
    assert f"port {port} is in use by another process" in start.stderr


def test_first_run_says_what_it_fetches_and_how_long_it_takes(tmp_path: Path) -> None:
    # A Maven that fails at once stands in for the real one: no network needed.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mvn"
    fake.write_text("#!/bin/sh\necho 'fake mvn: offline' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "KAFKA_PORT": str(free_broker_port()),
        "KAFKA_DATA": str(tmp_path / "kafka"),
        "KAFKA_CACHE": str(tmp_path / "cache"),
    }
    env.pop("KAFKA_HOME", None)
    result = subprocess.run(
        [str(KAFKA_SCRIPT), "start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "first run: fetching Apache Kafka" in result.stderr
    assert "from Maven Central" in result.stderr
    assert "1-3 minutes" in result.stderr
    assert "fake mvn: offline" in result.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_install_says_what_pip_installs() -> None:
    result = subprocess.run(
        ["make", "-n", "-B", "install"],
        cwd=KAFKA_SCRIPT.parents[1],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "installing snowsource and its pinned dependencies" in result.stdout
    assert "usually under a minute" in result.stdout
