"""The configuration: one YAML file, overridden by ``SNOWSOURCE_*`` environment variables (SPEC §2).

``load_config`` is the only entry point that reads anything. It parses the file (timestamps stay
strings, duplicate keys are errors), then builds the frozen ``Settings`` through two custom
pydantic-settings sources, environment first so it wins over the file:

- ``SNOWSOURCE_`` + key path upper-cased, ``__`` between levels, ``_`` for ``.`` inside a key
  (``SNOWSOURCE_SNOW__TABLES__CHANGE_REQUEST__QUERY``); lists and mappings as JSON; an empty value
  sets a nullable key to null. Variables matching no key come back as warnings, except
  ``SNOWSOURCE_CONFIG`` and ``SNOWSOURCE_TEST_*``.
- Each secret may be given as ``<key>.file: /path`` (read at load, one trailing newline
  stripped). Every source resolves its own ``.file`` keys before the sources are merged, so a
  ``.file`` from the environment replaces a plain key from the file and vice versa; both in one
  source is an error. Relative paths are relative to the working directory.

Every problem is collected and raised at once as ``ConfigError`` with the user's dotted key path
(``snow.tables.incident.start.timestamp``) and what is allowed. Validation happens at load,
before anything is contacted. ``Settings(...)`` built directly validates only its keyword
arguments: it never reads the process environment.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum, StrEnum
from functools import cache
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

import yaml
from aiokafka import codec as aiokafka_codec
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from snowsource.core.errors import ConfigError
from snowsource.core.query import has_orderby, normalise_query

__all__ = [
    "AuthConfig",
    "AuthType",
    "CompressionType",
    "DisplayValue",
    "HttpConfig",
    "KafkaConfig",
    "LoadedConfig",
    "LogConfig",
    "LogFormat",
    "LogLevel",
    "OAuthGrantType",
    "RestConfig",
    "SaslMechanism",
    "SecurityProtocol",
    "Settings",
    "SnowConfig",
    "TableConfig",
    "load_config",
    "redacted_dict",
    "resolve_config_path",
]

ENV_PREFIX: Final = "SNOWSOURCE_"
CONFIG_ENV: Final = "SNOWSOURCE_CONFIG"
_RESERVED_ENV_PREFIX: Final = "SNOWSOURCE_TEST_"
DEFAULT_CONFIG_PATH: Final = Path("config.yaml")
FILE_SUFFIX: Final = ".file"
REDACTED: Final = "***"

# Stands in for a secret whose file could not be read: a problem is already recorded (and
# ConfigError always follows), this only keeps "password is required" from piling on.
_UNREADABLE_SECRET: Final = "<unreadable secret file>"  # noqa: S105 - a placeholder
# The error type our own validators raise to report several keys below the validated model.
_PROBLEMS_ERROR: Final = "snowsource_config_problems"

_ALIAS_RE = re.compile(r"^[a-z0-9_]+$")
_TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_FIELD_RE = re.compile(r"^[A-Za-z0-9_.]+$")
_CURSOR_FIELD_RE = re.compile(r"^[A-Za-z0-9_]+$")
_TIMESTAMP_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_TOPIC_MAX_LENGTH: Final = 249
_TIMESTAMP_FORMAT: Final = "%Y-%m-%d %H:%M:%S"


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


DisplayValue = Literal["false", "true", "all"]
"""``display.value`` as the Table API spells it (YAML booleans are accepted and mapped)."""


# --------------------------------------------------------------------------------------------
# Field types and validators
# --------------------------------------------------------------------------------------------


def _problems(problems: Iterable[tuple[str, str]]) -> PydanticCustomError:
    """An error carrying ``(key below this model, message)`` pairs; ``load_config`` expands it."""
    items = tuple(problems)
    summary = "; ".join(f"{key}: {msg}" for key, msg in items)
    return PydanticCustomError(
        _PROBLEMS_ERROR, "{summary}", {"summary": summary, "problems": items}
    )


def _case_insensitive(enum_cls: type[StrEnum], aliases: Mapping[str, str] | None = None) -> Any:
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


def _required(key: str, why: str, *, secret: bool) -> str:
    alternative = f" (or {key}{FILE_SUFFIX}: /path/to/file)" if secret else ""
    return f"required {why}{alternative}"


def _check_secret(value: SecretStr) -> SecretStr:
    if not value.get_secret_value():
        raise ValueError("must not be empty")
    return value


def _check_url(value: str, *, allow_userinfo: bool = False) -> str:
    try:
        parts = urlsplit(value.strip())
        _ = parts.port  # raises on a malformed port
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
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
    return None if value is None else _check_url(value)


def _check_optional_proxy_url(value: str | None) -> str | None:
    return None if value is None else _check_url(value, allow_userinfo=True)


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


def _check_cursor_field(value: str) -> str:
    if not _CURSOR_FIELD_RE.match(value):
        raise ValueError("may only contain A-Z a-z 0-9 _ (e.g. sys_updated_on, inc_sys_id)")
    return value


def _check_alias(value: str) -> str:
    if not _ALIAS_RE.match(value):
        raise ValueError("a table alias may only contain a-z 0-9 _ (e.g. change_request)")
    return value


def _none_to_empty(value: Any) -> Any:
    return "" if value is None else value


def _empty_to_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


def _display_value(value: Any) -> Any:
    # YAML turns an unquoted true/false into a boolean; the Table API wants the word.
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.strip().lower() if isinstance(value, str) else value


def _stringify_configs(value: Any) -> Any:
    # Topic configs are strings for Kafka; YAML gives numbers and booleans for them.
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


def _join_servers(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    return value


def _check_servers(value: str) -> str:
    servers = [item.strip() for item in value.split(",")]
    if not value.strip() or not all(servers):
        raise ValueError("must be host:port[,host:port...], e.g. localhost:9092")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"{server!r} is not host:port (e.g. localhost:9092)")
    return ",".join(servers)


def _check_start_timestamp(value: str) -> str:
    hint = "must be exactly 'YYYY-MM-DD HH:MM:SS' in UTC, e.g. '1970-01-01 00:00:00'"
    if not _TIMESTAMP_RE.match(value):
        raise ValueError(hint)
    try:
        datetime.strptime(value, _TIMESTAMP_FORMAT)
    except ValueError:
        raise ValueError(f"{hint}; this is not a real date and time") from None
    return value


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


Secret = Annotated[SecretStr, AfterValidator(_check_secret)]
NonEmptyStr = Annotated[str, Field(min_length=1)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
BatchSize = Annotated[int, Field(ge=1, le=10000)]
BrokerDefaultInt = Annotated[int, AfterValidator(_check_broker_default)]
ReplicationFactor = Annotated[int, Field(le=32767), AfterValidator(_check_broker_default)]
TopicName = Annotated[str, AfterValidator(_check_topic)]
TopicPrefix = Annotated[str, AfterValidator(_check_topic_prefix)]
TableAlias = Annotated[str, AfterValidator(_check_alias)]
CursorField = Annotated[str, AfterValidator(_check_cursor_field)]
FieldName = Annotated[str, AfterValidator(_check_field_name)]
OptionalPath = Annotated[str | None, BeforeValidator(_empty_to_none)]


class _Section(BaseModel):
    """Base of every section: frozen, unknown keys rejected, YAML keys (aliases) only."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_alias=True, validate_by_name=False
    )


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


class HttpConfig(_Section):
    """``snow.http``: timeouts, concurrency and retry knobs of the ServiceNow client."""

    connect_timeout_ms: PositiveInt = Field(10000, alias="connect.timeout.ms")
    request_timeout_ms: PositiveInt = Field(60000, alias="request.timeout.ms")
    max_concurrent_requests: PositiveInt = Field(8, alias="max.concurrent.requests")
    retry_initial_backoff_ms: PositiveInt = Field(500, alias="retry.initial.backoff.ms")
    retry_max_backoff_ms: PositiveInt = Field(
        30000, alias="retry.max.backoff.ms", validate_default=True
    )
    # May carry proxy credentials: kept out of repr, and redacted_dict masks the password.
    proxy_url: Annotated[OptionalPath, AfterValidator(_check_optional_proxy_url)] = Field(
        None, alias="proxy.url", repr=False
    )
    ca_file: OptionalPath = Field(None, alias="ca.file")

    @field_validator("retry_max_backoff_ms")
    @classmethod
    def _max_not_below_initial(cls, value: int, info: ValidationInfo) -> int:
        initial = info.data.get("retry_initial_backoff_ms")
        if initial is not None and value < initial:
            raise ValueError(f"must be >= retry.initial.backoff.ms ({initial})")
        return value


_SECRET_AUTH_KEYS: Final = frozenset({"password", "oauth.client.secret", "api.key"})


class AuthConfig(_Section):
    """``snow.auth``: how snowsource authenticates to ServiceNow."""

    type: Annotated[AuthType, _case_insensitive(AuthType)] = AuthType.BASIC
    username: Annotated[str | None, BeforeValidator(_empty_to_none)] = None
    password: Secret | None = None
    oauth_grant_type: Annotated[OAuthGrantType, _case_insensitive(OAuthGrantType)] = Field(
        OAuthGrantType.CLIENT_CREDENTIALS, alias="oauth.grant.type"
    )
    oauth_client_id: Annotated[str | None, BeforeValidator(_empty_to_none)] = Field(
        None, alias="oauth.client.id"
    )
    oauth_client_secret: Secret | None = Field(None, alias="oauth.client.secret")
    oauth_token_url: Annotated[OptionalPath, AfterValidator(_check_optional_url)] = Field(
        None, alias="oauth.token.url"
    )
    api_key: Secret | None = Field(None, alias="api.key")

    @model_validator(mode="after")
    def _credentials_for_type(self) -> AuthConfig:
        missing: list[tuple[str, str]] = []

        def need(key: str, value: object, why: str) -> None:
            if value is None:
                missing.append((key, _required(key, why, secret=key in _SECRET_AUTH_KEYS)))

        if self.type is AuthType.BASIC:
            need("username", self.username, "with type: basic")
            need("password", self.password, "with type: basic")
        elif self.type is AuthType.OAUTH2:
            need("oauth.client.id", self.oauth_client_id, "with type: oauth2")
            need("oauth.client.secret", self.oauth_client_secret, "with type: oauth2")
            if self.oauth_grant_type is OAuthGrantType.PASSWORD:
                need("username", self.username, "with oauth.grant.type: password")
                need("password", self.password, "with oauth.grant.type: password")
        else:
            need("api.key", self.api_key, "with type: api_key (sent as x-sn-apikey)")
        if missing:
            raise _problems(missing)
        return self


class TableConfig(_Section):
    """One entry of ``snow.tables`` with every per-table value resolved.

    ``topic`` defaults to ``{topic.prefix}{alias}``; ``batch_size``, ``poll_interval_ms``,
    ``overlap_seconds`` and ``safety_lag_seconds`` fall back to the top-level keys of the same
    name when the table does not set them — consumers read them here only.
    """

    name: Annotated[str, Field(min_length=1)]
    topic: TopicName
    query: Annotated[str, BeforeValidator(_none_to_empty), AfterValidator(_check_query)] = ""
    query_domain: bool = Field(True, alias="query.domain")
    query_category: Annotated[
        str | None, BeforeValidator(_empty_to_none), AfterValidator(_check_query_category)
    ] = Field(None, alias="query.category")
    timestamp_field: CursorField = Field("sys_updated_on", alias="timestamp.field")
    # validate_default: the default sys_id must still differ from a custom timestamp.field.
    id_field: CursorField = Field("sys_id", alias="id.field", validate_default=True)
    fields: Annotated[list[FieldName], BeforeValidator(lambda v: [] if v is None else v)] = Field(
        default_factory=list
    )
    display_value: Annotated[DisplayValue, BeforeValidator(_display_value)] = Field(
        "false", alias="display.value"
    )
    exclude_reference_link: bool = Field(True, alias="exclude.reference.link")
    start_timestamp: Annotated[str, AfterValidator(_check_start_timestamp)] = Field(
        "1970-01-01 00:00:00", alias="start.timestamp"
    )
    batch_size: BatchSize = Field(1000, alias="batch.size")
    poll_interval_ms: PositiveInt = Field(5000, alias="poll.interval.ms")
    overlap_seconds: NonNegativeInt = Field(10, alias="overlap.seconds")
    safety_lag_seconds: NonNegativeInt = Field(2, alias="safety.lag.seconds")

    _alias: str = PrivateAttr(default="")

    @field_validator("name")
    @classmethod
    def _table_name(cls, value: str) -> str:
        if not _TABLE_NAME_RE.match(value):
            raise ValueError("a table or view name may only contain A-Z a-z 0-9 _")
        return value

    @field_validator("id_field")
    @classmethod
    def _cursor_fields_differ(cls, value: str, info: ValidationInfo) -> str:
        if value == info.data.get("timestamp_field"):
            raise ValueError("must differ from timestamp.field (the cursor needs two fields)")
        return value

    @property
    def alias(self) -> str:
        """The key of this table under ``snow.tables`` (empty for a standalone instance)."""
        return self._alias

    @property
    def start_datetime(self) -> datetime:
        """``start.timestamp`` as an aware UTC datetime."""
        return datetime.strptime(self.start_timestamp, _TIMESTAMP_FORMAT).replace(tzinfo=UTC)


def _instance_of(url: str) -> str:
    """Host of ``snow.url`` in lower case, with the port only when it is not the scheme's."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default_port = 443 if parts.scheme.lower() == "https" else 80
    if parts.port is not None and parts.port != default_port:
        return f"{host}:{parts.port}"
    return host


class SnowConfig(_Section):
    """``snow``: the instance, its credentials, HTTP client settings and the tables to stream."""

    url: Annotated[str, AfterValidator(_check_url)]
    auth: AuthConfig = Field(default_factory=AuthConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    tables: dict[TableAlias, TableConfig] = Field(default_factory=dict, validate_default=True)

    @field_validator("tables")
    @classmethod
    def _tables(
        cls, tables: dict[str, TableConfig], info: ValidationInfo
    ) -> dict[str, TableConfig]:
        if not tables:
            raise ValueError("at least one table is required (alias: {name: <table>})")
        url = info.data.get("url")
        instance = _instance_of(url) if isinstance(url, str) else ""
        seen: dict[tuple[str, str, str, str, bool], str] = {}
        clashes: list[tuple[str, str]] = []
        for alias, table in tables.items():
            # Private, so settable on a frozen model; done once, while it is being built.
            table._alias = alias
            # The fields of the source partition (SPEC §4): equal tuples share one offset.
            partition = (
                instance,
                table.name,
                table.timestamp_field,
                normalise_query(table.query),
                table.query_domain,
            )
            other = seen.setdefault(partition, alias)
            if other != alias:
                clashes.append(
                    (
                        alias,
                        f"resolves to the same source partition as {other!r} (same instance, "
                        "table name, timestamp.field, normalised query and query.domain): the two "
                        "would overwrite each other's offsets; change one query or drop one alias",
                    )
                )
        if clashes:
            raise _problems(clashes)
        return tables

    @property
    def instance(self) -> str:
        """The ``instance`` of every source partition: ``host`` or ``host:port`` (SPEC §4)."""
        return _instance_of(self.url)

    @property
    def token_url(self) -> str:
        """The OAuth token endpoint: ``oauth.token.url``, default ``{url}/oauth_token.do``."""
        return self.auth.oauth_token_url or f"{self.url}/oauth_token.do"


class KafkaConfig(_Section):
    """``kafka``: the producer and admin client connection."""

    bootstrap_servers: Annotated[
        str, BeforeValidator(_join_servers), AfterValidator(_check_servers)
    ] = Field("localhost:9092", alias="bootstrap.servers")
    security_protocol: Annotated[SecurityProtocol, _case_insensitive(SecurityProtocol)] = Field(
        SecurityProtocol.PLAINTEXT, alias="security.protocol"
    )
    sasl_mechanism: Annotated[
        SaslMechanism | None, BeforeValidator(_empty_to_none), _case_insensitive(SaslMechanism)
    ] = Field(None, alias="sasl.mechanism")
    sasl_username: Annotated[str | None, BeforeValidator(_empty_to_none)] = Field(
        None, alias="sasl.username"
    )
    sasl_password: Secret | None = Field(None, alias="sasl.password")
    ssl_cafile: OptionalPath = Field(None, alias="ssl.cafile")
    ssl_certfile: OptionalPath = Field(None, alias="ssl.certfile")
    ssl_keyfile: OptionalPath = Field(None, alias="ssl.keyfile")
    compression_type: Annotated[
        CompressionType,
        BeforeValidator(lambda v: "none" if v is None else v),
        _case_insensitive(CompressionType),
    ] = Field(CompressionType.NONE, alias="compression.type")
    linger_ms: NonNegativeInt = Field(5, alias="linger.ms")
    max_request_size: PositiveInt = Field(1048576, alias="max.request.size")
    startup_timeout_seconds: PositiveFloat = Field(60.0, alias="startup.timeout.seconds")

    @model_validator(mode="after")
    def _codec_installed(self) -> KafkaConfig:
        # snappy, lz4 and zstd need aiokafka's optional extras; find out now, not at first send.
        codec = self.compression_type.value
        available = {
            "gzip": aiokafka_codec.has_gzip,
            "snappy": aiokafka_codec.has_snappy,
            "lz4": aiokafka_codec.has_lz4,
            "zstd": aiokafka_codec.has_zstd,
        }.get(codec)
        if available is not None and not available():
            raise _problems(
                [
                    (
                        "compression.type",
                        f"{codec} needs aiokafka's optional extra: "
                        f"pip install 'aiokafka[{codec}]' (or use gzip or none)",
                    )
                ]
            )
        return self

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaConfig:
        if self.security_protocol not in (
            SecurityProtocol.SASL_PLAINTEXT,
            SecurityProtocol.SASL_SSL,
        ):
            return self
        why = f"with security.protocol: {self.security_protocol.value}"
        missing = [
            (key, _required(key, why, secret=key == "sasl.password"))
            for key, value in (
                ("sasl.mechanism", self.sasl_mechanism),
                ("sasl.username", self.sasl_username),
                ("sasl.password", self.sasl_password),
            )
            if value is None
        ]
        if missing:
            raise _problems(missing)
        return self


class RestConfig(_Section):
    """``rest``: the Kafka Connect compatible REST API."""

    enabled: bool = True
    host: NonEmptyStr = "127.0.0.1"
    # 0 asks the OS for a free port (tests); anything else is the listening port.
    port: Annotated[int, Field(ge=0, le=65535)] = 8083
    auth_token: Secret | None = Field(None, alias="auth.token")


class LogConfig(_Section):
    """``log``: output format and level."""

    format: Annotated[LogFormat, _case_insensitive(LogFormat)] = LogFormat.AUTO
    level: Annotated[LogLevel, _case_insensitive(LogLevel, {"warn": "WARNING"})] = LogLevel.INFO


# The top-level keys a table inherits when it does not set them itself (SPEC §2).
_INHERITED_BY_TABLES: Final = (
    "batch.size",
    "poll.interval.ms",
    "overlap.seconds",
    "safety.lag.seconds",
)
_DEFAULT_TOPIC_PREFIX: Final = "servicenow."


class Settings(BaseSettings):
    """The whole validated, frozen configuration (the root of the YAML file)."""

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", validate_by_alias=True, validate_by_name=False
    )

    name: NonEmptyStr = "servicenow-source"
    tasks_max: PositiveInt = Field(1, alias="tasks.max")
    task_id: NonNegativeInt = Field(0, alias="task.id")
    snow: SnowConfig
    batch_size: BatchSize = Field(1000, alias="batch.size")
    poll_interval_ms: PositiveInt = Field(5000, alias="poll.interval.ms")
    overlap_seconds: NonNegativeInt = Field(10, alias="overlap.seconds")
    safety_lag_seconds: NonNegativeInt = Field(2, alias="safety.lag.seconds")
    dedup_max_entries: PositiveInt = Field(200000, alias="dedup.max.entries")
    shutdown_timeout_seconds: PositiveFloat = Field(30.0, alias="shutdown.timeout.seconds")
    topic_prefix: TopicPrefix = Field(_DEFAULT_TOPIC_PREFIX, alias="topic.prefix")
    topic_creation_enable: bool = Field(True, alias="topic.creation.enable")
    topic_creation_partitions: BrokerDefaultInt = Field(-1, alias="topic.creation.partitions")
    topic_creation_replication_factor: ReplicationFactor = Field(
        -1, alias="topic.creation.replication.factor"
    )
    topic_creation_configs: Annotated[dict[str, str], BeforeValidator(_stringify_configs)] = Field(
        default_factory=dict, alias="topic.creation.configs"
    )
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    offset_storage_topic: TopicName = Field("snowsource-offsets", alias="offset.storage.topic")
    offset_storage_partitions: PositiveInt = Field(25, alias="offset.storage.partitions")
    offset_storage_replication_factor: ReplicationFactor = Field(
        -1, alias="offset.storage.replication.factor"
    )
    rest: RestConfig = Field(default_factory=RestConfig)
    log: LogConfig = Field(default_factory=LogConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only keyword arguments: the file and environment come in through ``load_config``."""
        # pydantic-settings' own env source would read unprefixed names such as LOG or NAME.
        return (init_settings,)

    @model_validator(mode="before")
    @classmethod
    def _resolve_table_defaults(cls, data: Any) -> Any:
        """Give every table its topic and the top-level values it does not override."""
        if not isinstance(data, Mapping):
            return data
        snow = data.get("snow")
        tables = snow.get("tables") if isinstance(snow, Mapping) else None
        if not isinstance(snow, Mapping) or not isinstance(tables, Mapping):
            return data
        inherited: dict[str, Any] = {}
        for key in _INHERITED_BY_TABLES:
            # An invalid top-level value is reported once, at its own key, not again per table.
            if data.get(key) is not None and _valid_root_value(key, data[key]):
                inherited[key] = data[key]
        prefix = data.get("topic.prefix", _DEFAULT_TOPIC_PREFIX)
        if not isinstance(prefix, str) or not _valid_root_value("topic.prefix", prefix):
            prefix = _DEFAULT_TOPIC_PREFIX
        resolved: dict[Any, Any] = {}
        for alias, raw in tables.items():
            table = raw
            if isinstance(raw, Mapping):
                # An explicit null means "not set here": inherit like an absent key.
                table = {
                    k: v for k, v in raw.items() if v is not None or k not in _INHERITED_BY_TABLES
                }
                for key, value in inherited.items():
                    table.setdefault(key, value)
                if table.get("topic") is None and isinstance(alias, str):
                    table["topic"] = f"{prefix}{alias}"
            resolved[alias] = table
        return {**data, "snow": {**snow, "tables": resolved}}

    @field_validator("task_id")
    @classmethod
    def _task_in_range(cls, value: int, info: ValidationInfo) -> int:
        tasks_max = info.data.get("tasks_max")
        if tasks_max is not None and value >= tasks_max:
            raise ValueError(f"must be in [0, tasks.max) = [0, {tasks_max - 1}]")
        return value

    @property
    def tables(self) -> dict[str, TableConfig]:
        """``snow.tables``: alias -> table, in file order (tables only in the environment last)."""
        return self.snow.tables


@cache
def _root_adapters() -> dict[str, TypeAdapter[Any]]:
    # Same types as the Settings fields of these keys.
    return {
        "batch.size": TypeAdapter(BatchSize),
        "poll.interval.ms": TypeAdapter(PositiveInt),
        "overlap.seconds": TypeAdapter(NonNegativeInt),
        "safety.lag.seconds": TypeAdapter(NonNegativeInt),
        "topic.prefix": TypeAdapter(TopicPrefix),
    }


def _valid_root_value(key: str, value: Any) -> bool:
    try:
        _root_adapters()[key].validate_python(value)
    except ValidationError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Schema introspection (shared by the sources and the error messages)
# --------------------------------------------------------------------------------------------


@cache
def _fields_by_key(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The model's fields by their YAML key."""
    return {(info.alias or name): info for name, info in model.model_fields.items()}


def _union_members(annotation: Any) -> tuple[Any, ...]:
    """The members of ``X | Y`` (or ``(X,)``), each stripped of ``Annotated`` metadata."""
    if get_origin(annotation) is Annotated:
        return _union_members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return tuple(member for arg in get_args(annotation) for member in _union_members(arg))
    return (annotation,)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for member in _union_members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _dict_model_of(annotation: Any) -> type[BaseModel] | None:
    """The value model of ``dict[str, Model]`` (``snow.tables``), else None."""
    for member in _union_members(annotation):
        if get_origin(member) is dict:
            return _model_of(get_args(member)[1])
    return None


def _is_complex(annotation: Any) -> bool:
    return any(
        get_origin(member) in (dict, list) or _model_of(member) is not None
        for member in _union_members(annotation)
    )


def _admits_none(annotation: Any) -> bool:
    return NoneType in _union_members(annotation)


def _is_secret(annotation: Any) -> bool:
    return any(
        isinstance(member, type) and issubclass(member, SecretStr)
        for member in _union_members(annotation)
    )


@cache
def _keys_with_files(model: type[BaseModel]) -> tuple[str, ...]:
    """Every key the sources accept in ``model``: its fields plus ``<secret>.file``."""
    keys: list[str] = []
    for key, info in _fields_by_key(model).items():
        keys.append(key)
        if _is_secret(info.annotation):
            keys.append(key + FILE_SUFFIX)
    return tuple(keys)


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model that holds the keys at ``loc`` (a pydantic error location)."""
    model: type[BaseModel] | None = Settings
    parts = list(loc)
    while parts and model is not None:
        key = parts.pop(0)
        info = _fields_by_key(model).get(str(key))
        if info is None:
            return None
        value_model = _dict_model_of(info.annotation)
        if value_model is not None:
            if not parts:
                return None
            parts.pop(0)  # the alias
            model = value_model
        else:
            model = _model_of(info.annotation)
    return model


def _aliased_loc(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """``loc`` with field names replaced by YAML keys (pydantic reports a default by its name)."""
    out: list[str | int] = []
    model: type[BaseModel] | None = Settings
    expect_alias = False
    for part in loc:
        if expect_alias or model is None or not isinstance(part, str):
            out.append(part)
            expect_alias = False
            continue
        info = _fields_by_key(model).get(part)
        if info is None and part in model.model_fields:
            info = model.model_fields[part]
            part = info.alias or part  # noqa: PLW2901 - the key replaces the name on purpose
        out.append(part)
        if info is None:
            model = None
        elif (value_model := _dict_model_of(info.annotation)) is not None:
            model, expect_alias = value_model, True
        else:
            model = _model_of(info.annotation)
    return tuple(out)


def _is_secret_loc(loc: tuple[str | int, ...]) -> bool:
    if not loc:
        return False
    model = _model_at(loc[:-1])
    info = _fields_by_key(model).get(str(loc[-1])) if model is not None else None
    return info is not None and _is_secret(info.annotation)


# --------------------------------------------------------------------------------------------
# Secret files
# --------------------------------------------------------------------------------------------


def _read_secret_file(path: str) -> str:
    text = Path(path).expanduser().read_text(encoding="utf-8")
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


def _resolve_secret_files(
    data: Any,
    model: type[BaseModel],
    path: tuple[str, ...],
    problems: list[tuple[str, str]],
    origin: str,
) -> Any:
    """Replace every ``<secret>.file`` in ``data`` (one source's data) by the file's content."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for key, info in _fields_by_key(model).items():
        file_key = key + FILE_SUFFIX
        if _is_secret(info.annotation) and file_key in out:
            file_path = out.pop(file_key)
            dotted = ".".join((*path, file_key))
            if out.get(key) is not None and file_path is not None:
                problems.append((dotted, f"set either {key} or {file_key} {origin}, not both"))
            elif isinstance(file_path, str) and file_path.strip():
                try:
                    out[key] = _read_secret_file(file_path)
                except (OSError, UnicodeDecodeError) as exc:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                    problems.append(
                        (dotted, f"cannot read secret file {file_path!r} ({origin}): {reason}")
                    )
                    out[key] = _UNREADABLE_SECRET
            elif file_path is not None:
                problems.append((dotted, f"must be the path of a file holding the {key}"))
        nested = _model_of(info.annotation)
        value_model = _dict_model_of(info.annotation)
        if key in out and nested is not None:
            out[key] = _resolve_secret_files(out[key], nested, (*path, key), problems, origin)
        elif key in out and value_model is not None and isinstance(out[key], Mapping):
            out[key] = {
                alias: _resolve_secret_files(
                    value, value_model, (*path, key, str(alias)), problems, origin
                )
                for alias, value in out[key].items()
            }
    return out


# --------------------------------------------------------------------------------------------
# Settings sources
# --------------------------------------------------------------------------------------------


class _YamlFileSource(PydanticBaseSettingsSource):
    """The parsed config file, with its ``.file`` secrets read."""

    def __init__(self, settings_cls: type[BaseSettings], data: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data
        self.problems: list[tuple[str, str]] = []

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: the whole document is produced by ``__call__``."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        """The document as a nested dict keyed by YAML keys."""
        self.problems = []
        resolved = _resolve_secret_files(
            self._data, self.settings_cls, (), self.problems, "in the config file"
        )
        return dict(resolved)


@dataclass(frozen=True)
class _EnvTarget:
    keys: tuple[str, ...]
    annotation: Any


def _env_target(segments: list[str]) -> _EnvTarget | None:
    """Map the lower-cased ``__``-separated parts of a variable name to a key path."""
    model: type[BaseModel] | None = Settings
    keys: list[str] = []
    index = 0
    while index < len(segments):
        if model is None or not segments[index]:
            return None
        fields = _fields_by_key(model)
        by_segment = {key.replace(".", "_"): key for key in _keys_with_files(model)}
        key = by_segment.get(segments[index])
        if key is None:
            return None
        keys.append(key)
        annotation = fields[key].annotation if key in fields else str
        last = index == len(segments) - 1
        value_model = _dict_model_of(annotation)
        if last:
            return _EnvTarget(tuple(keys), annotation)
        if value_model is not None:
            # The next segment is a table alias, taken literally (already lower case).
            index += 1
            if not segments[index]:
                return None
            keys.append(segments[index])
            if index == len(segments) - 1:
                return _EnvTarget(tuple(keys), value_model)
            model = value_model
        else:
            model = _model_of(annotation)
        index += 1
    return None


class _EnvironmentSource(PydanticBaseSettingsSource):
    """``SNOWSOURCE_*`` variables as a nested dict keyed by YAML keys."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._env = env
        self.problems: list[tuple[str, str]] = []
        self.warnings: list[str] = []

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: every variable is mapped by ``__call__``."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        """Parse, map and nest the variables; unknown ones become warnings."""
        self.problems = []
        self.warnings = []
        found: list[tuple[_EnvTarget, str, str]] = []
        for name, raw in self._env.items():
            upper = name.upper()
            if not upper.startswith(ENV_PREFIX) or upper == CONFIG_ENV:
                continue
            if upper.startswith(_RESERVED_ENV_PREFIX):
                continue
            target = _env_target(name[len(ENV_PREFIX) :].lower().split("__"))
            if target is None:
                self.warnings.append(
                    f"environment variable {name} matches no configuration key and is ignored "
                    "(SNOWSOURCE_ + key path in upper case, __ between levels, _ for '.')"
                )
                continue
            found.append((target, name, raw))
        data: dict[str, Any] = {}
        # Whole sections given as JSON first, so narrower variables refine rather than vanish.
        for target, name, raw in sorted(found, key=lambda item: len(item[0].keys)):
            value = self._parse(target, name, raw)
            node = data
            for key in target.keys[:-1]:
                child = node.get(key)
                if not isinstance(child, dict):
                    child = node[key] = {}
                node = child
            node[target.keys[-1]] = value
        return dict(
            _resolve_secret_files(
                data, self.settings_cls, (), self.problems, "from the environment"
            )
        )

    def _parse(self, target: _EnvTarget, name: str, raw: str) -> Any:
        if not raw.strip() and _admits_none(target.annotation):
            return None
        if _is_complex(target.annotation):
            try:
                return json.loads(raw)
            except ValueError as exc:
                self.problems.append(
                    (
                        ".".join(target.keys),
                        f"{name} must be JSON (lists and mappings come from the environment as "
                        f'JSON, e.g. ["a","b"] or {{"k":"v"}}): {exc}',
                    )
                )
                return None
        return raw


# --------------------------------------------------------------------------------------------
# Reading the file
# --------------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps ``1970-01-01 00:00:00`` a string: ``start.timestamp`` is text."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _duplicate_keys(
    node: yaml.Node | None, path: tuple[str, ...], problems: list[tuple[str, str]]
) -> None:
    # PyYAML keeps the last of two equal keys silently; a duplicated table alias or key is
    # almost always a copy-paste mistake, so it is an error.
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key == "<<":
                continue
            if key in seen:
                line = key_node.start_mark.line + 1
                problems.append(
                    (".".join((*path, key)), f"duplicate key (again on line {line}): keep one")
                )
            seen.add(key)
            _duplicate_keys(value_node, (*path, key), problems)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _duplicate_keys(item, (*path, str(index)), problems)


def _read_yaml(path: Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Parse the file; returns the document and duplicate-key problems."""
    hint = f"pass --config PATH or set {CONFIG_ENV}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([("", f"config file {str(path)!r} not found: {hint}")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([("", f"cannot read config file {str(path)!r}: {reason}")]) from None
    problems: list[tuple[str, str]] = []
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        _duplicate_keys(node, (), problems)
        document = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError([("", f"{path}: YAML syntax error{where}: {what}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"{path}: YAML error: {exc}")]) from None
    finally:
        loader.dispose()
    if document is None:
        return {}, problems
    if not isinstance(document, dict):
        raise ConfigError(
            [("", f"{path}: the top level must be a mapping of keys (name:, snow:, ...)")]
        )
    return document, problems


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def _dotted(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else part
    return out


def _describe(error: Mapping[str, Any], loc: tuple[str | int, ...]) -> str:
    kind = error["type"]
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        if model is None:
            return "unknown key"
        allowed = _keys_with_files(model)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        suggestion = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key: {suggestion}allowed here: {', '.join(allowed)}"
    message = str(error["msg"])
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = "must be a mapping (a YAML section of keys)"
    elif kind == "list_type":
        message = "must be a list (in YAML: [a, b] or one '- item' per line)"
    elif kind == "string_type" and isinstance(error.get("input"), int | float | bool):
        message = "must be a string: quote the value in YAML"
    given = error.get("input")
    if (
        kind not in ("string_type",)
        and isinstance(given, str | int | float | bool)
        and not _is_secret_loc(loc)
    ):
        message += f" (got {given!r})"
    return message


def _validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        loc: tuple[str | int, ...] = tuple(error["loc"])
        if loc and loc[-1] == "[key]":
            # A dict key (a table alias) failed: report it at the alias itself.
            loc = loc[:-1]
        if error["type"] != "extra_forbidden":
            # An unknown key is the user's own spelling (maybe a field name): keep it.
            loc = _aliased_loc(loc)
        if error["type"] == _PROBLEMS_ERROR:
            for sub, message in error["ctx"]["problems"]:
                problems.append((_dotted((*loc, sub)), message))
            continue
        problems.append((_dotted(loc), _describe(error, loc)))
    return problems


def _check_files_exist(settings: Settings) -> list[tuple[str, str]]:
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


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


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


def load_config(path: str | Path | None, env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Read, override, validate and freeze the configuration.

    ``env`` defaults to ``os.environ``. Raises ``ConfigError`` listing every problem found.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    config_path = resolve_config_path(path, environ)
    document, problems = _read_yaml(config_path)
    env_source = _EnvironmentSource(Settings, environ)
    file_source = _YamlFileSource(Settings, document)
    settings: Settings | None = None
    validation: list[tuple[str, str]] = []
    try:
        # Environment first: pydantic-settings gives earlier sources priority.
        settings = Settings(_build_sources=((env_source, file_source), {}))
    except ValidationError as exc:
        validation = _validation_problems(exc)
    problems = [*env_source.problems, *file_source.problems, *problems, *validation]
    if settings is not None and not problems:
        problems = _check_files_exist(settings)
    if problems or settings is None:
        unique = list(dict.fromkeys(problems))
        raise ConfigError(unique or [("", "invalid configuration")])
    return LoadedConfig(settings=settings, warnings=list(env_source.warnings), path=config_path)


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"{parts.username}:{REDACTED}@{netloc}", *parts[2:]))


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return REDACTED
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def redacted_dict(cfg: Settings) -> dict[str, Any]:
    """The effective configuration keyed by YAML keys, secrets as ``***`` (None when unset)."""
    data: dict[str, Any] = _plain(cfg.model_dump(mode="python", by_alias=True))
    http = data["snow"]["http"]
    if http.get("proxy.url"):
        http["proxy.url"] = _redact_url(http["proxy.url"])
    return data
