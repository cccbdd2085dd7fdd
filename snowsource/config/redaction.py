"""Showing configuration without its secrets: URL userinfo masked, secret values as ``***``."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from pydantic import BaseModel, SecretStr

from snowsource.core.secret_text import REDACTED

if TYPE_CHECKING:
    from snowsource.config.models import Settings

__all__ = [
    "REDACTED",
    "ConfigSecret",
    "RedactedConfig",
    "config_secrets",
    "mask_userinfo",
    "redacted_dict",
]

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


@dataclass(frozen=True)
class ConfigSecret:
    """A secret of the configuration, and the user name sent beside it (``user:password`` in a
    Basic header or a URL), when there is one."""

    value: str
    username: str | None = None


def config_secrets(cfg: BaseModel) -> list[ConfigSecret]:
    """Every secret ``cfg`` holds, found by walking the model, so a secret field added later is
    known to the log redactor without anyone listing it: each ``SecretStr`` field (with its
    sibling user name: ``username`` beside ``password``, ``sasl_username`` beside
    ``sasl_password``) and the password of every URL's ``user:password@``."""
    return list(_walk(cfg))


def _walk(node: Any) -> Iterator[ConfigSecret]:
    if isinstance(node, BaseModel):
        for name in type(node).model_fields:
            value = getattr(node, name)
            if isinstance(value, SecretStr):
                user = getattr(node, name.replace("password", "username"), None)
                pair = user if "password" in name and isinstance(user, str) else None
                yield ConfigSecret(value.get_secret_value(), pair)
            else:
                yield from _walk(value)
    elif isinstance(node, Mapping):
        for item in node.values():
            yield from _walk(item)
    elif isinstance(node, list | tuple):
        for item in node:
            yield from _walk(item)
    elif isinstance(node, str):
        for found in _USERINFO_RE.finditer(node):
            user, sep, password = found["userinfo"].partition(":")
            secret, name = (password, user) if sep else (user, "")
            # As written and as sent: a URL's userinfo may be percent-encoded either way.
            for value in {secret, unquote(secret)}:
                yield ConfigSecret(value, unquote(name) or None)
