"""The configuration's root: ``Settings``, the top-level keys and the small sections.

Every section is a frozen pydantic model keyed by the YAML keys (``section.py``). The larger
ones live with their concept: ``snow`` and its tables (``snow.py``), ``kafka`` (``kafka.py``),
``schema.registry`` (``registry.py``), ``snow.discover`` (``discover.py``). Values are
validated there and here; the root ``Settings`` names its sources and their order, reading the
file and the environment is ``sources.py``'s business, and turning pydantic's errors into the
user's key paths is ``problems.py``'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Final

from pydantic import (
    BeforeValidator,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from snowsource.config.discover import template_problems, view_problem
from snowsource.config.fields import (
    INHERITED_BY_TABLES,
    BackfillSlices,
    BatchSize,
    BrokerDefaultInt,
    LogFormat,
    LogLevel,
    NonEmptyStr,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ReplicationFactor,
    Secret,
    SensitiveFields,
    SensitiveFieldsKey,
    TasksAssignment,
    TopicName,
    TopicPrefix,
    ValueFormat,
    ValueFormatKey,
    ValueSchema,
    ValueSchemaKey,
    case_insensitive,
    problems_error,
    stringify_configs,
)
from snowsource.config.governance import hash_key_problem
from snowsource.config.kafka import KafkaConfig
from snowsource.config.registry import SchemaRegistryConfig, registry_problems
from snowsource.config.section import Section, yaml_key
from snowsource.config.snow import GlobList, NameList, SnowConfig, TableConfig
from snowsource.config.sources import active_sources
from snowsource.core.db_views import ViewCursor


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
