"""The one redactor: every string that leaves the process passes through ``redact``.

Logs (our own and every library's), REST bodies, ``check`` output, stored errors and text a server
echoed back all go through it. It knows two kinds of secret:

- values registered here (every secret of the configuration, learnt by walking it in
  ``register_config``, and OAuth tokens once the instance handed them out), each in every
  encoding it can travel in (``core/secret_text``: as is, URL-encoded, JSON-escaped, as Python
  ``repr`` shows it, base64), and ``user:password`` in base64 (a Basic header);
- shapes that are credentials whatever their value: ``Authorization: Basic …``/``Bearer …``,
  and ``password=``/``client_secret=``/``access_token=``… in forms, JSON and query strings. They
  catch what a server echoes before we could know the value (a token it issued in an error page).

Pure and synchronous, so it can sit inside a logging filter, an exception handler or a REST
response without an event loop.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterable
from typing import Final

from pydantic import BaseModel

from snowsource.config.redaction import config_secrets
from snowsource.core.secret_text import MIN_SECRET_LENGTH, REDACTED, encodings

__all__ = [
    "REDACTED",
    "redact",
    "redact_value",
    "register_config",
    "register_credentials",
    "register_secret",
    "register_secrets",
]

# Bearer tokens are renewed every half hour for as long as the daemon runs; keeping only the most
# recent ones bounds the registry while still covering tokens an in-flight error may quote.
_TRANSIENT_KEPT: Final = 32

_lock = threading.Lock()
_static: set[str] = set()
_transient: deque[str] = deque(maxlen=_TRANSIENT_KEPT)
_pattern: re.Pattern[str] | None = None

# Names of keys whose value is a credential (not credentials themselves).
_SECRET_KEY_NAMES: Final = (
    "password", "passwd", "pwd", "client_secret", "secret", "access_token", "refresh_token",
    "id_token", "token", "api_?key", "x-sn-apikey", "sasl_plain_password", "assertion",
)  # fmt: skip
_SECRET_NAMES: Final = "|".join(_SECRET_KEY_NAMES)
# "key": "value" in JSON (and Python reprs of dicts), key=value in forms and query strings. A bare
# "key: value" is prose ("snow.auth.password: field required") and is left alone.
_QUOTED: Final = re.compile(
    rf"""(?ix)
    (?P<key>(?P<q>["'])(?:[\w.-]*[._-])?(?:{_SECRET_NAMES})(?P=q))
    (?P<sep>\s*:\s*)
    (?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,}}\]]+)
    """
)
_FORM: Final = re.compile(
    rf"""(?ix)
    (?P<key>(?<![\w-])(?:[\w.-]*[._-])?(?:{_SECRET_NAMES}))
    (?P<sep>=)
    (?P<value>[^\s&;,"'<>]+)
    """
)
# An Authorization header value or a scheme + credentials pair anywhere in text.
_SCHEMES: Final = re.compile(r"(?i)\b(Basic|Bearer)\s+[A-Za-z0-9+/=._~-]{6,}")


def _rebuild() -> None:
    global _pattern  # noqa: PLW0603 - one process-wide registry by design
    forms: set[str] = set()
    for value in (*_static, *_transient):
        forms |= encodings(value)
    # Longest first, so a secret that contains another is blanked whole.
    ordered = sorted(forms, key=len, reverse=True)
    _pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None


def register_secret(value: str | None, *, transient: bool = False) -> None:
    """Never print ``value`` in any of its encodings. ``transient`` for tokens that rotate."""
    if not value or len(value) < MIN_SECRET_LENGTH:
        return
    with _lock:
        if value in _static or value in _transient:
            return
        if transient:
            _transient.append(value)
        else:
            _static.add(value)
        _rebuild()


def register_secrets(values: Iterable[str | None]) -> None:
    """``register_secret`` for each value (``None`` and empty values are skipped)."""
    for value in values:
        register_secret(value)


def register_credentials(username: str | None, password: str | None) -> None:
    """A username/password pair: the password, and ``user:password`` as a Basic header carries
    it (base64), so an echoed ``Authorization`` header cannot leak it either."""
    if not password:
        return
    register_secret(password)
    if username:
        register_secret(f"{username}:{password}")


def register_config(cfg: BaseModel) -> None:
    """Every secret of the configuration ``cfg`` (``config.redaction.config_secrets``): the one
    place the redactor learns what the configuration holds."""
    for secret in config_secrets(cfg):
        register_credentials(secret.username, secret.value)


def _named(match: re.Match[str]) -> str:
    value = match.group("value")
    quote_char = value[0] if value[:1] in ('"', "'") else ""
    return f"{match.group('key')}{match.group('sep')}{quote_char}{REDACTED}{quote_char}"


def redact(text: str) -> str:
    """``text`` with every known secret and every credential-shaped value replaced by ``***``."""
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    text = _SCHEMES.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _QUOTED.sub(_named, text)
    return _FORM.sub(_named, text)


def redact_value(value: object) -> object:
    """``redact`` applied to every string inside ``value`` (dict keys, lists, tuples, bytes)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, bytes | bytearray):
        return redact(bytes(value).decode("utf-8", "replace"))
    if isinstance(value, dict):
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact_value(v) for v in value]
    if isinstance(value, BaseException):
        return redact(f"{type(value).__name__}: {value}")
    return value
