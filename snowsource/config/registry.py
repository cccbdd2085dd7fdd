"""``schema.registry``: the Schema Registry of ``value.format: avro | json_schema`` (SPEC §15.1).

A block of its own (``models.py`` only holds it), with the rules that tie it to the tables that
use it: a registry URL is required as soon as one table's values are registered, and the
credentials its ``auth.type`` needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated

from pydantic import model_validator

from snowsource.config.fields import (
    OptionalPath,
    OptionalStr,
    OptionalUrl,
    PositiveInt,
    Secret,
    ValueFormat,
    case_insensitive,
    problems_error,
    required,
)
from snowsource.config.section import Section


class RegistryAuthType(StrEnum):
    """``schema.registry.auth.type``."""

    NONE = "none"
    BASIC = "basic"
    BEARER = "bearer"


class SubjectNameStrategy(StrEnum):
    """``schema.registry.subject.name.strategy``: Kafka clients' TopicNameStrategy,
    RecordNameStrategy and TopicRecordNameStrategy."""

    TOPIC = "topic"
    RECORD = "record"
    TOPIC_RECORD = "topic_record"


class SchemaRegistryConfig(Section):
    """``schema.registry``: where schemas are registered and how to authenticate."""

    # The Confluent-compatible API's base URL (Apicurio: http://host:port/apis/ccompat/v7).
    url: OptionalUrl = None
    auth_type: Annotated[RegistryAuthType, case_insensitive(RegistryAuthType)] = (
        RegistryAuthType.NONE
    )
    username: OptionalStr = None
    password: Secret | None = None
    token: Secret | None = None
    ca_file: OptionalPath = None
    request_timeout_ms: PositiveInt = 10000
    subject_name_strategy: Annotated[SubjectNameStrategy, case_insensitive(SubjectNameStrategy)] = (
        SubjectNameStrategy.TOPIC
    )
    auto_register: bool = True

    @model_validator(mode="after")
    def _credentials_for_type(self) -> SchemaRegistryConfig:
        missing: list[tuple[str, str]] = []
        if self.auth_type is RegistryAuthType.BASIC:
            if self.username is None:
                missing.append(
                    ("username", required("username", "with auth.type: basic", secret=False))
                )
            if self.password is None:
                missing.append(
                    ("password", required("password", "with auth.type: basic", secret=True))
                )
        elif self.auth_type is RegistryAuthType.BEARER and self.token is None:
            missing.append(("token", required("token", "with auth.type: bearer", secret=True)))
        if missing:
            raise problems_error(missing)
        return self


def registry_problems(
    registry: SchemaRegistryConfig | None, formats: Iterable[tuple[str, ValueFormat]]
) -> list[tuple[str, str]]:
    """``(key, message)`` when a table (``(alias, value.format)``) registers its values and
    ``schema.registry.url`` is not set."""
    users = [alias for alias, value_format in formats if value_format.registered]
    if not users or (registry is not None and registry.url is not None):
        return []
    return [
        (
            "schema.registry.url",
            f"required when a table's value.format is avro or json_schema ({', '.join(users)}): "
            "set it to the registry's Confluent-compatible API, e.g. http://registry:8081",
        )
    ]
