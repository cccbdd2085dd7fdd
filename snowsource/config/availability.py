"""Keys whose feature is announced but not shipped yet: refused at load, never silently ignored.

A user who sets ``exactly.once: true`` expects exactly-once delivery; accepting the key while the
daemon still delivers at least once would be a silent lie. Each entry is a ``(key, value)``
pair; a key is looked up at the top level and in every table. Delete the entry in the change
that ships the feature.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Final

from snowsource.config.models import Settings, yaml_key

NOT_YET_AVAILABLE: Final[tuple[tuple[str, object], ...]] = (("exactly.once", True),)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _value(model: Any, key: str) -> object:
    value = getattr(model, key.replace(".", "_"), None)
    return value.value if isinstance(value, Enum) else value


def unavailable_features(settings: Settings) -> list[tuple[str, str]]:
    """``(key path, message)`` for every key set to a value this release cannot honour yet."""
    problems: list[tuple[str, str]] = []
    for key, value in NOT_YET_AVAILABLE:
        field = key.replace(".", "_")
        default = Settings.model_fields[field].default if field in Settings.model_fields else None
        top = _value(settings, key)
        if field in Settings.model_fields and top == value:
            problems.append((yaml_key(field), _message(key, value, default)))
        for alias, table in settings.tables.items():
            # A table that only inherits the top-level value was reported with it.
            if _value(table, key) == value and top != value:
                table_default = type(table).model_fields[field].default
                problems.append((f"snow.tables.{alias}.{key}", _message(key, value, table_default)))
    return problems


def _message(key: str, value: object, default: object) -> str:
    shown_default = _shown(default.value if isinstance(default, Enum) else default)
    return (
        f"{key}: {_shown(value)} is not available in this release yet: leave {key} out "
        f"(default {shown_default})"
    )
