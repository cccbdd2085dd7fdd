"""``snow.discover`` and ``backfill.max.tables``: defaults, the template rule (SPEC §15.2)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.discovery import DiscoverRules
from snowsource.core.errors import ConfigError

BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "u", "password": "p"},
        "discover": {"extends": ["task"]},
    },
    "topic.prefix": "sn.",
    "batch.size": 200,
}


def _load(tmp_path: Path, doc: dict[str, Any]) -> Settings:
    file = tmp_path / "config.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_config(file, env={}).settings


def _with(**discover: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["snow"]["discover"].update(discover)
    return doc


def _problems(tmp_path: Path, doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, doc)
    return dict(info.value.problems)


def test_discover_alone_needs_no_explicit_table(tmp_path: Path) -> None:
    settings = _load(tmp_path, BASE)
    discover = settings.snow.discover
    assert discover is not None
    assert settings.tables == {}
    assert discover.rules == DiscoverRules(include=("*",), extends=("task",))
    assert discover.interval_seconds == 3600
    assert settings.backfill_max_tables == 4


def test_without_tables_or_discover_is_still_an_error(tmp_path: Path) -> None:
    doc = copy.deepcopy(BASE)
    del doc["snow"]["discover"]
    assert "snow.tables" in _problems(tmp_path, doc)


def test_a_discovered_table_takes_the_template_over_the_top_level(tmp_path: Path) -> None:
    settings = _load(tmp_path, _with(template={"poll.interval.ms": 900, "deletes": "reconcile"}))
    table = settings.discovered_table("problem")
    assert (table.alias, table.name, table.topic) == ("problem", "problem", "sn.problem")
    assert table.batch_size == 200  # inherited from the top level
    assert table.poll_interval_ms == 900
    assert table.deletes.reconcile


@pytest.mark.parametrize("key", ["name", "topic"])
def test_template_may_not_set_name_or_topic(tmp_path: Path, key: str) -> None:
    problems = _problems(tmp_path, _with(template={key: "x"}))
    assert f"snow.discover.template.{key}" in problems


def test_a_bad_template_value_names_its_key(tmp_path: Path) -> None:
    problems = _problems(tmp_path, _with(template={"batch.size": 0}))
    assert any(k.startswith("snow.discover.template.batch.size") for k in problems), problems


def test_unknown_discover_key_and_bad_interval(tmp_path: Path) -> None:
    problems = _problems(tmp_path, _with(**{"interval.seconds": 0, "includes": ["x"]}))
    assert "snow.discover.interval.seconds" in problems
    assert "snow.discover.includes" in problems


def test_a_single_glob_is_a_list_of_one(tmp_path: Path) -> None:
    discover = _load(tmp_path, _with(include="u_*")).snow.discover
    assert discover is not None
    assert discover.include == ["u_*"]
