"""The configuration is a pydantic-settings model built from the project's own sources.

``load_config`` makes one call's sources (config file, ``SNOWSOURCE_*`` environment, ``.file``
secrets) and pydantic-settings merges them in the order ``settings_customise_sources`` gives.
These tests pin what that arrangement promises beyond the single-key cases of
``test_config.py``: the order, secrets that stay hidden from pydantic-settings' own debug dump,
one report across all sources, and nothing left active after a load.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr
from pydantic_settings import BaseSettings, InitSettingsSource

from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.config.sources import ConfigSources, activated, active_sources
from snowsource.config.yaml_loader import ConfigFileNotFoundError
from snowsource.core.errors import ConfigError

SECRET = "Hunter2-from-the-file"
ENV_SECRET = "Hunter2-from-the-environment"
FILE_SECRET = "Hunter2-read-from-a-secret-file"

BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "integration.user", "password": SECRET},
        "tables": {"incident": {"name": "incident"}},
    }
}


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def _doc(**auth: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["snow"]["auth"].update(auth)
    return doc


def test_settings_is_a_frozen_pydantic_settings_model() -> None:
    assert issubclass(Settings, BaseSettings)
    assert Settings.model_config.get("frozen") is True
    assert Settings.model_config.get("extra") == "forbid"


def test_sources_come_in_their_documented_order(tmp_path: Path) -> None:
    sources = ConfigSources(Settings, tmp_path / "config.yaml", {})
    builtin = InitSettingsSource(Settings, init_kwargs={})
    with activated(sources):
        chosen = Settings.settings_customise_sources(
            Settings,
            init_settings=builtin,
            env_settings=builtin,
            dotenv_settings=builtin,
            file_secret_settings=builtin,
        )
    # pydantic-settings merges them first-wins: keyword arguments, secret files, environment, file.
    assert chosen == (builtin, sources.secret_files, sources.environment, sources.config_file)
    assert active_sources() is None


def test_built_outside_load_config_only_keyword_arguments_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SNOWSOURCE_NAME", "from-env")
    monkeypatch.setenv("SNOWSOURCE_SNOW__AUTH__PASSWORD_FILE", "/nonexistent/password")
    cfg = Settings(**copy.deepcopy(BASE))
    assert cfg.name == "servicenow-source"
    assert cfg.snow.auth.password == SecretStr(SECRET)


def test_nothing_stays_active_after_a_failed_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_config(_write(tmp_path, _doc(password=None)), env={})
    assert active_sources() is None
    # A Settings built afterwards must not pick up the failed call's environment.
    env = {"SNOWSOURCE_NAME": "leaked"}
    with pytest.raises(ConfigError):
        load_config(_write(tmp_path, "snow: 5\n"), env=env)
    assert Settings(**copy.deepcopy(BASE)).name == "servicenow-source"


def test_environment_section_as_json_hides_a_secret_file_below_it(tmp_path: Path) -> None:
    # The file's .file is replaced with the whole section, so it is never opened.
    doc = _doc(password=None)
    doc["snow"]["auth"]["password.file"] = str(tmp_path / "missing")
    section = '{"type": "basic", "username": "u", "password": "from-json"}'
    cfg = load_config(_write(tmp_path, doc), env={"SNOWSOURCE_SNOW__AUTH": section}).settings
    assert cfg.snow.auth.password == SecretStr("from-json")
    assert cfg.snow.auth.username == "u"


def test_overridden_secret_file_is_never_opened(tmp_path: Path) -> None:
    doc = _doc(password=None)
    doc["snow"]["auth"]["password.file"] = str(tmp_path / "missing")
    cfg = load_config(
        _write(tmp_path, doc), env={"SNOWSOURCE_SNOW__AUTH__PASSWORD": ENV_SECRET}
    ).settings
    assert cfg.snow.auth.password == SecretStr(ENV_SECRET)


def test_secret_file_in_the_environment_wins_over_one_in_the_file(tmp_path: Path) -> None:
    mine = tmp_path / "env-password"
    mine.write_text(FILE_SECRET + "\n")
    doc = _doc(password=None)
    doc["snow"]["auth"]["password.file"] = str(tmp_path / "missing")
    cfg = load_config(
        _write(tmp_path, doc), env={"SNOWSOURCE_SNOW__AUTH__PASSWORD_FILE": str(mine)}
    ).settings
    assert cfg.snow.auth.password == SecretStr(FILE_SECRET)


def test_a_mistake_in_a_lower_source_is_still_reported(tmp_path: Path) -> None:
    # Both forms in the file is an error as written, even though the environment overrides.
    secret = tmp_path / "password"
    secret.write_text("x")
    doc = _doc()
    doc["snow"]["auth"]["password.file"] = str(secret)
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, doc), env={"SNOWSOURCE_SNOW__AUTH__PASSWORD": ENV_SECRET})
    assert dict(info.value.problems)["snow.auth.password.file"] == (
        "set either password or password.file in the config file, not both"
    )


def test_every_source_reports_in_one_error(tmp_path: Path) -> None:
    text = (
        yaml.safe_dump(_doc(), sort_keys=False) + "batch.size: 0\nfrobnicate: 1\nname: a\nname: b\n"
    )
    env = {
        "SNOWSOURCE_SNOW__TABLES__INCIDENT__FIELDS": "[not json",
        "SNOWSOURCE_KAFKA__SASL_PASSWORD_FILE": str(tmp_path / "missing"),
    }
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text), env=env)
    found = dict(info.value.problems)
    # environment (JSON), secret files, config file (duplicate), validation (range, unknown key)
    assert "must be JSON" in found["snow.tables.incident.fields"]
    assert "cannot read secret file" in found["kafka.sasl.password.file"]
    assert "from the environment" in found["kafka.sasl.password.file"]
    assert found["name"].startswith("duplicate key")
    assert "batch.size" in found
    assert found["frobnicate"].startswith("unknown key")


def test_missing_file_is_the_whole_report(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileNotFoundError) as info:
        load_config(tmp_path / "absent.yaml", env={"SNOWSOURCE_BATCH_SIZE": "0"})
    assert str(info.value).startswith(f"config file not found: {tmp_path / 'absent.yaml'}")
    assert len(info.value.problems) == 1


def test_pydantic_settings_debug_dump_never_shows_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # pydantic-settings logs every source's dict at DEBUG when PYDANTIC_SETTINGS_DEBUG is set.
    monkeypatch.setenv("PYDANTIC_SETTINGS_DEBUG", "1")
    token = tmp_path / "token"
    token.write_text(FILE_SECRET + "\n")
    doc = _doc()
    doc["kafka"] = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": SECRET + "-sasl",
    }
    env = {
        "SNOWSOURCE_SNOW__AUTH__PASSWORD": ENV_SECRET,
        "SNOWSOURCE_REST__AUTH_TOKEN_FILE": str(token),
        "SNOWSOURCE_KAFKA": '{"sasl.password": "' + ENV_SECRET + '-json"}',
    }
    with caplog.at_level(logging.DEBUG, logger="pydantic_settings"):
        cfg = load_config(_write(tmp_path, doc), env=env).settings
    dump = "\n".join(r.getMessage() for r in caplog.records if r.name == "pydantic_settings")
    assert "SecretFilesSource" in dump  # the dump happened and covered our sources
    assert "integration.user" in dump
    for needle in (SECRET, ENV_SECRET, FILE_SECRET, "Hunter2"):
        assert needle not in dump
    assert cfg.rest.auth_token == SecretStr(FILE_SECRET)
    assert cfg.snow.auth.password == SecretStr(ENV_SECRET)
    assert cfg.kafka.sasl_password == SecretStr(ENV_SECRET + "-json")


def test_sources_answer_per_field_like_any_settings_source(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(FILE_SECRET)
    doc = _doc(password=None)
    doc["snow"]["auth"]["password.file"] = str(secret)
    doc["name"] = "from-file"
    sources = ConfigSources(Settings, _write(tmp_path, doc), {"SNOWSOURCE_TASKS_MAX": "3"})
    fields = Settings.model_fields
    assert sources.config_file.get_field_value(fields["name"], "name") == (
        "from-file",
        "name",
        False,
    )
    assert sources.environment.get_field_value(fields["tasks_max"], "tasks_max") == (
        "3",
        "tasks.max",
        False,
    )
    value, key, _ = sources.secret_files.get_field_value(fields["snow"], "snow")
    assert key == "snow"
    assert value == {"auth": {"password": SecretStr(FILE_SECRET)}}
    # The .file key is gone from the file's own data: only one source sets the password.
    assert "password.file" not in sources.config_file()["snow"]["auth"]
