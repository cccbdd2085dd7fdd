"""A secret pasted into the wrong key is not echoed by the config error (issue 19 item 8a).

Two rules, each tested over several keys and error kinds (enum, a validator's own message, an
integer, a URL, a timestamp, a whole-section type error): a value equal to any configured
secret (from the file, the environment or a ``.file``) is masked wherever it appears, and a
value under an ``auth``/``sasl`` key is never echoed even when it is no secret we know of.
Every error still names its key.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from snowsource.config.loader import load_config
from snowsource.core.connector_import import import_connector, render_yaml
from snowsource.core.errors import ConfigError
from snowsource.core.secret_text import mask

SECRET = "Hunter2:p@ss/w#rd"
KAFKA_SECRET = "kafka-S3cret'quote"
NEEDLES = (SECRET, quote(SECRET, safe=""), "Hunter2", KAFKA_SECRET, "S3cret", repr(KAFKA_SECRET))

BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "integration.user", "password": SECRET},
        "tables": {"incident": {"name": "incident"}},
    },
    "kafka": {
        "bootstrap.servers": "broker:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "svc",
        "sasl.password": KAFKA_SECRET,
    },
}


def _doc(changes: dict[tuple[str, ...], Any], base: dict[str, Any] = BASE) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    for path, value in changes.items():
        node = doc
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return doc


def _error(tmp_path: Path, doc: dict[str, Any], env: dict[str, str] | None = None) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    return str(info.value)


def _assert_clean(text: str) -> None:
    for needle in NEEDLES:
        assert needle not in text, (needle, text)


MISPLACED: list[tuple[str, tuple[str, ...], Any]] = [
    ("sasl-mechanism-enum", ("kafka", "sasl.mechanism"), KAFKA_SECRET),
    ("sasl-mechanism-snow-secret", ("kafka", "sasl.mechanism"), SECRET),
    ("bootstrap-validator-message", ("kafka", "bootstrap.servers"), KAFKA_SECRET),
    ("bootstrap-snow-secret", ("kafka", "bootstrap.servers"), SECRET),
    ("rest-port-integer", ("rest", "port"), SECRET),
    ("log-level-enum", ("log", "level"), KAFKA_SECRET),
    ("auth-type-enum", ("snow", "auth", "type"), SECRET),
    ("snow-url", ("snow", "url"), SECRET),
    ("start-timestamp", ("snow", "tables", "incident", "start.timestamp"), SECRET),
    ("inside-a-longer-value", ("snow", "tables", "incident", "start.timestamp"), f"x{SECRET}y"),
    ("table-name-list", ("snow", "tables", "incident", "name"), [SECRET]),
    ("batch-size", ("batch.size",), KAFKA_SECRET),
]


@pytest.mark.parametrize(("key", "value"), [pytest.param(k, v, id=c) for c, k, v in MISPLACED])
def test_a_configured_secret_in_another_key_is_masked(
    tmp_path: Path, key: tuple[str, ...], value: Any
) -> None:
    text = _error(tmp_path, _doc({key: value}))
    assert ".".join(key) in text, text  # the error still names the key to fix
    _assert_clean(text)


def test_a_secret_from_the_environment_or_a_file_is_masked_too(tmp_path: Path) -> None:
    secret_file = tmp_path / "sasl.txt"
    secret_file.write_text(KAFKA_SECRET + "\n")
    doc = _doc({("kafka", "sasl.mechanism"): KAFKA_SECRET, ("log", "level"): SECRET})
    del doc["kafka"]["sasl.password"]
    doc["kafka"]["sasl.password.file"] = str(secret_file)
    del doc["snow"]["auth"]["password"]
    text = _error(tmp_path, doc, env={"SNOWSOURCE_SNOW__AUTH__PASSWORD": SECRET})
    assert "kafka.sasl.mechanism" in text
    assert "log.level" in text
    _assert_clean(text)


def test_a_secret_that_loses_to_a_higher_source_is_still_masked(tmp_path: Path) -> None:
    # The file's password is overridden by the environment; it is still a secret of the user.
    doc = _doc({("log", "level"): SECRET})
    text = _error(tmp_path, doc, env={"SNOWSOURCE_SNOW__AUTH__PASSWORD": "other-password"})
    assert "log.level" in text
    _assert_clean(text)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (("kafka", "sasl.mechanism"), "not-a-known-secret"),
        (("snow", "auth", "type"), "not-a-known-secret"),
        (("snow", "auth", "oauth.grant.type"), "not-a-known-secret"),
        (("rest", "auth.token"), ["not-a-known-secret"]),
    ],
    ids=["sasl-mechanism", "auth-type", "oauth-grant", "rest-auth-token-list"],
)
def test_values_under_auth_and_sasl_keys_are_never_echoed(
    tmp_path: Path, key: tuple[str, ...], value: Any
) -> None:
    text = _error(tmp_path, _doc({key: value}))
    assert ".".join(key) in text, text
    assert "not-a-known-secret" not in text, text


def test_other_values_are_still_echoed(tmp_path: Path) -> None:
    text = _error(tmp_path, _doc({("log", "level"): "loud", ("rest", "port"): "eighty"}))
    assert "(got 'loud')" in text
    assert "(got 'eighty')" in text


@pytest.mark.parametrize(
    ("text", "values", "shown"),
    [
        ("got 'ab'", ["ab"], "got ***"),
        ("ab is short", ["ab"], "ab is short"),  # bare short values stay: words around
        ("abc is not", ["abc"], "*** is not"),
        ("pw=Hunter2%3Ap%40ss and Hunter2:p@ss", ["Hunter2:p@ss"], "pw=*** and ***"),
        ("got 'a\\\\b1' (a\\b1)", ["a\\b1"], "got *** (***)"),
        ("longpassword and long", ["long", "longpassword"], "*** and ***"),
        ("nothing here", [""], "nothing here"),
    ],
)
def test_mask(text: str, values: list[str], shown: str) -> None:
    assert mask(text, values) == shown


def test_config_import_comments_do_not_show_a_secret_pasted_into_another_key() -> None:
    connector = {
        "name": "legacy",
        "snow.url": "https://acme.service-now.com",
        "snow.auth.username": "integration.user",
        "snow.auth.password": SECRET,
        "snow.tables": "incident",
        "snow.table.incident.name": "incident",
        "batch.size": SECRET,  # not a whole number: reported with its reason
        "snow.frobnicate": f"pw={SECRET}",  # unknown: reported with its value
    }
    text = render_yaml(import_connector(connector), connector, "connector.json")
    assert "#   batch.size = ***  (*** is not a whole number)" in text
    assert "#   snow.frobnicate = pw=***" in text
    _assert_clean(text)
