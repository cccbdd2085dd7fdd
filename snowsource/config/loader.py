"""``load_config``: the only entry point that reads anything.

``Settings()`` is built once with this call's sources active (``sources.py``): pydantic-settings
calls them in priority order, merges their dicts and validates the result. Then what needs the
validated whole is checked: files named by the config exist. The sources report instead of
raising, so every problem — theirs and validation's — is raised at once as ``ConfigError``,
each with the user's dotted key path and what is allowed, before anything is contacted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from snowsource.config.models import Settings
from snowsource.config.problems import safe_problems, validation_problems
from snowsource.config.sources import CONFIG_ENV, ConfigSources, activated
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
    sources = ConfigSources(Settings, config_path, environ)
    settings: Settings | None = None
    validation: list[tuple[str, str]] = []
    with activated(sources):
        try:
            settings = Settings()
        except ValidationError as exc:
            validation = validation_problems(exc)
    if sources.config_file.fatal is not None:
        raise sources.config_file.fatal
    problems = [*sources.problems, *validation]
    if settings is not None and not problems:
        problems = _missing_files(settings)
    if problems or settings is None:
        found = safe_problems(problems, sources.secret_values())
        raise ConfigError(found or [("", "invalid configuration")])
    return LoadedConfig(settings=settings, warnings=sources.warnings, path=config_path)
