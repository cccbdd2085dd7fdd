"""``kafka``: the producer's and admin client's connection, and how Kafka errors are retried."""

from __future__ import annotations

from typing import Annotated

from aiokafka import codec as aiokafka_codec
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from snowsource.config.fields import (
    CompressionType,
    NonNegativeInt,
    OptionalPath,
    OptionalStr,
    PositiveFloat,
    PositiveInt,
    SaslMechanism,
    Secret,
    SecurityProtocol,
    case_insensitive,
    check_servers,
    empty_to_none,
    join_servers,
    problems_error,
    required,
)
from snowsource.config.section import Section

__all__ = ["Backoff", "KafkaConfig", "KafkaRetryConfig"]


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
