"""``backfill.slices`` and ``backfill.max.ahead.rows``: defaults, overrides, validation (§14.2)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.errors import ConfigError
from snowsource.engine.table_specs import table_spec

BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "u", "password": "p"},
        "tables": {"incident": {"name": "incident"}, "task": {"name": "task"}},
    }
}


def _load(tmp_path: Path, doc: dict[str, Any], env: dict[str, str] | None = None) -> Settings:
    file = tmp_path / "config.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_config(file, env=env or {}).settings


def _with(top: dict[str, Any] | None = None, incident: dict[str, Any] | None = None) -> Any:
    doc = copy.deepcopy(BASE)
    doc.update(top or {})
    doc["snow"]["tables"]["incident"].update(incident or {})
    return doc


def _problems(tmp_path: Path, doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, doc)
    return dict(info.value.problems)


def test_defaults_are_four_slices_and_fifty_thousand_rows(tmp_path: Path) -> None:
    cfg = _load(tmp_path, _with())
    assert (cfg.backfill_slices, cfg.backfill_max_ahead_rows) == (4, 50000)
    table = cfg.tables["incident"]
    assert (table.backfill_slices, table.backfill_max_ahead_rows) == (4, 50000)
    spec = table_spec(cfg, "incident", table)
    assert (spec.backfill_slices, spec.backfill_max_ahead_rows) == (4, 50000)


def test_top_level_values_are_inherited_and_a_table_may_override(tmp_path: Path) -> None:
    doc = _with(
        {"backfill.slices": 8, "backfill.max.ahead.rows": 20000},
        {"backfill.slices": 1, "backfill.max.ahead.rows": 1000},
    )
    cfg = _load(tmp_path, doc)
    assert (cfg.tables["task"].backfill_slices, cfg.tables["task"].backfill_max_ahead_rows) == (
        8,
        20000,
    )
    incident = cfg.tables["incident"]
    assert (incident.backfill_slices, incident.backfill_max_ahead_rows) == (1, 1000)


def test_the_environment_sets_them_too(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        _with(),
        env={
            "SNOWSOURCE_BACKFILL_SLICES": "2",
            "SNOWSOURCE_SNOW__TABLES__TASK__BACKFILL_SLICES": "6",
        },
    )
    assert cfg.tables["incident"].backfill_slices == 2
    assert cfg.tables["task"].backfill_slices == 6


@pytest.mark.parametrize(
    ("top", "incident", "key", "fragment"),
    [
        ({"backfill.slices": 0}, None, "backfill.slices", "greater than or equal to 1"),
        ({"backfill.slices": 65}, None, "backfill.slices", "less than or equal to 64"),
        (None, {"backfill.slices": "many"}, "snow.tables.incident.backfill.slices", "integer"),
        ({"backfill.max.ahead.rows": 0}, None, "backfill.max.ahead.rows", "greater than 0"),
    ],
)
def test_out_of_range_values_name_their_key(
    tmp_path: Path,
    top: dict[str, Any] | None,
    incident: dict[str, Any] | None,
    key: str,
    fragment: str,
) -> None:
    found = _problems(tmp_path, _with(top, incident))
    assert fragment in found[key], found


def test_max_ahead_below_one_page_with_slices_is_refused_with_the_fix(tmp_path: Path) -> None:
    found = _problems(tmp_path, _with(incident={"backfill.max.ahead.rows": 999}))
    message = found["snow.tables.incident.backfill.max.ahead.rows"]
    assert "batch.size (1000)" in message
    assert "backfill.slices" in message
    # One slice never reads ahead: any limit is fine.
    cfg = _load(tmp_path, _with(incident={"backfill.max.ahead.rows": 10, "backfill.slices": 1}))
    assert cfg.tables["incident"].backfill_max_ahead_rows == 10
