"""Logging: structlog, JSON when not on a tty, console otherwise (SPEC §9, §13.2).

Our own events and the standard-library records of aiokafka, aiohttp and asyncio leave through one
handler and one ``structlog.stdlib.ProcessorFormatter``, so in JSON mode every line is one JSON
object and the redactor (``snowsource.observability.redact``) sees every line, whichever library
wrote it. On the way:

- aiokafka's request/response dumps are dropped at any level: they carry SASL exchange bytes
  (``SaslAuthenticateRequest(sasl_auth_bytes=b'user\\x00user\\x00<password>')``, SCRAM proofs);
- a library message repeated within ``LIBRARY_REPEAT_SECONDS`` is printed once, and the next one
  after the window says how many were held back (a Kafka outage makes aiokafka log thousands);
- keys of our own events that collide with the log's own (``timestamp``, ``level``, ``logger``)
  are renamed rather than silently overwritten.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any, Final

import structlog
from aiokafka import errors

from snowsource.config.redaction import RedactedConfig
from snowsource.observability.broker_absence import LOGGERS as FAILOVER_LOGGERS
from snowsource.observability.broker_absence import BrokerAbsence
from snowsource.observability.redact import REDACTED, redact_value, register_secrets

__all__ = [
    "LIBRARY_REPEAT_SECONDS",
    "RepeatLimiter",
    "configure_logging",
    "guard_reserved_keys",
    "redact_secrets",
    "register_secrets",
]

#: A library message (same logger, same format string) is printed at most once per window.
LIBRARY_REPEAT_SECONDS: Final = 10.0

# The log line's own keys; an event argument of the same name is renamed with this prefix.
_RESERVED: Final = ("timestamp", "level", "logger")
_RENAMED_PREFIX: Final = "arg_"
# Keys whose value is a credential whatever it looks like.
_SECRET_KEYS: Final = frozenset(
    {"authorization", "password", "token", "access_token", "refresh_token", "secret", "api_key"}
)
# aiokafka.conn logs every request and response struct at DEBUG, SASL handshakes included.
_DUMP_PREFIXES: Final = ("Request to ", "Response from ")
_HANDLER_MARK: Final = "_snowsource_handler"
# Coordinator lookups a broker refuses only while it is starting (aiokafka retries them).
_STARTING_UP: Final = (
    errors.CoordinatorNotAvailableError,
    errors.CoordinatorLoadInProgressError,
    errors.NotCoordinatorForGroupError,
)


def guard_reserved_keys(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor (first in the chain): ``timestamp=`` becomes ``arg_timestamp``.

    Without it the log's own time stamp would overwrite a cursor timestamp passed as
    ``timestamp=`` and the line would lie about where a table resumed.
    """
    for key in _RESERVED:
        if key in event_dict:
            event_dict[_RENAMED_PREFIX + key] = event_dict.pop(key)
    return event_dict


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: blank credential-named keys, redact every other value."""
    for key in list(event_dict):
        value = event_dict[key]
        if key.lower() in _SECRET_KEYS:
            event_dict[key] = REDACTED
        elif not isinstance(value, RedactedConfig):
            # A RedactedConfig is masked key by key already; scrubbing its values again would
            # blank a username that equals a password (admin/admin), and a username is no secret.
            event_dict[key] = redact_value(value)
    return event_dict


class _DropRequestDumps(logging.Filter):
    """On ``aiokafka.conn``: never let a request/response struct dump through."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_DUMP_PREFIXES))


class _CoordinatorStartup(logging.Filter):
    """On aiokafka's group coordinator: a lookup the broker is still getting ready for is INFO.

    A freshly started broker answers the first coordinator lookups of a consumer group (our
    membership) with "not available" or "loading" while it creates ``__consumer_offsets``;
    aiokafka retries them by itself but logs each at ERROR, which alerts on a normal start.
    Any other lookup failure keeps its level.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.levelno >= logging.ERROR and args and isinstance(args[0], _STARTING_UP):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


class RepeatLimiter(logging.Filter):
    """One line per library message per window; the next line after it carries ``repeated``.

    Only foreign records are limited (structlog's own arrive as dicts): our own events are few
    and each one matters. ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        window: float = LIBRARY_REPEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._window = window
        self._clock = clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, dict):
            return True
        key = (record.name, str(record.msg))
        now = self._clock()
        shown = self._seen.get(key)
        if shown is not None and now - shown[0] < self._window:
            self._seen[key] = (shown[0], shown[1] + 1)
            return False
        if shown is not None and shown[1]:
            record.repeated = shown[1]
        if len(self._seen) > 10_000:  # many distinct messages: forget the old windows
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self._window}
        self._seen[key] = (now, 0)
        return True


def _add_repeated(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    record = event_dict.get("_record")
    repeated = getattr(record, "repeated", None)
    if repeated:
        event_dict["repeated"] = repeated
        event_dict["repeat_window_seconds"] = LIBRARY_REPEAT_SECONDS
    return event_dict


def _library_level(numeric: int) -> int:
    # Libraries stay quiet unless something is wrong or DEBUG was asked for.
    return numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)


def _filter(logger: str, kind: type[logging.Filter]) -> None:
    """Put a ``kind`` filter on ``logger`` once, however often logging is configured."""
    target = logging.getLogger(logger)
    if not any(isinstance(f, kind) for f in target.filters):
        target.addFilter(kind())


def configure_logging(
    fmt: str = "auto", level: str = "INFO", *, secrets: Iterable[str | None] = ()
) -> None:
    """Send structlog and the standard library (aiokafka, aiohttp, asyncio) to stdout, redacted.

    Idempotent: calling it again replaces the handler it installed before.
    """
    register_secrets(secrets)
    use_json = fmt == "json" or (fmt == "auto" and not sys.stdout.isatty())
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_repeated,
        # Tracebacks become text before the redactor runs: an exception may quote a secret.
        structlog.processors.format_exc_info,
        redact_secrets,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())
    )
    structlog.configure(
        processors=[
            guard_reserved_keys,
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    handler.addFilter(RepeatLimiter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(_library_level(numeric))
    logging.getLogger("snowsource").setLevel(numeric)
    # aiokafka logs every reconnect at ERROR and its connection internals at DEBUG.
    aiokafka_level = logging.ERROR if numeric > logging.DEBUG else numeric
    logging.getLogger("aiokafka").setLevel(aiokafka_level)
    _filter("aiokafka.conn", _DropRequestDumps)
    _filter("aiokafka.consumer.group_coordinator", _CoordinatorStartup)
    # After the start-up filter: a lookup it made INFO starts no episode.
    for name in FAILOVER_LOGGERS:
        _filter(name, BrokerAbsence)
