"""Showing configuration without its secrets: URL userinfo masked, secret values as ``***``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, quote_plus

from pydantic import SecretStr

if TYPE_CHECKING:
    from snowsource.config.models import Settings

REDACTED: Final = "***"

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


# Below this length a secret is masked only where it is quoted ('abc'): masking every bare
# occurrence of a short value would blank out ordinary words of the message around it.
_MIN_BARE_SECRET: Final = 4


def mask_values(text: str, values: Iterable[str]) -> str:
    """``text`` with each of ``values`` as ``***``: quoted as ``repr`` shows it, bare, and in
    the URL-encoded forms a URL would carry it in (bare forms only from 4 characters on)."""
    forms: set[str] = set()
    for value in values:
        if not value:
            continue
        forms.add(repr(value))
        if len(value) >= _MIN_BARE_SECRET:
            forms.update((value, repr(value)[1:-1], quote(value, safe=""), quote_plus(value)))
    # Longest first, so a secret that contains another one is masked whole.
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text


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
