"""Schema versions of the tables written in a registered format (SPEC §15.1).

:class:`SchemaRegistrar` is the process's one door to the registry: it registers (or, with
``auto.register: false``, looks up) each schema version once and caches the writer by content
(subject and schema text), so a version costs a request or two, never one per record, and a new
generation of a table does not ask again. :class:`TableSchemas` is one table's side: the
columns its records carried so far (it only grows, so the daemon's own changes only add
optional fields), the schema derived from them, and the slot its shaper reads.

What the registry answers decides what the table does:

- unreachable, timeout, 5xx: the table waits with backoff (the page is not shaped, nothing is
  produced, the offset does not move) and retries until the registry answers or stop;
- 409/422: the version is refused; the table keeps writing with the last accepted schema (its
  own last one, else the subject's latest version), WARNs once per refused version with the
  registry's message and counts it;
- 401/403: the table FAILs with the registry's message;
- ``auto.register: false`` and the schema not under the subject: the table FAILs naming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Mapping

import structlog

from snowsource.core.errors import (
    RegistryAuthError,
    RegistryUnavailableError,
    SchemaNotFoundError,
    SchemaRefusedError,
    TableFailedError,
)
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.value_encoding import SchemaWriter, WriterSlot
from snowsource.core.value_schema import (
    RecordSchema,
    Registered,
    UnsupportedSchemaError,
    ValueFormat,
    carried_columns,
    derive,
    from_registered,
    schema_text,
    schema_type,
    subject_name,
)
from snowsource.engine.ports import SchemaRegistry
from snowsource.observability import metrics
from snowsource.runtime.retrying import Attempt, retrying

log = structlog.get_logger("snowsource.engine.schemas")


class SchemaRegistrar:
    """Registers schema versions for every table of the process, each once."""

    def __init__(
        self, client: SchemaRegistry, *, strategy: str, auto_register: bool, retry: RetryPolicy
    ) -> None:
        self.client = client
        self.strategy = strategy
        self.auto_register = auto_register
        self._retry = retry
        self._writers: dict[tuple[str, str], SchemaWriter] = {}
        self._lock = asyncio.Lock()

    async def writer(
        self,
        spec: TableSpec,
        schema: RecordSchema,
        value_format: ValueFormat,
        *,
        accepted: SchemaWriter | None,
        stop: asyncio.Event,
    ) -> SchemaWriter:
        """The writer of ``schema`` registered under the table's subject; when the registry
        refuses it, the last ``accepted`` writer (else one of the subject's latest version)."""
        subject = subject_name(self.strategy, spec.topic, schema)
        text = schema_text(schema, value_format)
        key = (subject, text)
        async with self._lock:  # one table at a time: a version is never asked for twice
            cached = self._writers.get(key)
            if cached is not None:
                return cached
            try:
                registered = await self._ask(spec, subject, text, value_format, stop)
            except SchemaRefusedError as refused:
                metrics.SCHEMAS_REFUSED.labels(table=spec.alias).inc()
                log.warning(
                    "the Schema Registry refused the table's new schema version; writing with "
                    "the last accepted one (values that do not fit go to __unparsed)",
                    table=spec.alias,
                    subject=subject,
                    error=str(refused),
                )
                writer = accepted or await self._latest(spec, subject, value_format, stop)
            else:
                writer = SchemaWriter(schema, registered.id, value_format)
                metrics.SCHEMA_VERSIONS.labels(table=spec.alias).inc()
                log.info(
                    "schema registered",
                    table=spec.alias,
                    subject=subject,
                    schema_id=registered.id,
                    version=registered.version,
                    fields=len(schema.fields),
                )
            self._writers[key] = writer
            return writer

    async def _ask(
        self,
        spec: TableSpec,
        subject: str,
        text: str,
        value_format: ValueFormat,
        stop: asyncio.Event,
    ) -> Registered:
        kind = schema_type(value_format)
        try:
            async for attempt in self._attempts(spec, stop):
                with attempt:
                    if self.auto_register:
                        return await self.client.register(subject, text, kind)
                    return await self.client.lookup(subject, text, kind)
        except RegistryAuthError as exc:
            raise TableFailedError(str(exc)) from None
        except SchemaNotFoundError as exc:
            raise TableFailedError(
                f"the table's schema is not registered under subject {subject!r} and "
                f"schema.registry.auto.register is false: register it, or set auto.register: "
                f"true ({exc})"
            ) from None
        raise AssertionError("retrying ends with an attempt that returned")  # pragma: no cover

    async def _latest(
        self, spec: TableSpec, subject: str, value_format: ValueFormat, stop: asyncio.Event
    ) -> SchemaWriter:
        try:
            async for attempt in self._attempts(spec, stop):
                with attempt:
                    latest = await self.client.latest(subject)
        except (RegistryAuthError, SchemaNotFoundError) as exc:
            raise TableFailedError(str(exc)) from None
        try:
            schema = from_registered(spec.name, latest.schema, value_format)
        except UnsupportedSchemaError as exc:
            raise TableFailedError(
                f"the Schema Registry refused the table's schema and the latest version under "
                f"subject {subject!r} (id {latest.id}) is not one snowsource can write: {exc}"
            ) from None
        return SchemaWriter(schema, latest.id, value_format)

    def _attempts(self, spec: TableSpec, stop: asyncio.Event) -> retrying:
        def retrying_log(attempt: Attempt, delay: float) -> None:
            metrics.RETRIES.labels(table=spec.alias).inc()
            log.warning(
                "the Schema Registry cannot be reached; the table waits (nothing is produced "
                "and its offset does not move until its schema is registered)",
                table=spec.alias,
                error=str(attempt.error),
                attempt=attempt.number + 1,
                retry_in=round(delay, 2),
            )

        return retrying(
            self._retry,
            stop,
            retry_if=lambda exc: isinstance(exc, RegistryUnavailableError),
            on_retry=retrying_log,
        )


class TableSchemas:
    """One table's schema: grows with the columns its records carry; registered before use.

    ``as_string`` names columns forced to strings (hashed or masked fields); ``fixed``: the
    columns of a stream whose schema never changes (the journal stream); ``value_format``:
    the table's, for a derived stream whose own spec says ``string``.
    """

    def __init__(
        self,
        spec: TableSpec,
        registrar: SchemaRegistrar,
        *,
        stop: asyncio.Event,
        as_string: Collection[str] = (),
        fixed: Collection[str] | None = None,
        value_format: str | None = None,
    ) -> None:
        self.spec = spec
        self.slot = WriterSlot()
        self._registrar = registrar
        self._stop = stop
        self._as_string = frozenset(as_string)
        self._fixed = frozenset(fixed) if fixed is not None else None
        self._columns: set[str] = set(self._fixed or ())
        self._schema: RecordSchema | None = None
        wanted = value_format or spec.value_format
        self._value_format: ValueFormat = "avro" if wanted == "avro" else "json_schema"

    def initial_columns(self, dictionary: Mapping[str, str]) -> set[str]:
        """The columns the table's records carry: its ``fields`` projection, else every column
        of the dictionary; the cursor fields and ``sys_mod_count`` always."""
        spec = self.spec
        return carried_columns(spec.fields, (spec.timestamp_field, spec.id_field), dictionary)

    async def ensure(self, columns: Iterable[str], types: Mapping[str, str]) -> None:
        """Have a registered writer for records carrying ``columns`` (and every column seen
        before) in the slot. ``types``: the dictionary (column -> internal type)."""
        if self._fixed is None:
            self._columns.update(columns)
        schema = derive(
            self.spec.name,
            self._columns,
            types,
            as_string=self._as_string,
            all_strings=self.spec.display_value == "true",
        )
        if schema == self._schema and self.slot.writer is not None:
            return
        self.slot.writer = await self._registrar.writer(
            self.spec, schema, self._value_format, accepted=self.slot.writer, stop=self._stop
        )
        self._schema = schema
