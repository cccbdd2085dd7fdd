"""The config file's YAML: anchors and aliases are bounded, and ordinary use of them still works."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snowsource.config.loader import load_config
from snowsource.config.yaml_loader import MAX_EXPANDED_NODES
from snowsource.core.errors import ConfigError

HEADER = "snow:\n  url: https://acme.service-now.com\n  auth: {username: u, password: p}\n"


def _bomb() -> str:
    # "Billion laughs": nine levels of nine aliases, 9**9 strings once expanded.
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _refusal(path: Path) -> tuple[str, int]:
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    text = str(info.value)
    match = re.search(r"YAML refused at line (\d+)", text)
    assert match, text
    return text, int(match[1])


# A hang fails by this timeout rather than by measuring anything.
@pytest.mark.timeout(10)
def test_alias_bomb_is_refused_naming_the_line(tmp_path: Path) -> None:
    text = _bomb()
    assert len(text.encode()) < 600
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    message, line = _refusal(path)
    assert f"more than {MAX_EXPANDED_NODES} nodes" in message
    assert str(path) in message
    assert "*" in text.splitlines()[line - 1]


def _tables_sharing_fields(tables: int, fields: int = 99) -> str:
    names = ", ".join(f"f{i}" for i in range(fields))
    lines = [HEADER + "  tables:", f"    t0: {{name: t0, fields: &f [{names}]}}"]
    lines += [f"    t{i}: {{name: t{i}, fields: *f}}" for i in range(1, tables)]
    return "\n".join(lines) + "\n"


def test_expansion_just_below_the_limit_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(_tables_sharing_fields(90))
    cfg = load_config(path, env={}).settings
    assert len(cfg.tables) == 90
    assert cfg.tables["t89"].fields == cfg.tables["t0"].fields


def test_expansion_just_above_the_limit_is_refused_at_the_alias(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    text = _tables_sharing_fields(110)
    path.write_text(text)
    _message, line = _refusal(path)
    assert "*f" in text.splitlines()[line - 1]


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + "  tables: &t\n    incident: {name: incident, fields: *t}\n")
    message, line = _refusal(path)
    assert "refers to its own anchor" in message
    assert line == 5


def test_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        HEADER + "  tables:\n"
        "    incident: &defaults {name: incident, batch.size: 50, query: active=true}\n"
        "    problem: {<<: *defaults, name: problem}\n"
    )
    cfg = load_config(path, env={}).settings
    assert cfg.tables["problem"].batch_size == 50
    assert cfg.tables["problem"].query == "active=true"
    assert cfg.tables["problem"].name == "problem"


@pytest.mark.parametrize("depth", [101, 100_000])
def test_deep_nesting_is_refused_naming_the_line(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + "  tables:\n    incident:\n      fields: " + "[" * depth + "]" * depth)
    message, line = _refusal(path)
    assert "levels deep" in message
    assert line == 6


def test_nesting_within_the_bound_reaches_validation(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + "  tables:\n    incident:\n      fields: " + "[" * 90 + "]" * 90)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert "snow.tables.incident.fields[0]" in dict(info.value.problems)
