"""Logging: structlog, JSON when not on a tty, console otherwise (SPEC §9).

Context (``table``, ``alias``) is bound per poller; one rich line per sweep. As a safety net every
log event passes through a redactor that replaces any configured secret value wherever it appears,
so even an exception text that quoted a password cannot leak it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any

import structlog

from snowsource.config.redaction import RedactedConfig

_SECRETS: set[str] = set()
_REDACTED = "***"


def register_secrets(values: Iterable[str | None]) -> None:
    """Values that must never appear in a log line (passwords, tokens, keys)."""
    _SECRETS.update(v for v in values if v and len(v) >= 3)


def _scrub(value: Any) -> Any:
    if isinstance(value, RedactedConfig):
        # Masked key by key already; scrubbing values would also blank a username that
        # equals a password (admin/admin), and the username is not a secret.
        return value
    if isinstance(value, str):
        for secret in _SECRETS:
            if secret in value:
                value = value.replace(secret, _REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v) for v in value)
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: blank out registered secrets and Authorization headers."""
    for key in list(event_dict):
        if key.lower() in ("authorization", "password", "token", "access_token", "secret"):
            event_dict[key] = _REDACTED
        elif _SECRETS:
            event_dict[key] = _scrub(event_dict[key])
    return event_dict


def configure_logging(fmt: str = "auto", level: str = "INFO") -> None:
    """Configure structlog and the standard library (aiokafka, aiohttp) to write to stdout."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stdout.isatty())
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    if use_json:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=False,
    )
    # Libraries log through the standard library: keep them quiet unless something is wrong.
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(max(numeric, logging.WARNING))
    logging.getLogger("aiokafka").setLevel(logging.ERROR if numeric > logging.DEBUG else numeric)
