"""Showing configuration without its secrets: URL userinfo masked, secret values as ``***``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from snowsource.core.secret_text import REDACTED

if TYPE_CHECKING:
    from snowsource.config.models import Settings

__all__ = ["REDACTED", "RedactedConfig", "mask_userinfo", "redacted_dict"]

# scheme://userinfo@ — greedy up to the last '@' of the run, so a password that itself contains
# '@' (or '/', '#', ':') is masked whole rather than cut where a URL parser would cut it.
_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s'\"<>]*)@")


def _masked_userinfo(userinfo: str) -> str:
    user, sep, _password = userinfo.partition(":")
    # A lone userinfo is often a token (https://TOKEN@host): mask it whole.
    return f"{user}:{REDACTED}" if sep else REDACTED


def mask_userinfo(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` as ``scheme://user:***@``."""
    return _USERINFO_RE.sub(lambda m: f"{m['scheme']}{_masked_userinfo(m['userinfo'])}@", text)


class RedactedConfig(dict[str, Any]):
    """The effective configuration with every secret already masked, key by key.

    A marker for log redactors: scrubbing it again for secret *values* would blank out
    unrelated keys that happen to contain one (``username: admin`` next to ``password: admin``).
    """


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return REDACTED
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, str):
        return mask_userinfo(value)
    return value


def redacted_dict(cfg: Settings) -> RedactedConfig:
    """The effective configuration keyed by YAML keys, secrets as ``***`` (None when unset)."""
    return RedactedConfig(_plain(cfg.model_dump(mode="python", by_alias=True)))
