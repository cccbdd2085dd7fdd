"""Which streams a configuration has and which task owns each: from ``snow.tables`` to the
``TableSpec`` of every stream (a table, its delete, journal and key-sweep streams), resolved
once, so the daemon, REST, ``check`` and the offsets script all see a table the same way."""

from __future__ import annotations

from typing import Any

from snowsource.config.fields import TasksAssignment
from snowsource.config.governance import table_governance
from snowsource.config.models import Settings
from snowsource.config.snow import TableConfig
from snowsource.core.assignment import assign
from snowsource.core.deletes import delete_stream_spec
from snowsource.core.journal import journal_stream_spec
from snowsource.core.offsets_codec import legacy_partition_for, partition_for
from snowsource.core.query import normalise_query
from snowsource.core.reconcile import reconcile_spec
from snowsource.core.table import TableSpec


def table_spec(settings: Settings, alias: str, table: TableConfig) -> TableSpec:
    """Resolve one table's configuration into what its poller needs."""
    hash_key = settings.governance.hash_key
    common: dict[str, Any] = {
        "snow_url": settings.snow.url,
        "table": table.name,
        "query": table.query,
        "query_domain": table.query_domain,
        "timestamp_field": table.timestamp_field,
    }
    return TableSpec(
        alias=alias,
        name=table.name,
        topic=table.topic,
        normalised_query=normalise_query(table.query),
        query_domain=table.query_domain,
        query_category=table.query_category,
        timestamp_field=table.timestamp_field,
        id_field=table.id_field,
        fields=tuple(table.fields),
        display_value=str(table.display_value),
        exclude_reference_link=table.exclude_reference_link,
        start_timestamp=table.start_timestamp,
        batch_size=table.batch_size,
        poll_interval=table.poll_interval_ms / 1000,
        overlap_seconds=table.overlap_seconds,
        safety_lag_seconds=table.safety_lag_seconds,
        dedup_max_entries=settings.dedup_max_entries,
        partition=partition_for(**common),
        legacy_partition=legacy_partition_for(**common),
        value_format=str(table.value_format),
        value_schema=str(table.value_schema),
        deletes=table.deletes.audit,
        reconcile=table.deletes.reconcile,
        reconcile_interval_seconds=float(table.reconcile_interval_seconds),
        journal=table.journal,
        backfill_slices=table.backfill_slices,
        backfill_max_ahead_rows=table.backfill_max_ahead_rows,
        governance=table_governance(table, hash_key.get_secret_value() if hash_key else None),
    )


def stream_specs(settings: Settings, alias: str, table: TableConfig) -> list[TableSpec]:
    """The table's spec, followed by those of its derived streams: the delete stream
    (``deletes: audit``), the key sweep (``deletes: reconcile``) and the journal stream."""
    spec = table_spec(settings, alias, table)
    url = settings.snow.url
    specs = [spec]
    if spec.deletes:
        specs.append(delete_stream_spec(spec, snow_url=url))
    if spec.reconcile:
        specs.append(reconcile_spec(spec, snow_url=url))
    if spec.journal:
        specs.append(journal_stream_spec(spec, snow_url=url, topic=table.journal_output_topic))
    return specs


def owned_specs(settings: Settings) -> list[TableSpec]:
    """Specs of the streams of the tables this process's ``task.id`` owns (SPEC §10): a
    table's delete stream always runs beside the table, in the same task. With
    ``tasks.assignment: group`` every configured table: the group picks, at run time, which of
    them this process polls."""
    if settings.tasks_assignment == TasksAssignment.GROUP:
        return connector_specs(settings)
    owners = table_owners(settings)
    return [spec for spec in connector_specs(settings) if owners[spec.alias] == settings.task_id]


def table_owners(settings: Settings) -> dict[str, int]:
    """The task that owns each stream with ``tasks.assignment: static`` (SPEC §10), by alias:
    every configured table, and beside each its delete stream (``<alias>.deletes``), which
    always runs in its table's task. The one place that says who owns what."""
    owners = assign(list(settings.tables), settings.tasks_max)
    return {
        spec.alias: owners[alias]
        for alias, table in settings.tables.items()
        for spec in stream_specs(settings, alias, table)
    }


def connector_specs(settings: Settings) -> list[TableSpec]:
    """Specs of every stream of the connector, whatever task owns it."""
    return [
        spec
        for alias, table in settings.tables.items()
        for spec in stream_specs(settings, alias, table)
    ]
