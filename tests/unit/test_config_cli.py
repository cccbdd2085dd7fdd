"""Exit code 2 for configuration problems, as the user sees them on the command line."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

SECRET = "Hunter2:p@ss/w#rd"
VALID = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"username": "u", "password": "p"},
        "tables": {"incident": {"name": "incident"}},
    },
    # Nothing may be contacted on the way to exit 2: point Kafka at a port nobody serves.
    "kafka": {"bootstrap.servers": "127.0.0.1:9", "startup.timeout.seconds": 1},
    "rest": {"enabled": False},
}


def _snowsource(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")}
    return subprocess.run(
        [sys.executable, "-m", "snowsource", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
        check=False,
    )


@pytest.mark.parametrize("command", [["run"], ["check"], ["offsets", "list"]])
def test_missing_config_file_is_named_as_such(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nope.yaml"
    result = _snowsource(*command, "--config", str(missing), cwd=tmp_path)
    assert result.returncode == 2, result
    output = result.stdout + result.stderr
    assert f"config file not found: {missing}" in output
    assert "invalid configuration" not in output


def test_default_config_path_missing_is_named(tmp_path: Path) -> None:
    result = _snowsource("run", cwd=tmp_path)
    assert result.returncode == 2
    assert "config file not found: config.yaml" in result.stderr


def test_alias_bomb_exits_2_naming_the_line(tmp_path: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    result = _snowsource("run", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 2
    assert "YAML refused at line 5" in result.stderr


@pytest.mark.parametrize("command", ["run", "check"])
def test_secrets_never_reach_the_terminal(tmp_path: Path, command: str) -> None:
    doc = yaml.safe_load(yaml.safe_dump(VALID))
    doc["snow"]["url"] = f"https://admin:{quote(SECRET, safe='')}@acme.service-now.com"
    doc["snow"]["auth"]["pasword"] = SECRET
    doc["snow"]["http"] = {"proxy.url": f"socks5://admin:{SECRET}@proxy:1080"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = _snowsource(command, "--config", str(path), cwd=tmp_path)
    assert result.returncode == 2, result
    output = result.stdout + result.stderr
    for key in ("snow.url", "snow.auth.pasword", "snow.http.proxy.url"):
        assert key in output
    assert "https://admin:***@acme.service-now.com" in output
    for needle in (
        SECRET,
        quote(SECRET, safe=""),
        base64.b64encode(f"admin:{SECRET}".encode()).decode(),
        "Hunter2",
    ):
        assert needle not in output
