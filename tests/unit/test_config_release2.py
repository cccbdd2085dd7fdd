"""The keys the second release adds: defaults, validation, and features not shipped yet."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.config.fields import Deletes, TasksAssignment, ValueFormat, ValueSchema
from snowsource.config.loader import LoadedConfig, load_config
from snowsource.core.errors import ConfigError

BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "u", "password": "p"},
        "tables": {"incident": {"name": "incident"}},
    }
}
T = ("snow", "tables", "incident")
Load = Callable[..., LoadedConfig]


@pytest.fixture
def load(tmp_path: Path) -> Load:
    """Load ``BASE`` with ``changes`` ({key path: value}) applied."""

    def run(
        changes: dict[tuple[str, ...], Any] | None = None, env: dict[str, str] | None = None
    ) -> LoadedConfig:
        doc = copy.deepcopy(BASE)
        for path, value in (changes or {}).items():
            node = doc
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
        file = tmp_path / "config.yaml"
        file.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_config(file, env=env or {})

    return run


def _problems(load: Load, changes: dict[tuple[str, ...], Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load(changes)
    return dict(info.value.problems)


def test_defaults(load: Load) -> None:
    cfg = load().settings
    assert cfg.exactly_once is False
    assert cfg.tasks_assignment is TasksAssignment.STATIC
    assert cfg.group_session_timeout_ms == 10000
    assert cfg.snow.http.max_response_bytes == 67108864
    assert cfg.health_unready_after_seconds == 300
    assert (cfg.value_format, cfg.value_schema) == (ValueFormat.STRING, ValueSchema.NONE)
    table = cfg.tables["incident"]
    assert table.deletes is Deletes.NONE
    assert (table.value_format, table.value_schema) == (ValueFormat.STRING, ValueSchema.NONE)


def test_limits_load_and_can_come_from_the_environment(load: Load) -> None:
    cfg = load(
        {("snow", "http", "max.response.bytes"): 1048576, ("group.session.timeout.ms",): 6000},
        env={"SNOWSOURCE_HEALTH_UNREADY_AFTER_SECONDS": "45", "SNOWSOURCE_EXACTLY_ONCE": "false"},
    ).settings
    assert cfg.snow.http.max_response_bytes == 1048576
    assert cfg.group_session_timeout_ms == 6000
    assert cfg.health_unready_after_seconds == 45
    assert cfg.exactly_once is False


INVALID: list[tuple[str, dict[tuple[str, ...], Any], str, str]] = [
    ("exactly-once", {("exactly.once",): "maybe"}, "exactly.once", "boolean"),
    ("assignment", {("tasks.assignment",): "dynamic"}, "tasks.assignment", "'group'"),
    ("session", {("group.session.timeout.ms",): 0}, "group.session.timeout.ms", "greater than 0"),
    (
        "max-response",
        {("snow", "http", "max.response.bytes"): 0},
        "snow.http.max.response.bytes",
        "greater than 0",
    ),
    (
        "unready",
        {("health.unready.after.seconds",): -1},
        "health.unready.after.seconds",
        "greater than 0",
    ),
    ("format", {("value.format",): "xml"}, "value.format", "'typed'"),
    ("schema", {("value.schema",): "avro"}, "value.schema", "'connect'"),
    (
        "table-format",
        {(*T, "value.format"): "xml"},
        "snow.tables.incident.value.format",
        "'string'",
    ),
    ("table-schema", {(*T, "value.schema"): 1}, "snow.tables.incident.value.schema", "'none'"),
    ("deletes", {(*T, "deletes"): "soft"}, "snow.tables.incident.deletes", "'audit'"),
]


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [pytest.param(changes, path, fragment, id=case) for case, changes, path, fragment in INVALID],
)
def test_each_new_key_is_validated(
    load: Load, changes: dict[tuple[str, ...], Any], path: str, fragment: str
) -> None:
    found = _problems(load, changes)
    assert fragment in found[path], found


def test_invalid_top_level_value_format_is_reported_once(load: Load) -> None:
    assert list(_problems(load, {("value.format",): "xml"})) == ["value.format"]


@pytest.mark.parametrize("key", ["tasks.max", "task.id"])
def test_static_keys_with_group_assignment_are_an_error(load: Load, key: str) -> None:
    found = _problems(load, {("tasks.assignment",): "group", (key,): 0 if key == "task.id" else 1})
    assert "tasks.assignment: group" in found[key]


def test_view_cannot_have_audit_deletes(load: Load) -> None:
    view = {
        "name": "incident_sla",
        "timestamp.field": "inc_sys_updated_on",
        "id.field": "inc_sys_id",
    }
    found = _problems(load, {(*T,): {**view, "deletes": "audit"}})
    message = found["snow.tables.incident.deletes"]
    assert "database view" in message
    assert "'inc_sys_id'" in message


def test_once_available_the_new_values_load(load: Load) -> None:
    cfg = load(
        {
            ("exactly.once",): True,
            ("tasks.assignment",): "GROUP",
            ("value.format",): "typed",
            ("value.schema",): "connect",
            (*T, "deletes"): "Audit",
            ("snow", "tables", "problem"): {"name": "problem", "value.format": "string"},
        }
    ).settings
    assert cfg.exactly_once is True
    assert cfg.tasks_assignment is TasksAssignment.GROUP
    incident, problem = cfg.tables["incident"], cfg.tables["problem"]
    assert incident.deletes is Deletes.AUDIT
    assert (incident.value_format, incident.value_schema) == (
        ValueFormat.TYPED,
        ValueSchema.CONNECT,
    )
    # A table overrides the top-level default; the rest is inherited.
    assert (problem.value_format, problem.value_schema) == (ValueFormat.STRING, ValueSchema.CONNECT)


def test_exactly_once_is_available(load: Load) -> None:
    cfg = load({("exactly.once",): True}).settings
    assert cfg.exactly_once is True
