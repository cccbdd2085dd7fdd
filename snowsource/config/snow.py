"""``snow``: the instance, its credentials, its HTTP client and the tables to stream.

Each table's keys are resolved here (``TableConfig``); the rules that tie a table's keys to one
another live with their concept (``streams.py``, ``governance.py``), and the tables' clashes
(two aliases on one source partition) are checked where every table is known (``SnowConfig``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from snowsource.config.discover import DiscoverConfig
from snowsource.config.fields import (
    TABLE_NAME_RE,
    AuthType,
    BackfillSlices,
    BatchSize,
    CursorField,
    Deletes,
    DisplayValue,
    FieldGlob,
    FieldName,
    InstanceUrl,
    NonEmptyStr,
    NonNegativeInt,
    OAuthGrantType,
    OptionalPath,
    OptionalProxyUrl,
    OptionalStr,
    OptionalUrl,
    PositiveInt,
    Query,
    QueryCategory,
    Secret,
    SensitiveFields,
    SensitiveFieldsKey,
    StartTimestamp,
    TableAlias,
    TopicName,
    ValueFormat,
    ValueFormatKey,
    ValueSchema,
    ValueSchemaKey,
    case_insensitive,
    deletes_modes,
    display_value_word,
    problems_error,
    required,
)
from snowsource.config.governance import governance_problems
from snowsource.config.section import Section
from snowsource.config.streams import table_problems
from snowsource.core.cursor import parse_ts
from snowsource.core.offsets_codec import instance_from_url
from snowsource.core.query import normalise_query

__all__ = ["AuthConfig", "GlobList", "HttpConfig", "NameList", "SnowConfig", "TableConfig"]


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
