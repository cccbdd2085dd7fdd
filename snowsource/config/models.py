"""The configuration model: frozen pydantic models keyed by the YAML keys.

Field names are the YAML keys with ``_`` for ``.`` (``tasks_max`` is ``tasks.max``): one alias
generator gives every field its key, and only the keys are accepted as input. Values are
validated here; the root ``Settings`` names its sources and their order, reading the file and
the environment is ``sources.py``'s business, and turning pydantic's errors into the user's key
paths is ``problems.py``'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Annotated, Any, Final

from aiokafka import codec as aiokafka_codec
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from snowsource.config.discover import DiscoverConfig, template_problems, view_problem
from snowsource.config.fields import (
    INHERITED_BY_TABLES,
    TABLE_NAME_RE,
    AuthType,
    BackfillSlices,
    BatchSize,
    BrokerDefaultInt,
    CompressionType,
    CursorField,
    Deletes,
    DisplayValue,
    FieldGlob,
    FieldName,
    InstanceUrl,
    LogFormat,
    LogLevel,
    NonEmptyStr,
    NonNegativeInt,
    OAuthGrantType,
    OptionalPath,
    OptionalProxyUrl,
    OptionalStr,
    OptionalUrl,
    PositiveFloat,
    PositiveInt,
    Query,
    QueryCategory,
    ReplicationFactor,
    SaslMechanism,
    Secret,
    SecurityProtocol,
    SensitiveFields,
    SensitiveFieldsKey,
    StartTimestamp,
    TableAlias,
    TasksAssignment,
    TopicName,
    TopicPrefix,
    ValueFormat,
    ValueFormatKey,
    ValueSchema,
    ValueSchemaKey,
    case_insensitive,
    check_servers,
    deletes_modes,
    display_value_word,
    empty_to_none,
    join_servers,
    problems_error,
    required,
    stringify_configs,
)
from snowsource.config.governance import governance_problems, hash_key_problem
from snowsource.config.registry import SchemaRegistryConfig, registry_problems
from snowsource.config.sources import active_sources
from snowsource.config.streams import table_problems
from snowsource.core.cursor import parse_ts
from snowsource.core.db_views import ViewCursor
from snowsource.core.offsets_codec import instance_from_url
from snowsource.core.query import normalise_query


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


class HttpConfig(Section):
    """``snow.http``: timeouts, concurrency, retry knobs and limits of the ServiceNow client."""

    connect_timeout_ms: PositiveInt = 10000
    request_timeout_ms: PositiveInt = 60000
    max_concurrent_requests: PositiveInt = 8
    # A real instance runs one transaction per session (two since Yokohama, SPEC §14.1): more
    # would only queue on the instance, so the key stops at 2.
    requests_per_session: int = Field(1, ge=1, le=2)
    retry_initial_backoff_ms: PositiveInt = 500
    retry_max_backoff_ms: PositiveInt = Field(30000, validate_default=True)
    # A body larger than this is a retriable error that halves the page size (64 MiB).
    max_response_bytes: PositiveInt = 67108864
    # May carry proxy credentials: kept out of repr, and redacted_dict masks the password.
    proxy_url: OptionalProxyUrl = Field(None, repr=False)
    ca_file: OptionalPath = None
    # An hourly request budget for the process (SPEC §15.3), beside any the instance announces
    # with X-RateLimit-* headers; the smaller wins. None: only the instance's.
    max_requests_per_hour: PositiveInt | None = None
    # The share of either budget left unspent: other clients of the same user, clock skew.
    rate_limit_headroom: float = Field(0.1, ge=0, lt=1)

    @field_validator("retry_max_backoff_ms")
    @classmethod
    def _max_not_below_initial(cls, value: int, info: ValidationInfo) -> int:
        initial = info.data.get("retry_initial_backoff_ms")
        if initial is not None and value < initial:
            raise ValueError(f"must be >= retry.initial.backoff.ms ({initial})")
        return value


_SECRET_AUTH_KEYS: Final = frozenset({"password", "oauth.client.secret", "api.key"})


class AuthConfig(Section):
    """``snow.auth``: how snowsource authenticates to ServiceNow."""

    type: Annotated[AuthType, case_insensitive(AuthType)] = AuthType.BASIC
    username: OptionalStr = None
    password: Secret | None = None
    oauth_grant_type: Annotated[OAuthGrantType, case_insensitive(OAuthGrantType)] = (
        OAuthGrantType.CLIENT_CREDENTIALS
    )
    oauth_client_id: OptionalStr = None
    oauth_client_secret: Secret | None = None
    oauth_token_url: OptionalUrl = None
    api_key: Secret | None = None

    @model_validator(mode="after")
    def _credentials_for_type(self) -> AuthConfig:
        missing: list[tuple[str, str]] = []

        def need(key: str, value: object, why: str) -> None:
            if value is None:
                missing.append((key, required(key, why, secret=key in _SECRET_AUTH_KEYS)))

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
            raise problems_error(missing)
        return self


def _none_to_list(value: Any) -> Any:
    return [] if value is None else value


NameList = Annotated[list[FieldName], BeforeValidator(_none_to_list)]
GlobList = Annotated[list[FieldGlob], BeforeValidator(_none_to_list)]


class TableConfig(Section):
    """One entry of ``snow.tables`` with every per-table value resolved.

    ``topic`` defaults to ``{topic.prefix}{alias}``; the keys in ``INHERITED_BY_TABLES`` fall
    back to the top-level keys of the same name when the table does not set them — consumers
    read them here only.
    """

    name: NonEmptyStr
    topic: TopicName
    query: Query = ""
    query_domain: bool = True
    query_category: QueryCategory = None
    timestamp_field: CursorField = "sys_updated_on"
    # validate_default: the default sys_id must still differ from a custom timestamp.field.
    id_field: CursorField = Field("sys_id", validate_default=True)
    fields: Annotated[list[FieldName], BeforeValidator(lambda v: [] if v is None else v)] = Field(
        default_factory=list
    )
    display_value: Annotated[DisplayValue, BeforeValidator(display_value_word)] = "false"
    exclude_reference_link: bool = True
    start_timestamp: StartTimestamp = "1970-01-01 00:00:00"
    deletes: Annotated[Deletes, BeforeValidator(deletes_modes)] = Deletes.NONE
    reconcile_interval_seconds: PositiveInt = 86400
    journal: bool = False
    # None: ``<topic>.journal`` (journal_output_topic).
    journal_topic: TopicName | None = None
    batch_size: BatchSize = 1000
    poll_interval_ms: PositiveInt = 5000
    overlap_seconds: NonNegativeInt = 10
    safety_lag_seconds: NonNegativeInt = 2
    value_format: ValueFormatKey = ValueFormat.STRING
    value_schema: ValueSchemaKey = ValueSchema.NONE
    backfill_slices: BackfillSlices = 4
    backfill_max_ahead_rows: PositiveInt = 50000
    # Field governance (SPEC §15.2; rules in config/governance.py, decisions in core/governance).
    fields_exclude: GlobList = Field(default_factory=list)
    fields_hash: NameList = Field(default_factory=list)
    fields_mask: NameList = Field(default_factory=list)
    sensitive_fields: SensitiveFieldsKey = SensitiveFields.EXCLUDE
    # The key of this table under snow.tables: not a YAML key, filled in by SnowConfig.
    alias: str = Field("", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _alias_is_not_a_key(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "alias" in data:
            raise problems_error(
                [("alias", "unknown key: a table's alias is its key under snow.tables")]
            )
        return data

    @field_validator("name")
    @classmethod
    def _table_name(cls, value: str) -> str:
        if not TABLE_NAME_RE.match(value):
            raise ValueError("a table or view name may only contain A-Z a-z 0-9 _")
        return value

    @field_validator("id_field")
    @classmethod
    def _cursor_fields_differ(cls, value: str, info: ValidationInfo) -> str:
        if value == info.data.get("timestamp_field"):
            raise ValueError("must differ from timestamp.field (the cursor needs two fields)")
        return value

    @model_validator(mode="after")
    def _table_is_consistent(self) -> TableConfig:
        # Derived streams, typed values and slices: the rules live in config/streams.py.
        found = [*table_problems(self), *governance_problems(self)]
        if found:
            raise problems_error(found)
        return self

    @property
    def journal_output_topic(self) -> str:
        """Where the journal stream writes: ``journal.topic``, by default ``<topic>.journal``."""
        return self.journal_topic or f"{self.topic}.journal"

    @property
    def start_datetime(self) -> datetime:
        """``start.timestamp`` as an aware UTC datetime."""
        return parse_ts(self.start_timestamp)


class SnowConfig(Section):
    """``snow``: the instance, its credentials, HTTP client settings and the tables to stream."""

    url: InstanceUrl
    auth: AuthConfig = Field(default_factory=AuthConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    # Before ``tables``: with discovery, no explicit table is needed.
    discover: DiscoverConfig | None = None
    tables: dict[TableAlias, TableConfig] = Field(default_factory=dict, validate_default=True)

    @field_validator("tables")
    @classmethod
    def _tables(
        cls, tables: dict[str, TableConfig], info: ValidationInfo
    ) -> dict[str, TableConfig]:
        url = info.data.get("url")
        instance = instance_from_url(url) if isinstance(url, str) else ""
        seen: dict[tuple[str, str, str, str, bool], str] = {}
        clashes: list[tuple[str, str]] = []
        for alias, table in tables.items():
            # The fields of the source partition: equal tuples share one offset.
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
            raise problems_error(clashes)
        return {alias: table.model_copy(update={"alias": alias}) for alias, table in tables.items()}

    @model_validator(mode="after")
    def _tables_or_discovery(self) -> SnowConfig:
        # After the fields: an invalid snow.discover is reported alone, not as "no tables".
        if not self.tables and self.discover is None:
            raise problems_error(
                [
                    (
                        "tables",
                        "at least one table is required (alias: {name: <table>}), or snow.discover",
                    )
                ]
            )
        return self

    @property
    def instance(self) -> str:
        """The ``instance`` of every source partition: ``host`` or ``host:port``."""
        return instance_from_url(self.url)

    @property
    def token_url(self) -> str:
        """The OAuth token endpoint: ``oauth.token.url``, default ``{url}/oauth_token.do``."""
        return self.auth.oauth_token_url or f"{self.url}/oauth_token.do"


class Backoff(Section):
    """One retry policy's knobs: full-jitter backoff from the initial delay, doubling up to the
    maximum (milliseconds)."""

    initial_backoff_ms: PositiveInt = 500
    max_backoff_ms: PositiveInt = Field(30000, validate_default=True)

    @field_validator("max_backoff_ms")
    @classmethod
    def _max_not_below_initial(cls, value: int, info: ValidationInfo) -> int:
        initial = info.data.get("initial_backoff_ms")
        if initial is not None and value < initial:
            raise ValueError(f"must be >= initial.backoff.ms ({initial})")
        return value


class KafkaRetryConfig(Section):
    """``kafka.retry``: how retriable Kafka errors are retried, one policy per kind of work."""

    offsets: Backoff = Field(default_factory=Backoff)  # offset writes to the offsets topic
    transactions: Backoff = Field(default_factory=Backoff)  # exactly.once transactions
    tail: Backoff = Field(default_factory=Backoff)  # reading output topics back at a restart


class KafkaConfig(Section):
    """``kafka``: the producer and admin client connection."""

    bootstrap_servers: Annotated[
        str, BeforeValidator(join_servers), AfterValidator(check_servers)
    ] = "localhost:9092"
    security_protocol: Annotated[SecurityProtocol, case_insensitive(SecurityProtocol)] = (
        SecurityProtocol.PLAINTEXT
    )
    sasl_mechanism: Annotated[
        SaslMechanism | None,
        BeforeValidator(empty_to_none),
        case_insensitive(SaslMechanism),
    ] = None
    sasl_username: OptionalStr = None
    sasl_password: Secret | None = None
    ssl_cafile: OptionalPath = None
    ssl_certfile: OptionalPath = None
    ssl_keyfile: OptionalPath = None
    compression_type: Annotated[
        CompressionType,
        BeforeValidator(lambda v: "none" if v is None else v),
        case_insensitive(CompressionType),
    ] = CompressionType.NONE
    linger_ms: NonNegativeInt = 5
    max_request_size: PositiveInt = 1048576
    startup_timeout_seconds: PositiveFloat = 60.0
    retry: KafkaRetryConfig = Field(default_factory=KafkaRetryConfig)

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
            raise problems_error(
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
            (key, required(key, why, secret=key == "sasl.password"))
            for key, value in (
                ("sasl.mechanism", self.sasl_mechanism),
                ("sasl.username", self.sasl_username),
                ("sasl.password", self.sasl_password),
            )
            if value is None
        ]
        if missing:
            raise problems_error(missing)
        return self


class RestConfig(Section):
    """``rest``: the Kafka Connect compatible REST API."""

    enabled: bool = True
    host: NonEmptyStr = "127.0.0.1"
    # 0 asks the OS for a free port (tests); anything else is the listening port.
    port: Annotated[int, Field(ge=0, le=65535)] = 8083
    auth_token: Secret | None = None
    # The operator console (GET /console) is static and reads through the API's own calls, so
    # it adds nothing an API client could not already do; off only hides the page.
    console: bool = True


class LogConfig(Section):
    """``log``: output format and level."""

    format: Annotated[LogFormat, case_insensitive(LogFormat)] = LogFormat.AUTO
    level: Annotated[LogLevel, case_insensitive(LogLevel, {"warn": "WARNING"})] = LogLevel.INFO


class GovernanceConfig(Section):
    """``governance``: what field governance shares between tables (SPEC §15.2)."""

    # HMAC-SHA256 key of every fields.hash; required when a table hashes a column.
    hash_key: Secret | None = None


_DEFAULT_TOPIC_PREFIX: Final = "servicenow."


class Settings(BaseSettings):
    """The whole validated, frozen configuration (the root of the YAML file).

    A pydantic-settings model whose sources are the project's own (``sources.py``), active only
    inside ``load_config``. Built directly, it validates only its keyword arguments (YAML keys).
    """

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=yaml_key,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        hide_input_in_errors=True,
        # BaseSettings validates defaults; the sections do not, and the root keeps their rule
        # (a default is trusted, so it never produces a problem the user did not write).
        validate_default=False,
    )

    name: NonEmptyStr = "servicenow-source"
    tasks_max: PositiveInt = 1
    task_id: NonNegativeInt = 0
    tasks_assignment: Annotated[TasksAssignment, case_insensitive(TasksAssignment)] = (
        TasksAssignment.STATIC
    )
    group_session_timeout_ms: PositiveInt = 10000
    exactly_once: bool = False
    snow: SnowConfig
    batch_size: BatchSize = 1000
    poll_interval_ms: PositiveInt = 5000
    overlap_seconds: NonNegativeInt = 10
    safety_lag_seconds: NonNegativeInt = 2
    value_format: ValueFormatKey = ValueFormat.STRING
    value_schema: ValueSchemaKey = ValueSchema.NONE
    backfill_slices: BackfillSlices = 4
    backfill_max_ahead_rows: PositiveInt = 50000
    fields_exclude: GlobList = Field(default_factory=list)
    fields_hash: NameList = Field(default_factory=list)
    fields_mask: NameList = Field(default_factory=list)
    sensitive_fields: SensitiveFieldsKey = SensitiveFields.EXCLUDE
    governance: GovernanceConfig = Field(default_factory=GovernanceConfig)
    dedup_max_entries: PositiveInt = 200000
    # Tables in the backfill phase at once; the others wait QUEUED (SPEC §15.2).
    backfill_max_tables: PositiveInt = 4
    shutdown_timeout_seconds: PositiveFloat = 30.0
    health_unready_after_seconds: PositiveFloat = 300.0
    topic_prefix: TopicPrefix = _DEFAULT_TOPIC_PREFIX
    topic_creation_enable: bool = True
    topic_creation_partitions: BrokerDefaultInt = -1
    topic_creation_replication_factor: ReplicationFactor = -1
    topic_creation_configs: Annotated[dict[str, str], BeforeValidator(stringify_configs)] = Field(
        default_factory=dict
    )
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    offset_storage_topic: TopicName = "snowsource-offsets"
    offset_storage_partitions: PositiveInt = 25
    offset_storage_replication_factor: ReplicationFactor = -1
    rest: RestConfig = Field(default_factory=RestConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    schema_registry: SchemaRegistryConfig = Field(default_factory=SchemaRegistryConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Highest priority first: keyword arguments, ``.file`` secrets, environment, file.

        pydantic-settings' own environment, dotenv and secrets-directory sources are never
        used: they would read unprefixed names such as ``NAME`` or ``LOG`` from the process.
        """
        active = active_sources()
        if active is None:
            return (init_settings,)
        return (init_settings, active.secret_files, active.environment, active.config_file)

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
        for key in INHERITED_BY_TABLES:
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
                    k: v for k, v in raw.items() if v is not None or k not in INHERITED_BY_TABLES
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

    @model_validator(mode="after")
    def _static_keys_only_with_static(self) -> Settings:
        if self.tasks_assignment is not TasksAssignment.GROUP:
            return self
        clashes = [
            (
                yaml_key(name),
                "must not be set with tasks.assignment: group (the consumer group spreads the "
                "tables over the running processes): remove it, or use tasks.assignment: static",
            )
            for name in ("tasks_max", "task_id")
            if name in self.model_fields_set
        ]
        if clashes:
            raise problems_error(clashes)
        return self

    def _with_template(self) -> list[tuple[str, TableConfig]]:
        """Every table by alias, and the discovered tables' template (a stand-in name) as
        ``snow.discover.template`` unless ``_template_is_a_table`` refuses it."""
        found = list(self.snow.tables.items())
        if self.snow.discover is None:
            return found
        with contextlib.suppress(ValidationError):
            found.append(("snow.discover.template", self.discovered_table("table")))
        return found

    @model_validator(mode="after")
    def _hash_key_when_hashing(self) -> Settings:
        if self.governance.hash_key is not None:
            return self
        problem = hash_key_problem([a for a, t in self._with_template() if t.fields_hash])
        if problem is not None:
            raise problems_error([(f"governance.{problem[0]}", problem[1])])
        return self

    @model_validator(mode="after")
    def _registry_when_used(self) -> Settings:
        found = registry_problems(
            self.schema_registry, ((a, t.value_format) for a, t in self._with_template())
        )
        if found:
            raise problems_error(found)
        return self

    @model_validator(mode="after")
    def _template_is_a_table(self) -> Settings:
        # The template must make a valid table of any name (SPEC §15.2): check it once here,
        # with a stand-in name, so a bad key exits 2 at start, not when a table is discovered.
        if self.snow.discover is None:
            return self
        try:
            self.discovered_table("table")
        except ValidationError as error:
            raise problems_error(template_problems(error.errors())) from None
        return self

    def discovered_table(self, name: str, view: ViewCursor | None = None) -> TableConfig:
        """A discovered table's settings: the template over the inherited top-level defaults,
        its alias its name and its topic ``{topic.prefix}{name}``; a database view's cursor
        fields are ``view``'s (its base table's, prefixed: SPEC §15.2)."""
        discover = self.snow.discover
        template = discover.template if discover is not None else {}
        data: dict[str, Any] = {
            key: getattr(self, key.replace(".", "_")) for key in INHERITED_BY_TABLES
        }
        data.update(template)
        data.update(name=name, topic=f"{self.topic_prefix}{name}")
        if view is not None:
            data.update({"timestamp.field": view.timestamp_field, "id.field": view.id_field})
        return TableConfig.model_validate(data).model_copy(update={"alias": name})

    def discovered_view_problem(self, name: str, view: ViewCursor) -> str | None:
        """Why the template cannot read the database view ``name`` by ``view``'s cursor fields
        (``deletes``, ``journal`` or governance of a prefixed cursor field), or None."""
        try:
            self.discovered_table(name, view)
        except ValidationError as error:
            return view_problem(name, view, error.errors())
        return None

    @property
    def tables(self) -> dict[str, TableConfig]:
        """``snow.tables``: alias -> table, in file order (tables only in the environment last)."""
        return self.snow.tables


@cache
def _root_adapters() -> dict[str, TypeAdapter[Any]]:
    # The same types as the Settings fields of these keys.
    return {
        "batch.size": TypeAdapter(BatchSize),
        "poll.interval.ms": TypeAdapter(PositiveInt),
        "overlap.seconds": TypeAdapter(NonNegativeInt),
        "safety.lag.seconds": TypeAdapter(NonNegativeInt),
        "value.format": TypeAdapter(ValueFormatKey),
        "value.schema": TypeAdapter(ValueSchemaKey),
        "backfill.slices": TypeAdapter(BackfillSlices),
        "backfill.max.ahead.rows": TypeAdapter(PositiveInt),
        "topic.prefix": TypeAdapter(TopicPrefix),
        "fields.exclude": TypeAdapter(GlobList),
        "fields.hash": TypeAdapter(NameList),
        "fields.mask": TypeAdapter(NameList),
        "sensitive.fields": TypeAdapter(SensitiveFieldsKey),
    }


def _valid_root_value(key: str, value: Any) -> bool:
    try:
        _root_adapters()[key].validate_python(value)
    except ValidationError:
        return False
    return True
