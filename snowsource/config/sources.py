"""Where values come from: the YAML document, ``SNOWSOURCE_*`` variables and ``.file`` secrets.

Each source produces a nested dict keyed by YAML keys and resolves its own ``<secret>.file``
keys first; then the environment is merged over the file, key by key. So a ``.file`` from the
environment replaces a plain key from the file and vice versa, while both in one source is an
error. Sources never raise: they collect ``(key path, message)`` problems so that everything
wrong is reported at once.

Environment mapping: ``SNOWSOURCE_`` + key path in upper case, ``__`` between levels, ``_`` for
``.`` inside a key; table aliases are taken literally (lower-cased); lists, mappings and whole
sections are JSON; an empty value sets a nullable key to null. ``SNOWSOURCE_CONFIG`` and
``SNOWSOURCE_TEST_*`` are reserved; any other variable matching no key is a warning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

from snowsource.config.fields import FILE_SUFFIX
from snowsource.config.models import Settings
from snowsource.config.schema import (
    admits_none,
    dict_model_of,
    fields_by_key,
    is_complex,
    is_secret,
    keys_with_files,
    model_of,
)

ENV_PREFIX: Final = "SNOWSOURCE_"
CONFIG_ENV: Final = "SNOWSOURCE_CONFIG"
_RESERVED_ENV_PREFIX: Final = "SNOWSOURCE_TEST_"

# Stands in for a secret whose file could not be read: a problem is already recorded (and
# ConfigError always follows), this only keeps "password is required" from piling on.
_UNREADABLE_SECRET: Final = "<unreadable secret file>"  # noqa: S105 - a placeholder

Problems = list[tuple[str, str]]


@dataclass
class SourceResult:
    """One source's values, its problems and (for the environment) its warnings."""

    data: dict[str, Any]
    problems: Problems = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Secret files
# --------------------------------------------------------------------------------------------


def _read_secret_file(path: str) -> str:
    text = Path(path).expanduser().read_text(encoding="utf-8")
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


def _resolve_secret_files(
    data: Any, model: type[BaseModel], path: tuple[str, ...], problems: Problems, origin: str
) -> Any:
    """Replace every ``<secret>.file`` in ``data`` (one source's data) by the file's content."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for key, info in fields_by_key(model).items():
        file_key = key + FILE_SUFFIX
        if is_secret(info.annotation) and file_key in out:
            file_path = out.pop(file_key)
            dotted = ".".join((*path, file_key))
            if out.get(key) is not None and file_path is not None:
                problems.append((dotted, f"set either {key} or {file_key} {origin}, not both"))
            elif isinstance(file_path, str) and file_path.strip():
                try:
                    out[key] = _read_secret_file(file_path)
                except (OSError, UnicodeDecodeError) as exc:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                    problems.append(
                        (dotted, f"cannot read secret file {file_path!r} ({origin}): {reason}")
                    )
                    out[key] = _UNREADABLE_SECRET
            elif file_path is not None:
                problems.append((dotted, f"must be the path of a file holding the {key}"))
        nested = model_of(info.annotation)
        value_model = dict_model_of(info.annotation)
        if key in out and nested is not None:
            out[key] = _resolve_secret_files(out[key], nested, (*path, key), problems, origin)
        elif key in out and value_model is not None and isinstance(out[key], Mapping):
            out[key] = {
                alias: _resolve_secret_files(
                    value, value_model, (*path, key, str(alias)), problems, origin
                )
                for alias, value in out[key].items()
            }
    return out


def file_source(document: Mapping[str, Any]) -> SourceResult:
    """The parsed config file, with its ``.file`` secrets read."""
    problems: Problems = []
    data = _resolve_secret_files(document, Settings, (), problems, "in the config file")
    return SourceResult(dict(data), problems)


# --------------------------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _EnvTarget:
    keys: tuple[str, ...]
    annotation: Any


def _env_target(segments: list[str]) -> _EnvTarget | None:
    """Map the lower-cased ``__``-separated parts of a variable name to a key path."""
    model: type[BaseModel] | None = Settings
    keys: list[str] = []
    index = 0
    while index < len(segments):
        if model is None or not segments[index]:
            return None
        fields = fields_by_key(model)
        by_segment = {key.replace(".", "_"): key for key in keys_with_files(model)}
        key = by_segment.get(segments[index])
        if key is None:
            return None
        keys.append(key)
        annotation = fields[key].annotation if key in fields else str
        value_model = dict_model_of(annotation)
        if index == len(segments) - 1:
            return _EnvTarget(tuple(keys), annotation)
        if value_model is not None:
            # The next segment is a table alias, taken literally (already lower case).
            index += 1
            if not segments[index]:
                return None
            keys.append(segments[index])
            if index == len(segments) - 1:
                return _EnvTarget(tuple(keys), value_model)
            model = value_model
        else:
            model = model_of(annotation)
        index += 1
    return None


def _parse_env(target: _EnvTarget, name: str, raw: str, problems: Problems) -> Any:
    if not raw.strip() and admits_none(target.annotation):
        return None
    if is_complex(target.annotation):
        try:
            return json.loads(raw)
        except ValueError as exc:
            problems.append(
                (
                    ".".join(target.keys),
                    f"{name} must be JSON (lists and mappings come from the environment as "
                    f'JSON, e.g. ["a","b"] or {{"k":"v"}}): {exc}',
                )
            )
            return None
    return raw


def environment_source(env: Mapping[str, str]) -> SourceResult:
    """``SNOWSOURCE_*`` variables as a nested dict keyed by YAML keys."""
    problems: Problems = []
    warnings: list[str] = []
    found: list[tuple[_EnvTarget, str, str]] = []
    for name, raw in env.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper == CONFIG_ENV:
            continue
        if upper.startswith(_RESERVED_ENV_PREFIX):
            continue
        target = _env_target(name[len(ENV_PREFIX) :].lower().split("__"))
        if target is None:
            warnings.append(
                f"environment variable {name} matches no configuration key and is ignored "
                "(SNOWSOURCE_ + key path in upper case, __ between levels, _ for '.')"
            )
            continue
        found.append((target, name, raw))
    data: dict[str, Any] = {}
    # Whole sections given as JSON first, so narrower variables refine rather than vanish.
    for target, name, raw in sorted(found, key=lambda item: len(item[0].keys)):
        value = _parse_env(target, name, raw, problems)
        node = data
        for key in target.keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[target.keys[-1]] = value
    resolved = _resolve_secret_files(data, Settings, (), problems, "from the environment")
    return SourceResult(dict(resolved), problems, warnings)


# --------------------------------------------------------------------------------------------
# Merging
# --------------------------------------------------------------------------------------------


def merged(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    """``high`` over ``low``: mappings merge key by key, anything else is replaced."""
    out = dict(low)
    for key, value in high.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = merged(below, value)
        else:
            out[key] = value
    return out
