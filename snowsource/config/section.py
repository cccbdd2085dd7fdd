"""The base of every configuration section: frozen, YAML keys only.

Field names are the YAML keys with ``_`` for ``.`` (``tasks_max`` is ``tasks.max``): one alias
generator gives every field its key, and only the keys are accepted as input.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section", "yaml_key"]


def yaml_key(field_name: str) -> str:
    """The YAML key of a field: ``connect_timeout_ms`` is ``connect.timeout.ms``."""
    return field_name.replace("_", ".")


class Section(BaseModel):
    """Base of every section: frozen, unknown keys rejected, YAML keys (aliases) only."""

    # Spelled out here and on Settings: the pydantic mypy plugin reads only literal keywords
    # (it would not see ``frozen`` through a shared dict).
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=yaml_key,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        # A ValidationError printed as is (Settings built directly) must not quote a secret.
        hide_input_in_errors=True,
    )
