"""Smoke test of the built container image: it is what the Dockerfile promises and it streams.

Runs only when asked for: ``scripts/image.sh smoke`` builds the image and sets
``SNOWSOURCE_IMAGE`` (the tag) and ``SNOWSOURCE_IMAGE_ENGINE`` (docker, podman or buildah). The
emulator runs on the host from the repository's virtualenv, Kafka is the local test broker; the
container reaches both on 127.0.0.1 (host network).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import TopicFactory
from tests.image.container import Engine, Mount
from tests.integration.engine import read_offsets, read_topic
from tests.kafka_support import REPO, unique
from tests.polling import poll_until

IMAGE = os.environ.get("SNOWSOURCE_IMAGE", "")
pytestmark = pytest.mark.skipif(
    not IMAGE,
    reason="image smoke test: run scripts/image.sh smoke (builds the image, sets SNOWSOURCE_IMAGE)",
)

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
CONFIG_PATH = "/etc/snowsource/config.yaml"
SECRETS_DIR = "/run/secrets/snowsource"
TABLES = ("incident", "change_request")
ROWS = 250
SHUTDOWN_SECONDS = 10
APP_UID = 10001


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    kind = os.environ.get("SNOWSOURCE_IMAGE_ENGINE", "")
    found = Engine(kind, IMAGE)
    try:
        yield found
    finally:
        found.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Emulator:
    url: str
    password: str
    sys_ids: dict[str, set[str]]


def _sys_ids(url: str, table: str, authorization: str) -> set[str]:
    query = urllib.parse.urlencode({"sysparm_fields": "sys_id", "sysparm_limit": ROWS * 2})
    request = urllib.request.Request(
        f"{url}/api/now/table/{table}?{query}", headers={"Authorization": authorization}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return {row["sys_id"] for row in json.load(response)["result"]}


def _console_policy(url: str) -> str:
    """GET one console asset (200 or an error); its Content-Security-Policy header."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.headers["Content-Security-Policy"])


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """``snowsource emulator`` as a process on the host, with a password nobody else knows."""
    port, password = _free_port(), secrets.token_urlsafe(12)
    url = f"http://127.0.0.1:{port}"
    authorization = "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()
    command = [str(REPO / ".venv" / "bin" / "snowsource"), "emulator", "--port", str(port)]
    command += ["--tables", ",".join(TABLES), "--rows", str(ROWS), "--password", password]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, f"emulator exited with {process.returncode}"
            try:
                ids = {table: _sys_ids(url, table, authorization) for table in TABLES}
                break
            except urllib.error.HTTPError:
                raise
            except urllib.error.URLError:
                # Not listening yet: connection refused until the seeded server is up.
                assert time.monotonic() < deadline, "emulator did not answer within 30 s"
                time.sleep(0.2)
        assert all(len(found) == ROWS for found in ids.values()), ids
        yield Emulator(url, password, ids)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def test_version_and_labels_name_the_package(engine: Engine) -> None:
    result = engine.run(["--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"snowsource {PROJECT['version']}"
    labels = engine.config().labels
    assert labels["org.opencontainers.image.version"] == PROJECT["version"], (
        "the Dockerfile's ARG VERSION differs from pyproject.toml's version: update the Dockerfile"
    )
    assert labels["org.opencontainers.image.licenses"] == PROJECT["license"]
    assert "org.opencontainers.image.source" in labels
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, check=False
    )
    if head.returncode == 0:  # a source tarball has no commit to compare with
        assert labels["org.opencontainers.image.revision"] == head.stdout.decode().strip()


def test_image_config_runs_snowsource_as_10001_and_stops_it_with_sigterm(engine: Engine) -> None:
    config = engine.config()
    assert config.user == f"{APP_UID}:{APP_UID}"
    assert config.entrypoint == ["snowsource"]
    assert config.cmd == ["run", "--config", CONFIG_PATH]
    assert config.env["SNOWSOURCE_CONFIG"] == CONFIG_PATH
    assert config.stop_signal in ("SIGTERM", "TERM", "15")
    assert config.healthcheck[:2] == ["CMD", "python"]
    # The image's own user, not one the engine was asked for.
    result = engine.run(
        ["-c", "import os; print(os.getuid(), os.getgid(), os.getcwd())"], entrypoint=["python"]
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(APP_UID), str(APP_UID), "/tmp"]


# Runs inside the image as root (so nothing is unreadable): reports importable build or test
# tooling, tools on PATH, and every file holding a certificate the host's CA bundle has beyond
# the image's own.
SCAN = r"""
import importlib.util, json, os, re, shutil, sys
pem = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.*?)-----END CERTIFICATE-----", re.S)
def bodies(path):
    try:
        data = open(path, "rb").read()
    except OSError:
        return set()
    return {b"".join(m.split()) for m in pem.findall(data)}
host = bodies("/run/host-ca/ca.pem")
extra = host - bodies("/etc/ssl/certs/ca-certificates.crt")
holders = []
for top, dirs, files in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    if top.startswith("/run/host-ca"):
        continue
    for name in files:
        path = os.path.join(top, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            data = open(path, "rb").read()
        except OSError:
            continue
        flat = b"".join(data.split())
        if any(body in flat for body in extra):
            holders.append(path)
print(json.dumps({
    "host_certs": len(host),
    "extra_certs": len(extra),
    "holders": holders,
    "modules": [m for m in ("pip", "setuptools", "wheel", "pytest", "_pytest", "hypothesis",
                            "mypy", "ruff") if importlib.util.find_spec(m)],
    "venv_bin": sorted(os.listdir(os.path.dirname(sys.executable))),
    "compilers": [t for t in ("gcc", "cc", "make") if shutil.which(t)],
    "src": os.path.exists("/src"),
}))
"""


def test_image_holds_no_build_or_test_tooling_and_not_the_hosts_ca(engine: Engine) -> None:
    host_ca = os.environ.get("SNOWSOURCE_IMAGE_HOST_CA", "")
    mounts = [Mount(Path(host_ca), "/run/host-ca/ca.pem")] if host_ca else []
    result = engine.run(["-c", SCAN], entrypoint=["python"], user="0:0", mounts=mounts)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["modules"] == []
    assert found["compilers"] == []
    assert not found["src"]
    assert not [n for n in found["venv_bin"] if n.startswith(("pip", "pytest", "ruff", "mypy"))]
    assert "snowsource" in found["venv_bin"]
    if host_ca:
        assert found["host_certs"] > 0, f"no certificate read from {host_ca}"
        # The host's bundle mounted for the build must not have stayed anywhere in the image.
        assert found["holders"] == [], found
    print(
        f"host CA bundle: {found['host_certs']} certificates, "
        f"{found['extra_certs']} beyond the image's own; none kept"
    )


def _write_config(
    tmp_path: Path, emu: Emulator, bootstrap: str, topics: dict[str, str]
) -> tuple[Path, dict[str, Any]]:
    rest_port = _free_port()
    document = {
        "name": unique("image"),
        "snow": {
            "url": emu.url,
            "auth": {
                "type": "basic",
                "username": "admin",
                "password.file": f"{SECRETS_DIR}/snow-password",
            },
            "tables": {alias: {"name": alias, "topic": topics[alias]} for alias in TABLES},
        },
        "batch.size": 100,
        "poll.interval.ms": 500,
        "safety.lag.seconds": 0,
        "shutdown.timeout.seconds": SHUTDOWN_SECONDS,
        "kafka": {"bootstrap.servers": bootstrap, "startup.timeout.seconds": 30},
        "offset.storage.topic": unique("image-offsets"),
        "offset.storage.partitions": 1,
        "rest": {"host": "127.0.0.1", "port": rest_port},
        "log": {"format": "json", "level": "INFO"},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o644)
    return path, document


def _secrets_dir(tmp_path: Path, password: str) -> Path:
    """The password as Kubernetes mounts a secret: readable by root and group 10001 only."""
    folder = tmp_path / "secrets"
    folder.mkdir()
    (folder / "snow-password").write_text(password + "\n")
    if os.geteuid() == 0:
        os.chown(folder / "snow-password", 0, APP_UID)
        (folder / "snow-password").chmod(0o440)
    else:
        (folder / "snow-password").chmod(0o444)
    folder.chmod(0o755)
    return folder


@pytest.mark.timeout(300)
async def test_check_and_run_in_the_image_deliver_rows_and_sigterm_exits_0(
    engine: Engine,
    emulator: Emulator,
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    tmp_path: Path,
) -> None:
    topics = {alias: await topic_factory(f"image-{alias}") for alias in TABLES}
    config, document = _write_config(tmp_path, emulator, kafka_bootstrap, topics)
    mounts = [
        Mount(config, CONFIG_PATH),
        Mount(_secrets_dir(tmp_path, emulator.password), SECRETS_DIR),
    ]
    rest_port = document["rest"]["port"]

    # `check` finds the config through $SNOWSOURCE_CONFIG: no --config given.
    checked = await asyncio.to_thread(engine.run, ["check"], mounts=mounts)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert " 0 failed" in checked.stdout, checked.stdout

    log = tmp_path / "run.log"
    running = engine.start(None, log=log, mounts=mounts)
    try:

        async def delivered() -> bool:
            assert running.process.poll() is None, log.read_text()[-3000:]
            for alias in TABLES:
                records = await read_topic(kafka_bootstrap, topics[alias])
                if {r.key.decode() for r in records if r.key} != emulator.sys_ids[alias]:
                    return False
            return True

        await poll_until(delivered, timeout=120, interval=1)

        # The image's HEALTHCHECK command, run beside the daemon as the engine would run it.
        health = engine.config().healthcheck[1:]
        url = {"HEALTHCHECK_URL": f"http://127.0.0.1:{rest_port}/health/live"}

        def healthy() -> bool:
            done = engine.run(health[1:], entrypoint=health[:1], env=url)
            return done.returncode == 0

        await poll_until(lambda: asyncio.to_thread(healthy), timeout=60, interval=1)
        # The console's files are package data: the image must carry them.
        for asset in ("/console", "/console/console.js", "/console/console.css"):
            policy = await asyncio.to_thread(
                _console_policy, f"http://127.0.0.1:{rest_port}{asset}"
            )
            assert "default-src 'self'" in policy, asset

        started = time.monotonic()
        code = await asyncio.to_thread(running.stop, SHUTDOWN_SECONDS + 20)
        elapsed = time.monotonic() - started
    finally:
        running.kill()
    output = log.read_text()
    assert code == 0, output[-3000:]
    assert "shutdown complete" in output, output[-3000:]
    assert elapsed < SHUTDOWN_SECONDS, f"stopped after {elapsed:.1f}s: {output[-3000:]}"
    assert emulator.password not in output + checked.stdout + checked.stderr
    # The final offsets were written before the exit: one per table.
    offsets = await read_offsets(
        kafka_bootstrap, document["offset.storage.topic"], document["name"]
    )
    assert sorted(offsets) == sorted(TABLES), offsets
    print(f"{len(TABLES) * ROWS} rows in Kafka; SIGTERM -> exit 0 in {elapsed:.1f}s")
