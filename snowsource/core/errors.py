"""Every error snowsource raises, classified by what the caller should do next.

    SnowsourceError
    ├── ConfigError              fix the configuration; exit 2 before anything is contacted
    ├── OffsetError              unusable stored/submitted offset: FAIL the table, say how to reset
    ├── ServiceNowError          anything the Table API answered or failed to answer
    │   ├── RetriableError       full-jitter backoff, retry (5xx, 408, timeouts, bad bodies)
    │   │   ├── RateLimitedError 429: wait ``retry_after`` when given, else back off
    │   │   └── ExecutionTimeExceededError  500 "maximum execution time": halve the page
    │   │       └── ResponseTooLargeError   body over snow.http.max.response.bytes: same
    │   ├── AuthError            401 after one token refresh: FAIL the table (credentials are wrong)
    │   └── TableError           403 / 400 / 404 or an impossible answer: FAIL that table
    ├── TableFailedError         a table must stop with a diagnostic (rows out of order, bad row)
    ├── KafkaSinkError           Kafka refused a record for good (too large, not authorised)
    ├── ConnectorImportError     `config import` got a file that is no known connector config
    ├── RegistryError            the Schema Registry answered or failed to answer (SPEC §15.1)
    │   ├── RegistryUnavailableError  unreachable, timeout, 5xx: the table waits, backs off
    │   ├── SchemaRefusedError   409 incompatible / 422 invalid: write with the last accepted
    │   ├── RegistryAuthError    401 / 403: FAIL the table with the registry's message
    │   └── SchemaNotFoundError  404 on a look-up (auto.register: false): FAIL naming the subject
    └── FencedError              a newer process with the same task.id took over; exit 1

Kafka's own transient errors are not wrapped: aiokafka's ``KafkaError.retriable`` decides, and
each Kafka port tells the engine so (``engine.ports.KafkaErrors``, ``adapters.kafka.is_retriable``).
"""

from __future__ import annotations


class SnowsourceError(Exception):
    """Base of every error raised on purpose by snowsource."""


class ConfigError(SnowsourceError):
    """The configuration is invalid. ``problems`` lists ``(key path, message)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = [f"{path}: {msg}" if path else msg for path, msg in problems]
        super().__init__("invalid configuration:\n  " + "\n  ".join(lines))


class OffsetError(SnowsourceError):
    """A stored or submitted offset cannot be used for its source partition."""


class ServiceNowError(SnowsourceError):
    """The ServiceNow Table API answered with an error, or not at all."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RetriableError(ServiceNowError):
    """Transient: retry with backoff (5xx, 408, 425, timeouts, connection errors, bad bodies)."""


class RateLimitedError(RetriableError):
    """429: wait ``retry_after`` seconds when the instance said so, else back off."""

    def __init__(self, message: str, *, retry_after: float | None, status: int = 429) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class ExecutionTimeExceededError(RetriableError):
    """500 "maximum execution time exceeded": the page was too expensive, ask for fewer rows."""


class ResponseTooLargeError(ExecutionTimeExceededError):
    """The page's body passed ``snow.http.max.response.bytes``: ask for fewer rows, exactly as
    for a cancelled transaction (the message says to lower ``batch.size``)."""


class AuthError(ServiceNowError):
    """Credentials were refused (401 after one refresh, or the token endpoint said no)."""


class TableError(ServiceNowError):
    """The table cannot be read as configured (403, 400, 404): fail the table with a diagnostic."""


class TableFailedError(SnowsourceError):
    """A table must stop: its data or state contradicts the contract (not retried)."""


class KafkaSinkError(SnowsourceError):
    """Kafka refused a record in a way retrying cannot cure."""


class ConnectorImportError(SnowsourceError):
    """A file given to ``config import`` is not a connector config of a known dialect."""


class FencedError(SnowsourceError):
    """A newer process with the same task.id is running; this one must exit 1."""


class RegistryError(SnowsourceError):
    """The Schema Registry refused a request or could not be asked. ``status`` is the HTTP
    status (None: no answer); the message is the registry's own."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RegistryUnavailableError(RegistryError):
    """Unreachable, timed out, or a 5xx: retry with backoff; nothing unregistered is produced."""


class SchemaRefusedError(RegistryError):
    """409 (incompatible with the subject) or 422 (invalid schema)."""


class RegistryAuthError(RegistryError):
    """401 or 403: the credentials are wrong or lack a permission."""


class SchemaNotFoundError(RegistryError):
    """404: the subject, or this schema under it, is not registered."""
