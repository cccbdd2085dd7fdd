"""``snowsource check``: the Schema Registry lines (SPEC §15.1), when a table registers values.

``schema registry reachable``: the registry answers and accepts the credentials. Then, per table
whose ``value.format`` is ``avro`` or ``json_schema``, ``<alias> schema``: the schema the daemon
would register now (derived from the table's dictionary, read here) tested against the subject
with the registry's compatibility endpoint: "would register as version N", "already registered
as version N", or the registry's reason. Nothing is registered.
"""

from __future__ import annotations

from snowsource.adapters.schema_registry import RegistryClient
from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.cli.check_report import CheckResult, Status
from snowsource.config.models import Settings
from snowsource.config.snow import TableConfig
from snowsource.core.errors import RegistryError, SchemaNotFoundError, ServiceNowError
from snowsource.core.value_schema import (
    ValueFormat,
    carried_columns,
    derive,
    schema_text,
    schema_type,
    subject_name,
)
from snowsource.engine.dictionary_reader import read_columns
from snowsource.engine.wiring import registry_connection, snow_client

REACHABLE = "schema registry reachable"


def _registered(settings: Settings) -> dict[str, TableConfig]:
    return {a: t for a, t in settings.tables.items() if t.value_format.registered}


async def registry_checks(settings: Settings) -> list[CheckResult]:
    """The registry lines; none when no table registers its values."""
    tables = _registered(settings)
    connection = registry_connection(settings)
    if not tables or connection is None:
        return []
    async with RegistryClient(connection) as registry:
        try:
            subjects = await registry.subjects()
        except RegistryError as exc:
            skipped = [
                CheckResult(f"{alias} schema", Status.SKIP, "the registry is not usable")
                for alias in tables
            ]
            return [CheckResult(REACHABLE, Status.FAIL, str(exc)), *skipped]
        out = [CheckResult(REACHABLE, Status.PASS, f"{registry.url}, {subjects} subject(s)")]
        async with snow_client(settings) as client:
            for alias, table in tables.items():
                out.append(await _table(settings, registry, client, alias, table))
    return out


async def _table(
    settings: Settings,
    registry: RegistryClient,
    client: ServiceNowClient,
    alias: str,
    table: TableConfig,
) -> CheckResult:
    name = f"{alias} schema"
    try:
        dictionary = await read_columns(client, table.name)
    except ServiceNowError as exc:
        return CheckResult(name, Status.SKIP, f"the table's dictionary is not readable: {exc}")
    value_format: ValueFormat = "avro" if table.value_format.value == "avro" else "json_schema"
    columns = carried_columns(table.fields, (table.timestamp_field, table.id_field), dictionary)
    schema = derive(table.name, columns, dictionary, all_strings=table.display_value == "true")
    subject = subject_name(
        settings.schema_registry.subject_name_strategy.value, table.topic, schema
    )
    text, kind = schema_text(schema, value_format), schema_type(value_format)
    try:
        try:
            found = await registry.lookup(subject, text, kind)
        except SchemaNotFoundError:
            found = None
        if found is not None:
            return CheckResult(
                name, Status.PASS, f"already registered as version {found.version} of {subject}"
            )
        versions = await registry.versions(subject)
        if not versions:
            return CheckResult(name, Status.PASS, f"would register as version 1 of {subject}")
        if await registry.compatible(subject, text, kind):
            detail = f"would register as version {max(versions) + 1} of {subject}"
            return CheckResult(name, Status.PASS, detail)
    except RegistryError as exc:
        return CheckResult(name, Status.FAIL, str(exc))
    return CheckResult(
        name,
        Status.WARN,
        f"the registry would refuse the table's schema under {subject} (not compatible with "
        f"version {max(versions)} under the subject's rule): the table would keep writing with "
        "that version, putting what does not fit into __unparsed",
    )
