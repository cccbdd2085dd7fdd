"""``load_config``: the only entry point that reads anything.

It reads the file, maps the environment, reads ``.file`` secrets, merges (environment wins),
validates the merged dict with the frozen ``Settings`` model, then checks what needs the
validated whole: files named by the config exist, no key asks for a feature this release does
not have. Every problem is raised at once as ``ConfigError``, each with the user's dotted key
path and what is allowed, before anything is contacted.

Why a plain pydantic model and not pydantic-settings: the sources need per-call input (the path,
an ``env`` mapping in tests), the environment mapping (``_`` for ``.`` inside a key, literal
table aliases, JSON for sections) is not one pydantic-settings' env source can express, and
every source reports problems instead of raising. What remained of pydantic-settings was its
private ``_build_sources`` argument; merging two dicts is simpler and says what it does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from snowsource.config.availability import unavailable_features
from snowsource.config.models import Settings
from snowsource.config.problems import safe_problems, validation_problems
from snowsource.config.sources import CONFIG_ENV, environment_source, file_source, merged
from snowsource.config.yaml_loader import read_yaml
from snowsource.core.errors import ConfigError

DEFAULT_CONFIG_PATH: Final = Path("config.yaml")


@dataclass(frozen=True)
class LoadedConfig:
    """What ``load_config`` produced: the settings, warnings for the caller to log, the file."""

    settings: Settings
    warnings: list[str]
    path: Path


def resolve_config_path(path: str | Path | None, env: Mapping[str, str] | None = None) -> Path:
    """``path`` if given, else ``$SNOWSOURCE_CONFIG``, else ``./config.yaml``."""
    if path is not None and str(path):
        return Path(path)
    environ = os.environ if env is None else env
    from_env = environ.get(CONFIG_ENV)
    return Path(from_env) if from_env else DEFAULT_CONFIG_PATH


def _missing_files(settings: Settings) -> list[tuple[str, str]]:
    problems = []
    for path, value in (
        ("snow.http.ca.file", settings.snow.http.ca_file),
        ("kafka.ssl.cafile", settings.kafka.ssl_cafile),
        ("kafka.ssl.certfile", settings.kafka.ssl_certfile),
        ("kafka.ssl.keyfile", settings.kafka.ssl_keyfile),
    ):
        if value is not None and not Path(value).expanduser().is_file():
            problems.append((path, f"file {value!r} does not exist or is not a regular file"))
    return problems


def load_config(path: str | Path | None, env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Read, override, validate and freeze the configuration.

    ``env`` defaults to ``os.environ``. Raises ``ConfigError`` listing every problem found
    (``ConfigFileNotFoundError`` when the file does not exist).
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    config_path = resolve_config_path(path, environ)
    document, problems = read_yaml(config_path)
    from_env = environment_source(environ)
    from_file = file_source(document)
    settings: Settings | None = None
    validation: list[tuple[str, str]] = []
    try:
        settings = Settings.model_validate(merged(from_file.data, from_env.data))
    except ValidationError as exc:
        validation = validation_problems(exc)
    problems = [*from_env.problems, *from_file.problems, *problems, *validation]
    if settings is not None and not problems:
        problems = [*_missing_files(settings), *unavailable_features(settings)]
    if problems or settings is None:
        raise ConfigError(safe_problems(problems) or [("", "invalid configuration")])
    return LoadedConfig(settings=settings, warnings=list(from_env.warnings), path=config_path)
