"""The value types of the configuration: enumerations, constrained scalars and their checks.

Every check here looks at one value only; rules that relate two keys live on the models
(``models.py``, ``snow.py``, ``kafka.py``). A check raises ``ValueError`` with the text the
user sees after the key path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic_core import PydanticCustomError

from snowsource.core.cursor import is_valid_ts
from snowsource.core.query import has_orderby

# The top-level keys a table inherits when it does not set them itself (a ``null`` there, in
# the file or as an empty environment variable, inherits too).
INHERITED_BY_TABLES: Final = (
    "batch.size",
    "poll.interval.ms",
    "overlap.seconds",
    "safety.lag.seconds",
    "value.format",
    "value.schema",
    "backfill.slices",
    "backfill.max.ahead.rows",
    "fields.exclude",
    "fields.hash",
    "fields.mask",
    "sensitive.fields",
)

FILE_SUFFIX: Final = ".file"
# The error type our own validators raise to report several keys below the validated model.
PROBLEMS_ERROR: Final = "snowsource_config_problems"

_ALIAS_RE = re.compile(r"^[a-z0-9_]+$")
_FIELD_RE = re.compile(r"^[A-Za-z0-9_.]+$")
# A column glob of fields.exclude: a field name with fnmatch's wildcards (* ? [seq] [!seq]).
_FIELD_GLOB_RE = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]+$")
_CURSOR_FIELD_RE = re.compile(r"^[A-Za-z0-9_]+$")
# The shape alone, to tell a typo from an impossible date; core.cursor holds the rule.
_TIMESTAMP_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_TOPIC_MAX_LENGTH: Final = 249
# A broker host: a name, an IPv4 address, or an IPv6 address (bracketed or not).
_BROKER_HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._:-]+)$")
TABLE_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_]+$")


# --------------------------------------------------------------------------------------------
# Enumerations
# --------------------------------------------------------------------------------------------


class AuthType(StrEnum):
    """``snow.auth.type``."""

    BASIC = "basic"
    OAUTH2 = "oauth2"
    API_KEY = "api_key"


class OAuthGrantType(StrEnum):
    """``snow.auth.oauth.grant.type``."""

    CLIENT_CREDENTIALS = "client_credentials"
    PASSWORD = "password"  # noqa: S105 - the grant type's name, not a credential


class SecurityProtocol(StrEnum):
    """``kafka.security.protocol``."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    """``kafka.sasl.mechanism``."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class CompressionType(StrEnum):
    """``kafka.compression.type`` (snappy, lz4 and zstd need aiokafka's extras installed)."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


class LogFormat(StrEnum):
    """``log.format``: ``auto`` is console on a tty, JSON otherwise."""

    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


class LogLevel(StrEnum):
    """``log.level`` (case-insensitive; ``WARN`` means ``WARNING``)."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


class TasksAssignment(StrEnum):
    """``tasks.assignment``: ``static`` by ``tasks.max``/``task.id``, or by the consumer group."""

    STATIC = "static"
    GROUP = "group"


class ValueFormat(StrEnum):
    """``value.format``: the Table API's strings as they are, converted by column type, or
    written in a Schema Registry schema (Avro, JSON Schema) derived from the dictionary."""

    STRING = "string"
    TYPED = "typed"
    AVRO = "avro"
    JSON_SCHEMA = "json_schema"

    @property
    def registered(self) -> bool:
        """Whether values are written in a schema registered with ``schema.registry``."""
        return self in (ValueFormat.AVRO, ValueFormat.JSON_SCHEMA)


class ValueSchema(StrEnum):
    """``value.schema``: a bare JSON value, or Kafka Connect's JsonConverter envelope."""

    NONE = "none"
    CONNECT = "connect"


class Deletes(StrEnum):
    """``deletes``: ignore deletions, tombstones from ``sys_audit_delete`` rows (``audit``),
    from a periodic key sweep (``reconcile``), or both (``[audit, reconcile]``)."""

    NONE = "none"
    AUDIT = "audit"
    RECONCILE = "reconcile"
    BOTH = "audit,reconcile"

    @property
    def audit(self) -> bool:
        """The table has a delete stream over ``sys_audit_delete``."""
        return self in (Deletes.AUDIT, Deletes.BOTH)

    @property
    def reconcile(self) -> bool:
        """The table has a key reconciliation sweep."""
        return self in (Deletes.RECONCILE, Deletes.BOTH)


_DELETE_MODES: Final = ("audit", "reconcile")
DELETES_ALLOWED: Final = "'none', 'audit', 'reconcile' or ['audit', 'reconcile']"


def deletes_modes(value: Any) -> Any:
    """``deletes`` as written (a word, a list of words, or ``audit,reconcile`` from the
    environment) as one :class:`Deletes` value; anything else is left for the enum to refuse."""
    words: list[Any]
    if isinstance(value, str):
        words = [w for w in (part.strip().lower() for part in value.split(",")) if w]
    elif isinstance(value, list | tuple):
        words = [w.strip().lower() if isinstance(w, str) else w for w in value]
    else:
        return value
    if not words or words == ["none"]:
        return Deletes.NONE.value
    if any(w not in _DELETE_MODES for w in words):
        bad = next(w for w in words if w not in _DELETE_MODES)
        raise ValueError(
            f"{bad!r} is not a delete mode: use {DELETES_ALLOWED} ('none' cannot be combined)"
        )
    modes = set(words)
    if len(modes) == len(_DELETE_MODES):
        return Deletes.BOTH.value
    return modes.pop()


class SensitiveFields(StrEnum):
    """``sensitive.fields``: leave out password and encrypted columns, or send them."""

    EXCLUDE = "exclude"
    INCLUDE = "include"


DisplayValue = Literal["false", "true", "all"]
"""``display.value`` as the Table API spells it (YAML booleans are accepted and mapped)."""


# --------------------------------------------------------------------------------------------
# Helpers for validators
# --------------------------------------------------------------------------------------------


def problems_error(problems: Iterable[tuple[str, str]]) -> PydanticCustomError:
    """An error carrying ``(key below this model, message)`` pairs; the loader expands it."""
    items = tuple(problems)
    summary = "; ".join(f"{key}: {msg}" for key, msg in items)
    return PydanticCustomError(PROBLEMS_ERROR, "{summary}", {"summary": summary, "problems": items})


def case_insensitive(enum_cls: type[StrEnum], aliases: Mapping[str, str] | None = None) -> Any:
    """Accept an enum value in any letter case (``plaintext``, ``Info``)."""
    extra = {k.lower(): v for k, v in (aliases or {}).items()}

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            wanted = value.strip().lower()
            if wanted in extra:
                return extra[wanted]
            for member in enum_cls:
                if member.value.lower() == wanted:
                    return member.value
        return value

    return BeforeValidator(convert)


def required(key: str, why: str, *, secret: bool) -> str:
    """The message for a key another key's value makes mandatory."""
    alternative = f" (or {key}{FILE_SUFFIX}: /path/to/file)" if secret else ""
    return f"required {why}{alternative}"


def none_to_empty(value: Any) -> Any:
    """A YAML ``null`` for a string that has an empty default."""
    return "" if value is None else value


def empty_to_none(value: Any) -> Any:
    """A blank string for an optional key means "not set"."""
    return None if isinstance(value, str) and not value.strip() else value


# --------------------------------------------------------------------------------------------
# Checks of one value
# --------------------------------------------------------------------------------------------


def _check_secret(value: SecretStr) -> SecretStr:
    if not value.get_secret_value():
        raise ValueError("must not be empty")
    return value


def check_url(value: str, *, allow_userinfo: bool = False) -> str:
    """An ``http(s)`` URL with a host and no query or fragment, without a trailing slash."""
    try:
        parts = urlsplit(value.strip())
        _ = parts.port  # raises on a malformed port
    except ValueError as exc:
        # urllib's own text can quote part of the URL (a password mistaken for a port).
        reason = "the port must be a number in 0..65535" if "Port" in str(exc) else "malformed"
        raise ValueError(f"not a valid URL ({reason})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("must start with https:// or http://")
    if not parts.hostname:
        raise ValueError("must name a host, e.g. https://acme.service-now.com")
    if parts.query or parts.fragment or value.rstrip().endswith(("?", "#")):
        raise ValueError("must not have a query (?...) or fragment (#...)")
    if (parts.username is not None or parts.password is not None) and not allow_userinfo:
        raise ValueError("must not contain credentials: put them under snow.auth")
    # A trailing slash would double up when the client appends /api/now/v2/table/...
    return urlunsplit((parts.scheme.lower(), parts.netloc, parts.path.rstrip("/"), "", ""))


def _check_optional_url(value: str | None) -> str | None:
    return None if value is None else check_url(value)


def _check_optional_proxy_url(value: str | None) -> str | None:
    return None if value is None else check_url(value, allow_userinfo=True)


def _check_topic(value: str) -> str:
    if not _TOPIC_RE.match(value) or value in (".", "..") or len(value) > _TOPIC_MAX_LENGTH:
        raise ValueError(
            f"not a valid Kafka topic name: use 1..{_TOPIC_MAX_LENGTH} of A-Z a-z 0-9 . _ -"
        )
    return value


def _check_topic_prefix(value: str) -> str:
    if value and not _TOPIC_RE.match(value):
        raise ValueError("may only contain A-Z a-z 0-9 . _ - (it starts every topic name)")
    return value


def _check_broker_default(value: int) -> int:
    if value != -1 and value < 1:
        raise ValueError("must be -1 (broker default) or a positive integer")
    return value


def _check_field_name(value: str) -> str:
    if not _FIELD_RE.match(value):
        raise ValueError("a field name may only contain A-Z a-z 0-9 _ . (e.g. caller_id.name)")
    return value


def _check_field_glob(value: str) -> str:
    if not _FIELD_GLOB_RE.match(value):
        raise ValueError(
            "a column glob may only contain A-Z a-z 0-9 _ . and the wildcards * ? [...] "
            "(e.g. u_ssn, *_pin, caller_id.*)"
        )
    return value


def _check_cursor_field(value: str) -> str:
    if not _CURSOR_FIELD_RE.match(value):
        raise ValueError("may only contain A-Z a-z 0-9 _ (e.g. sys_updated_on, inc_sys_id)")
    return value


def _check_alias(value: str) -> str:
    if not _ALIAS_RE.match(value):
        raise ValueError("a table alias may only contain a-z 0-9 _ (e.g. change_request)")
    return value


def display_value_word(value: Any) -> Any:
    """YAML turns an unquoted true/false into a boolean; the Table API wants the word."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.strip().lower() if isinstance(value, str) else value


def stringify_configs(value: Any) -> Any:
    """Topic configs are strings for Kafka; YAML gives numbers and booleans for them."""
    if not isinstance(value, Mapping):
        return value
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, int | float):
            out[key] = str(item)
        else:
            out[key] = item
    return out


def join_servers(value: Any) -> Any:
    """``bootstrap.servers`` may be a YAML list."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    return value


def check_servers(value: str) -> str:
    """``host:port[,host:port...]``, blanks around commas dropped."""
    servers = [item.strip() for item in value.split(",")]
    if not value.strip() or not all(servers):
        raise ValueError("must be host:port[,host:port...], e.g. localhost:9092")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if (
            not sep
            or not _BROKER_HOST_RE.match(host)
            or not port.isdigit()
            or not 0 < int(port) <= 65535
        ):
            raise ValueError(f"{server!r} is not host:port (e.g. localhost:9092)")
    return ",".join(servers)


def _check_start_timestamp(value: str) -> str:
    hint = "must be exactly 'YYYY-MM-DD HH:MM:SS' in UTC, e.g. '1970-01-01 00:00:00'"
    if is_valid_ts(value):
        return value
    if _TIMESTAMP_RE.match(value):
        raise ValueError(f"{hint}; this is not a real date and time")
    raise ValueError(hint)


def _check_query(value: str) -> str:
    if has_orderby(value):
        raise ValueError(
            "must not contain ORDERBY/ORDERBYDESC: the daemon orders by the cursor fields itself"
        )
    return value


def _check_query_category(value: str | None) -> str | None:
    if value is not None and "&" in value:
        raise ValueError("must not contain '&'")
    return value


# --------------------------------------------------------------------------------------------
# Annotated types used by the models
# --------------------------------------------------------------------------------------------

Secret = Annotated[SecretStr, AfterValidator(_check_secret)]
NonEmptyStr = Annotated[str, Field(min_length=1)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
BatchSize = Annotated[int, Field(ge=1, le=10000)]
# Concurrent keyset pagers of one table's backfill: past the pool's requests they only queue.
BackfillSlices = Annotated[int, Field(ge=1, le=64)]
BrokerDefaultInt = Annotated[int, AfterValidator(_check_broker_default)]
ReplicationFactor = Annotated[int, Field(le=32767), AfterValidator(_check_broker_default)]
TopicName = Annotated[str, AfterValidator(_check_topic)]
TopicPrefix = Annotated[str, AfterValidator(_check_topic_prefix)]
TableAlias = Annotated[str, AfterValidator(_check_alias)]
CursorField = Annotated[str, AfterValidator(_check_cursor_field)]
FieldName = Annotated[str, AfterValidator(_check_field_name)]
FieldGlob = Annotated[str, AfterValidator(_check_field_glob)]
SensitiveFieldsKey = Annotated[SensitiveFields, case_insensitive(SensitiveFields)]
OptionalStr = Annotated[str | None, BeforeValidator(empty_to_none)]
OptionalPath = OptionalStr
OptionalUrl = Annotated[OptionalStr, AfterValidator(_check_optional_url)]
OptionalProxyUrl = Annotated[OptionalStr, AfterValidator(_check_optional_proxy_url)]
InstanceUrl = Annotated[str, AfterValidator(check_url)]
Query = Annotated[str, BeforeValidator(none_to_empty), AfterValidator(_check_query)]
QueryCategory = Annotated[
    str | None, BeforeValidator(empty_to_none), AfterValidator(_check_query_category)
]
StartTimestamp = Annotated[str, AfterValidator(_check_start_timestamp)]
ValueFormatKey = Annotated[ValueFormat, case_insensitive(ValueFormat)]
ValueSchemaKey = Annotated[ValueSchema, case_insensitive(ValueSchema)]
