"""``snow.discover`` and ``backfill.max.tables``: defaults, the template rule (SPEC §15.2)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.db_views import ViewCursor
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


@pytest.mark.parametrize("value_format", ["avro", "json_schema"])
def test_a_template_that_registers_needs_the_registry_url(
    tmp_path: Path, value_format: str
) -> None:
    problems = _problems(tmp_path, _with(template={"value.format": value_format}))
    message = problems["schema.registry.url"]
    assert "snow.discover.template" in message
    assert "set it to the registry's" in message  # the fix, as for a table
    doc = _with(template={"value.format": value_format})
    doc["schema.registry"] = {"url": "http://registry:8081"}
    assert _load(tmp_path, doc).discovered_table("problem").value_format.value == value_format


def test_a_top_level_format_that_registers_needs_the_url_with_discovery_alone(
    tmp_path: Path,
) -> None:
    doc = _with()
    doc["value.format"] = "avro"  # no snow.tables: only discovered tables would register
    assert "snow.discover.template" in _problems(tmp_path, doc)["schema.registry.url"]


def test_a_template_that_hashes_needs_the_hash_key(tmp_path: Path) -> None:
    problems = _problems(tmp_path, _with(template={"fields.hash": ["email"]}))
    assert "snow.discover.template" in problems["governance.hash.key"]


def test_a_discovered_view_reads_by_its_prefixed_cursor_fields(tmp_path: Path) -> None:
    settings = _load(tmp_path, _with(template={"fields.exclude": ["*_secret"]}))
    view = ViewCursor("inc_sys_updated_on", "inc_sys_id")
    table = settings.discovered_table("incident_sla", view)
    assert (table.timestamp_field, table.id_field) == ("inc_sys_updated_on", "inc_sys_id")
    assert settings.discovered_view_problem("incident_sla", view) is None


@pytest.mark.parametrize(
    ("template", "key"),
    [
        ({"deletes": "audit"}, "snow.discover.template.deletes"),
        ({"journal": True}, "snow.discover.template.journal"),
        ({"fields.mask": ["inc_sys_id"]}, "snow.discover.template.fields.mask"),
    ],
)
def test_a_template_a_view_cannot_have_is_the_views_skip_reason(
    tmp_path: Path, template: dict[str, Any], key: str
) -> None:
    # Valid for tables (the config loads); a view, read by inc_sys_id, cannot have it.
    settings = _load(tmp_path, _with(template=template))
    reason = settings.discovered_view_problem(
        "incident_sla", ViewCursor("inc_sys_updated_on", "inc_sys_id")
    )
    assert reason is not None
    assert reason.startswith("database view incident_sla (read by inc_sys_updated_on, inc_sys_id)")
    assert key in reason
    assert reason.endswith("list it under snow.tables with settings a view can have")
