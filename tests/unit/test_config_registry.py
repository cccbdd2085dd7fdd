"""``value.format: avro | json_schema`` and ``schema.registry``: defaults and validation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.config.fields import ValueFormat
from snowsource.config.loader import LoadedConfig, load_config
from snowsource.config.registry import RegistryAuthType, SubjectNameStrategy
from snowsource.core.errors import ConfigError
from snowsource.engine.wiring import registry_connection

URL = "http://registry:8081"
BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "u", "password": "p"},
        "tables": {"incident": {"name": "incident"}},
    }
}


def _load(
    tmp_path: Path, top: dict[str, Any], table: dict[str, Any] | None = None, **kw: Any
) -> LoadedConfig:
    doc = copy.deepcopy(BASE)
    doc.update(top)
    doc["snow"]["tables"]["incident"].update(table or {})
    file = tmp_path / "config.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_config(file, env=kw.get("env", {}))


def _problems(
    tmp_path: Path, top: dict[str, Any], table: dict[str, Any] | None = None
) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, top, table)
    return dict(info.value.problems)


def test_defaults(tmp_path: Path) -> None:
    settings = _load(tmp_path, {"value.format": "avro", "schema.registry": {"url": URL}}).settings
    registry = settings.schema_registry
    assert settings.tables["incident"].value_format is ValueFormat.AVRO
    assert registry.auth_type is RegistryAuthType.NONE
    assert registry.subject_name_strategy is SubjectNameStrategy.TOPIC
    assert (registry.request_timeout_ms, registry.auto_register) == (10000, True)


@pytest.mark.parametrize("value_format", ["avro", "json_schema"])
def test_the_url_is_required_by_a_table_that_registers(tmp_path: Path, value_format: str) -> None:
    problems = _problems(tmp_path, {}, {"value.format": value_format})
    assert "schema.registry.url" in problems
    assert "incident" in problems["schema.registry.url"]


def test_display_value_all_and_connect_are_refused(tmp_path: Path) -> None:
    top = {"schema.registry": {"url": URL}}
    problems = _problems(tmp_path, top, {"value.format": "avro", "display.value": "all"})
    assert "display.value" in problems["snow.tables.incident.display.value"]
    problems = _problems(tmp_path, top, {"value.format": "json_schema", "value.schema": "connect"})
    assert "value.schema: none" in problems["snow.tables.incident.value.schema"]


def test_auth_needs_its_credentials(tmp_path: Path) -> None:
    basic = _problems(tmp_path, {"schema.registry": {"url": URL, "auth.type": "basic"}})
    assert set(basic) == {"schema.registry.username", "schema.registry.password"}
    assert "password.file" in basic["schema.registry.password"]
    bearer = _problems(tmp_path, {"schema.registry": {"url": URL, "auth.type": "bearer"}})
    assert set(bearer) == {"schema.registry.token"}


def test_bad_values_name_their_key(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        {"schema.registry": {"url": "ftp://x", "subject.name.strategy": "name", "surprise": 1}},
    )
    assert {"schema.registry.url", "schema.registry.subject.name.strategy"} <= set(problems)
    assert "schema.registry.surprise" in problems


def test_secrets_come_from_files_and_never_show(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("s3cr3t-token\n")
    loaded = _load(
        tmp_path,
        {"schema.registry": {"url": URL, "auth.type": "bearer", "token.file": str(secret)}},
    )
    connection = registry_connection(loaded.settings)
    assert connection is not None
    assert connection.token == "s3cr3t-token"
    assert "s3cr3t" not in repr(loaded.settings)
    assert "s3cr3t" not in repr(connection)
