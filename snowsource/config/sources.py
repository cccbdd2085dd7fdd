"""Where values come from: pydantic-settings sources for the file, ``SNOWSOURCE_*`` and ``.file``.

``Settings.settings_customise_sources`` returns them highest priority first — secret files,
environment, config file — and pydantic-settings merges what they return key by key (mappings
merge, anything else is replaced), so the environment wins over the file. A ``<secret>.file``
key is taken out of the source it is written in; ``SecretFilesSource`` reads it only when that
source is the one that decides the key. So a ``.file`` from the environment replaces a plain key
in the file and a plain key from the environment replaces a ``.file`` in the file, while both in
one source is an error, and a file whose key is overridden is never opened.

Sources never raise: each collects ``(key path, message)`` problems (the environment also its
warnings) for ``load_config`` to report all at once. Secret values are ``SecretStr`` from the
moment a source reads them, so that nothing that shows a source's data — pydantic-settings' own
debug log (``PYDANTIC_SETTINGS_DEBUG``) prints every source's dict — can show a secret.

Environment mapping: ``SNOWSOURCE_`` + key path in upper case, ``__`` between levels, ``_`` for
``.`` inside a key; table aliases are taken literally (lower-cased); lists, mappings and whole
sections are JSON; an empty value sets a nullable key to null. ``SNOWSOURCE_CONFIG`` and
``SNOWSOURCE_TEST_*`` are reserved; any other variable matching no key is a warning.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource

from snowsource.config.fields import FILE_SUFFIX, INHERITED_BY_TABLES
from snowsource.config.schema import (
    admits_none,
    dict_model_of,
    fields_by_key,
    is_complex,
    is_secret,
    keys_with_files,
    model_of,
)
from snowsource.config.yaml_loader import read_yaml
from snowsource.core.errors import ConfigError

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

ENV_PREFIX: Final = "SNOWSOURCE_"
CONFIG_ENV: Final = "SNOWSOURCE_CONFIG"
_RESERVED_ENV_PREFIX: Final = "SNOWSOURCE_TEST_"

# Stands in for a secret whose file could not be read: a problem is already recorded (and
# ConfigError always follows), this only keeps "password is required" from piling on.
_UNREADABLE_SECRET: Final = "<unreadable secret file>"  # noqa: S105 - a placeholder

Problems = list[tuple[str, str]]
Keys = tuple[str, ...]


# --------------------------------------------------------------------------------------------
# Sources that map their input to one nested dict keyed by YAML keys
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SecretFile:
    keys: Keys  # the path of the secret key itself (``snow.auth.password``)
    path: str
    origin: str


class KeyedSource(PydanticBaseSettingsSource):
    """A source whose whole input becomes one nested dict keyed by YAML keys.

    The dict is built once, on first use: ``SecretFilesSource`` asks for it before
    pydantic-settings calls this source.
    """

    origin: ClassVar[str]  # how problems name the source: "in the config file"

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self.problems: Problems = []
        self._secret_files: list[_SecretFile] = []

    @abstractmethod
    def read(self) -> dict[str, Any]:
        """The source's input as a nested dict, ``.file`` keys still in it."""

    @cached_property
    def data(self) -> dict[str, Any]:
        """What this source sets: ``.file`` keys taken out, secrets as ``SecretStr``."""
        return dict(self._without_secret_files(self.read(), self.settings_cls, ()))

    @property
    def secret_files(self) -> list[_SecretFile]:
        """The ``.file`` keys taken out of ``data``, valid ones only (the others are problems)."""
        _ = self.data
        return self._secret_files

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """The value of one top-level key, already decoded (so never "complex")."""
        key = field.alias or field_name
        return self.data.get(key), key, False

    def __call__(self) -> dict[str, Any]:
        """Everything, unknown keys included: validation must see them to report them."""
        return dict(self.data)

    def decides(self, keys: Keys) -> bool:
        """Whether this source's value for ``keys`` hides every lower source's."""
        if any(secret.keys == keys for secret in self.secret_files):
            return True
        node: Any = self.data
        for key in keys:
            if not isinstance(node, Mapping):
                return True  # a scalar or list replaces the whole section below it
            if key not in node:
                return False
            node = node[key]
        return True

    def _without_secret_files(self, data: Any, model: type[BaseModel], path: Keys) -> Any:
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for key, info in fields_by_key(model).items():
            if is_secret(info.annotation):
                self._take_secret_file(out, key, path)
            nested = model_of(info.annotation)
            value_model = dict_model_of(info.annotation)
            if key in out and nested is not None:
                out[key] = self._without_secret_files(out[key], nested, (*path, key))
            elif key in out and value_model is not None and isinstance(out[key], Mapping):
                out[key] = {
                    alias: self._without_secret_files(value, value_model, (*path, key, str(alias)))
                    for alias, value in out[key].items()
                }
        return out

    def _take_secret_file(self, out: dict[Any, Any], key: str, path: Keys) -> None:
        if isinstance(out.get(key), str):
            out[key] = SecretStr(out[key])
        file_key = key + FILE_SUFFIX
        if file_key not in out:
            return
        file_path = out.pop(file_key)
        dotted = ".".join((*path, file_key))
        if out.get(key) is not None and file_path is not None:
            self.problems.append(
                (dotted, f"set either {key} or {file_key} {self.origin}, not both")
            )
        elif isinstance(file_path, str) and file_path.strip():
            self._secret_files.append(_SecretFile((*path, key), file_path, self.origin))
        elif file_path is not None:
            self.problems.append((dotted, f"must be the path of a file holding the {key}"))


class YamlFileSource(KeyedSource):
    """The config file: safe YAML with its bounds (``yaml_loader``), duplicates as problems.

    pydantic-settings' own ``YamlConfigSettingsSource`` skips a missing file and parses with
    ``yaml.safe_load``; a missing file must be named, and an alias bomb refused while parsing.
    """

    origin = "in the config file"

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        super().__init__(settings_cls)
        self.path = path
        # A file that cannot be read or parsed is the whole report: nothing in it can be checked.
        self.fatal: ConfigError | None = None

    def read(self) -> dict[str, Any]:
        """The parsed document (empty when it could not be parsed: see ``fatal``)."""
        try:
            document, problems = read_yaml(self.path)
        except ConfigError as exc:
            self.fatal = exc
            return {}
        self.problems.extend(problems)
        return document


@dataclass(frozen=True)
class _EnvTarget:
    keys: Keys
    annotation: Any


def _env_target(root: type[BaseModel], segments: list[str]) -> _EnvTarget | None:
    """Map the lower-cased ``__``-separated parts of a variable name to a key path."""
    model: type[BaseModel] | None = root
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


def _empty_is_null(target: _EnvTarget) -> bool:
    """An empty variable is ``null`` wherever the file takes ``null``: a nullable key, and a
    table's inherited keys and ``topic``, which ``null`` makes inherit (or derive) instead of
    the value the file gives them."""
    if admits_none(target.annotation):
        return True
    keys = target.keys
    return (
        len(keys) == 4
        and keys[:2] == ("snow", "tables")
        and keys[3] in (*INHERITED_BY_TABLES, "topic")
    )


class EnvironmentSource(KeyedSource):
    """``SNOWSOURCE_*`` variables of the given mapping, as a nested dict keyed by YAML keys.

    pydantic-settings' ``EnvSettingsSource`` matches variables to field names or aliases; ours
    are YAML keys with ``.`` in them, table aliases are dict keys, and sections come as JSON.
    """

    origin = "from the environment"

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.environ = environ
        self.warnings: list[str] = []

    def read(self) -> dict[str, Any]:
        """Every ``SNOWSOURCE_*`` variable that names a key; the others become warnings."""
        found: list[tuple[_EnvTarget, str, str]] = []
        for name, raw in self.environ.items():
            upper = name.upper()
            if not upper.startswith(ENV_PREFIX) or upper == CONFIG_ENV:
                continue
            if upper.startswith(_RESERVED_ENV_PREFIX):
                continue
            target = _env_target(self.settings_cls, name[len(ENV_PREFIX) :].lower().split("__"))
            if target is None:
                self.warnings.append(
                    f"environment variable {name} matches no configuration key and is ignored "
                    "(SNOWSOURCE_ + key path in upper case, __ between levels, _ for '.')"
                )
                continue
            found.append((target, name, raw))
        data: dict[str, Any] = {}
        # Whole sections given as JSON first, so narrower variables refine rather than vanish.
        for target, name, raw in sorted(found, key=lambda item: len(item[0].keys)):
            value = self._parse(target, name, raw)
            node = data
            for key in target.keys[:-1]:
                child = node.get(key)
                if not isinstance(child, dict):
                    child = node[key] = {}
                node = child
            node[target.keys[-1]] = value
        return data

    def _parse(self, target: _EnvTarget, name: str, raw: str) -> Any:
        if not raw.strip() and _empty_is_null(target):
            return None
        if is_complex(target.annotation):
            try:
                return json.loads(raw)
            except ValueError as exc:
                self.problems.append(
                    (
                        ".".join(target.keys),
                        f"{name} must be JSON (lists and mappings come from the environment as "
                        f'JSON, e.g. ["a","b"] or {{"k":"v"}}): {exc}',
                    )
                )
                return None
        return raw


# --------------------------------------------------------------------------------------------
# Secret files
# --------------------------------------------------------------------------------------------


def _read_secret_file(path: str) -> str:
    text = Path(path).expanduser().read_text(encoding="utf-8")
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


class SecretFilesSource(PydanticBaseSettingsSource):
    """The ``<secret>.file`` keys of ``sources`` (highest priority first), read.

    A file is read only when no higher source sets its key (plainly, by its own ``.file``, or by
    replacing the section): then its content is the value, above every source.
    """

    def __init__(self, settings_cls: type[BaseSettings], sources: Sequence[KeyedSource]) -> None:
        super().__init__(settings_cls)
        self.sources = tuple(sources)
        self.problems: Problems = []

    @cached_property
    def data(self) -> dict[str, Any]:
        """The secrets read from files, nested like the keys they are for."""
        out: dict[str, Any] = {}
        for rank, source in enumerate(self.sources):
            for secret in source.secret_files:
                if any(higher.decides(secret.keys) for higher in self.sources[:rank]):
                    continue
                node = out
                for key in secret.keys[:-1]:
                    node = node.setdefault(key, {})
                node[secret.keys[-1]] = SecretStr(self._read(secret))
        return out

    def _read(self, secret: _SecretFile) -> str:
        try:
            return _read_secret_file(secret.path)
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.problems.append(
                (
                    ".".join(secret.keys) + FILE_SUFFIX,
                    f"cannot read secret file {secret.path!r} ({secret.origin}): {reason}",
                )
            )
            return _UNREADABLE_SECRET

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """The secrets below one top-level key."""
        key = field.alias or field_name
        return self.data.get(key), key, False

    def __call__(self) -> dict[str, Any]:
        """Only the keys whose secret came from a file."""
        return dict(self.data)


# --------------------------------------------------------------------------------------------
# One load_config call
# --------------------------------------------------------------------------------------------


class ConfigSources:
    """The sources of one ``load_config`` call, and what they found."""

    def __init__(
        self, settings_cls: type[BaseSettings], path: Path, environ: Mapping[str, str]
    ) -> None:
        self.environment = EnvironmentSource(settings_cls, environ)
        self.config_file = YamlFileSource(settings_cls, path)
        self.secret_files = SecretFilesSource(settings_cls, (self.environment, self.config_file))

    @property
    def problems(self) -> Problems:
        """Every source's problems, the environment's first."""
        return [
            *self.environment.problems,
            *self.secret_files.problems,
            *self.config_file.problems,
        ]

    @property
    def warnings(self) -> list[str]:
        """Variables that matched no key."""
        return list(self.environment.warnings)

    def secret_values(self) -> frozenset[str]:
        """Every secret some source sets (plain or from a file), whether or not it wins: an
        error about any other key must not show one of them."""
        found: set[str] = set()
        for source in (self.environment, self.config_file, self.secret_files):
            found.update(_secrets_in(source.data))
        found.discard(_UNREADABLE_SECRET)
        return frozenset(found)


def _secrets_in(node: Any) -> Iterator[str]:
    if isinstance(node, SecretStr):
        yield node.get_secret_value()
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _secrets_in(value)


# BaseSettings builds its sources in a class method (settings_customise_sources) that gets
# nothing of the call but the init kwargs, and those are configuration values: a path or an
# environment passed there would be validated as keys. A context variable, set by load_config
# for the duration of one Settings() build, hands that call's sources to the hook without class
# state shared by concurrent loads (threads or tasks). Settings built directly see none, so they
# validate their keyword arguments only, whatever the process environment holds.
_ACTIVE: ContextVar[ConfigSources | None] = ContextVar("snowsource_config_sources", default=None)


@contextmanager
def activated(sources: ConfigSources) -> Iterator[None]:
    """Make ``sources`` the ones ``Settings()`` builds from, inside this block only."""
    token = _ACTIVE.set(sources)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_sources() -> ConfigSources | None:
    """The sources of the ``load_config`` call in progress, if any."""
    return _ACTIVE.get()
