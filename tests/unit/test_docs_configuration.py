"""docs/configuration.md and config.example.yaml describe exactly the configuration model.

Every YAML key path of ``Settings`` (sections flattened with dots, ``snow.tables.<alias>.*`` for
per-table keys, ``<secret>.file`` variants included) must have a row in the key reference of
docs/configuration.md with its default; a documented key the model does not know fails too.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from snowsource.config.fields import INHERITED_BY_TABLES
from snowsource.config.loader import load_config
from snowsource.config.models import Settings

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "configuration.md"
EXAMPLE = REPO / "config.example.yaml"
ALIAS = "<alias>"
_ROW = re.compile(r"^\|\s*`(?P<key>[^`]+)`\s*\|(?P<default>(?:[^|\\]|\\.)*)\|(?P<meaning>.*)\|\s*$")


def _members(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def _model(annotation: Any) -> type[BaseModel] | None:
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _dict_model(annotation: Any) -> type[BaseModel] | None:
    for member in _members(annotation):
        if get_origin(member) is dict:
            return _model(get_args(member)[1])
    return None


def _is_secret(annotation: Any) -> bool:
    return any(isinstance(m, type) and issubclass(m, SecretStr) for m in _members(annotation))


def model_keys(
    model: type[BaseModel] = Settings, prefix: str = ""
) -> dict[str, tuple[FieldInfo | None, bool]]:
    """Every leaf key path -> (its field, None for a ``.file`` variant; whether it is secret)."""
    keys: dict[str, tuple[FieldInfo | None, bool]] = {}
    for name, info in model.model_fields.items():
        if info.exclude:  # derived, not a key (a table's alias)
            continue
        path = prefix + (info.alias or name)
        nested, by_alias = _model(info.annotation), _dict_model(info.annotation)
        if by_alias is not None:
            keys.update(model_keys(by_alias, f"{path}.{ALIAS}."))
        elif nested is not None and NoneType not in _members(info.annotation):
            keys.update(model_keys(nested, path + "."))
        elif nested is not None:
            # An optional section (``snow.discover``): itself (default null) and its keys.
            keys[path] = (info, False)
            keys.update(model_keys(nested, path + "."))
        else:
            secret = _is_secret(info.annotation)
            keys[path] = (info, secret)
            if secret:
                keys[path + ".file"] = (None, False)
    return keys


def default_of(info: FieldInfo) -> Any:
    """The field's default value (factories called)."""
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default


def render_default(info: FieldInfo | None) -> str:
    """How the documentation spells a default: a YAML scalar, quoted only when YAML needs it."""
    value = None if info is None else default_of(info)
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        plain_ok = value and yaml.safe_load(value) == value and value.strip() == value
        return value if plain_ok else json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


def documented() -> dict[str, str]:
    """Key -> default cell of every row of the key reference in docs/configuration.md."""
    text = DOC.read_text(encoding="utf-8")
    begin, end = text.index("<!-- keys:begin -->"), text.index("<!-- keys:end -->")
    rows: dict[str, str] = {}
    for line in text[begin:end].splitlines():
        match = _ROW.match(line)
        if match:
            key = match["key"]
            assert key not in rows, f"{key} is documented twice"
            rows[key] = match["default"].strip()
    return rows


def test_every_model_key_is_documented_with_its_default() -> None:
    rows = documented()
    missing = sorted(set(model_keys()) - set(rows))
    assert not missing, f"docs/configuration.md lacks: {missing}"
    for key, (info, _secret) in model_keys().items():
        cell = rows[key]
        if info is not None and info.is_required():
            assert "required" in cell or "derived" in cell, (key, cell)
        else:
            assert f"`{render_default(info)}`" in cell, (key, render_default(info), cell)


def test_no_documented_key_is_unknown() -> None:
    unknown = sorted(set(documented()) - set(model_keys()))
    assert not unknown, f"docs/configuration.md documents keys the model does not have: {unknown}"


def test_secrets_are_marked_as_secrets() -> None:
    text = DOC.read_text(encoding="utf-8")
    for key, (_info, secret) in model_keys().items():
        if secret:
            row = next(line for line in text.splitlines() if line.startswith(f"| `{key}` |"))
            assert "secret" in row.lower(), key


def _example_value(document: dict[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = document
    parts = key.split(".")
    # Keys contain dots themselves (tasks.max): match the longest key present at each level.
    while parts:
        for size in range(len(parts), 0, -1):
            candidate = ".".join(parts[:size])
            if isinstance(node, dict) and candidate in node:
                node = node[candidate]
                parts = parts[size:]
                break
        else:
            return False, None
    return True, node


# Values config.example.yaml sets on purpose (it streams the bundled emulator into a local Kafka).
_EXAMPLE_OVERRIDES = {
    "snow.url",
    "snow.auth.username",
    "snow.auth.password",
    "kafka.bootstrap.servers",
}


def test_config_example_is_valid_and_shows_every_default() -> None:
    load_config(EXAMPLE, env={})  # the example itself must load
    document = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    incident = f"snow.tables.{ALIAS}."
    inherited = set(INHERITED_BY_TABLES)
    text = EXAMPLE.read_text(encoding="utf-8")
    for key, (info, _secret) in model_keys().items():
        if key.endswith(".file") or key in _EXAMPLE_OVERRIDES:
            continue
        if key.startswith(incident):
            short = key[len(incident) :]
            if short in inherited:
                assert f"# {short}: " in text, f"per-table {short} not shown in the example"
                continue
            key = f"snow.tables.incident.{short}"  # noqa: PLW2901 - the example's first table
        present, value = _example_value(document, key)
        if not present and key.startswith("snow.discover."):
            # The optional section is null in the example; its keys are shown commented out.
            assert f"#  {key.removeprefix('snow.discover.')}: " in text, key
            continue
        assert present, f"config.example.yaml lacks {key}"
        if info is None or info.is_required() or key == "snow.tables.incident.topic":
            continue
        expected = default_of(info)
        if isinstance(expected, Enum):
            expected = expected.value
        if isinstance(value, bool) and isinstance(expected, str):
            value = "true" if value else "false"
        assert value == expected, f"config.example.yaml: {key} is {value!r}, default {expected!r}"


@pytest.mark.parametrize("key", ["snow.auth.password.file", "snow.tables.<alias>.query"])
def test_key_extraction_covers_secret_files_and_tables(key: str) -> None:
    assert key in model_keys()
