"""The field governance keys (SPEC §15.2): defaults, inheritance, validation, the secret."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.config.fields import SensitiveFields
from snowsource.config.loader import LoadedConfig, load_config
from snowsource.core.errors import ConfigError
from snowsource.core.governance import Action
from snowsource.engine.table_specs import table_spec

BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "u", "password": "p"},
        "tables": {
            "incident": {"name": "incident"},
            "users": {"name": "sys_user", "fields.hash": ["email"]},
            "view": {
                "name": "incident_sla",
                "timestamp.field": "inc_sys_updated_on",
                "id.field": "inc_sys_id",
            },
        },
    },
    "governance": {"hash.key": "a-long-random-hash-key"},
}


def load(
    tmp_path: Path, changes: dict[str, Any], env: dict[str, str] | None = None
) -> LoadedConfig:
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = doc
        keys = path.split("/")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    file = tmp_path / "config.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_config(file, env=env or {})


def problems(tmp_path: Path, changes: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, changes)
    return dict(info.value.problems)


def test_defaults_and_inheritance(tmp_path: Path) -> None:
    cfg = load(tmp_path, {"fields.exclude": ["u_*"], "sensitive.fields": "Include"}).settings
    incident, users = cfg.tables["incident"], cfg.tables["users"]
    assert incident.fields_exclude == ["u_*"]
    assert users.fields_exclude == ["u_*"]
    assert incident.fields_hash == []
    assert users.fields_hash == ["email"]
    assert incident.sensitive_fields is SensitiveFields.INCLUDE
    default = load(tmp_path, {}).settings.tables["incident"]
    assert default.sensitive_fields is SensitiveFields.EXCLUDE
    assert default.fields_exclude == []


def test_table_spec_carries_governance_and_the_key(tmp_path: Path) -> None:
    cfg = load(tmp_path, {"snow/tables/incident/fields.mask": ["phone"]}).settings
    spec = table_spec(cfg, "users", cfg.tables["users"])
    assert spec.governance.hash_key == b"a-long-random-hash-key"
    assert spec.governance.action("email") is Action.HASH
    assert spec.governance.action("user_password", "password2") is Action.EXCLUDE
    assert spec.governance.protected == {"sys_id", "sys_updated_on", "sys_mod_count"}
    incident = table_spec(cfg, "incident", cfg.tables["incident"])
    assert incident.governance.action("phone") is Action.MASK
    assert "a-long-random-hash-key" not in repr(spec)


@pytest.mark.parametrize("key", ["fields.exclude", "fields.hash", "fields.mask"])
@pytest.mark.parametrize("column", ["sys_updated_on", "sys_id", "sys_mod_count"])
def test_governing_a_cursor_field_names_the_key(tmp_path: Path, key: str, column: str) -> None:
    found = problems(tmp_path, {f"snow/tables/incident/{key}": [column]})
    message = found[f"snow.tables.incident.{key}"]
    assert f"{column!r} cannot be governed" in message
    assert f"remove {column!r} from {key}" in message


def test_a_view_protects_its_own_cursor_fields(tmp_path: Path) -> None:
    found = problems(tmp_path, {"snow/tables/view/fields.exclude": ["inc_sys_id"]})
    assert "'inc_sys_id' cannot be governed" in found["snow.tables.view.fields.exclude"]
    # sys_id is not the view's cursor: it may be governed there.
    load(tmp_path, {"snow/tables/view/fields.mask": ["sys_id"]})


def test_an_inherited_cursor_field_is_reported_per_table(tmp_path: Path) -> None:
    found = problems(tmp_path, {"fields.mask": ["sys_mod_count"]})
    assert set(found) == {
        "snow.tables.incident.fields.mask",
        "snow.tables.users.fields.mask",
        "snow.tables.view.fields.mask",
    }


def test_globs_skip_the_cursor_fields(tmp_path: Path) -> None:
    cfg = load(tmp_path, {"fields.exclude": ["sys_*"]}).settings
    spec = table_spec(cfg, "incident", cfg.tables["incident"])
    assert spec.governance.action("sys_updated_on") is Action.KEEP
    assert spec.governance.action("sys_created_by") is Action.EXCLUDE


def test_hash_needs_the_key(tmp_path: Path) -> None:
    found = problems(tmp_path, {"governance": None})
    assert (
        "required when a table hashes columns (fields.hash of users)"
        in found["governance.hash.key"]
    )
    load(tmp_path, {"governance": None, "snow/tables/users/fields.hash": None})


def test_hash_key_from_a_file_or_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("from-a-file-key\n")
    cfg = load(tmp_path, {"governance": {"hash.key.file": str(secret)}}).settings
    assert cfg.governance.hash_key is not None
    assert cfg.governance.hash_key.get_secret_value() == "from-a-file-key"
    cfg = load(
        tmp_path, {"governance": None}, env={"SNOWSOURCE_GOVERNANCE__HASH_KEY": "env-key-value"}
    ).settings
    assert cfg.governance.hash_key is not None
    assert cfg.governance.hash_key.get_secret_value() == "env-key-value"


def test_hash_and_mask_of_one_column_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, {"snow/tables/users/fields.mask": ["email"]})
    assert "also in fields.hash" in found["snow.tables.users.fields.mask"]


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"fields.exclude": ["bad name"]}, "fields.exclude[0]"),
        ({"snow/tables/incident/fields.hash": ["a*"]}, "snow.tables.incident.fields.hash[0]"),
        ({"sensitive.fields": "maybe"}, "sensitive.fields"),
    ],
)
def test_values_are_validated(tmp_path: Path, changes: dict[str, Any], path: str) -> None:
    assert path in problems(tmp_path, changes)


def test_list_from_the_environment(tmp_path: Path) -> None:
    cfg = load(
        tmp_path, {}, env={"SNOWSOURCE_SNOW__TABLES__INCIDENT__FIELDS_EXCLUDE": '["u_*"]'}
    ).settings
    assert cfg.tables["incident"].fields_exclude == ["u_*"]
