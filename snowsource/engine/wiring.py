"""From configuration to the objects the engine runs: Kafka connection, ServiceNow credentials,
table specs and which tables this task owns. Shared by the daemon, REST, ``check`` and the
offsets script, so they all see a table the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.servicenow import ApiKeyAuth, Auth, BasicAuth, OAuth2Auth, ServiceNowClient
from snowsource.config.settings import AuthType, Settings, TableConfig, TasksAssignment
from snowsource.core.assignment import assign
from snowsource.core.deletes import delete_stream_spec
from snowsource.core.journal import journal_stream_spec
from snowsource.core.offsets_codec import legacy_partition_for, partition_for
from snowsource.core.query import normalise_query
from snowsource.core.reconcile import reconcile_spec
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.engine.txn_delivery import (
    Deliveries,
    OffsetsTopic,
    other_members,
    transactional_producer,
)


def secret_value(value: Any) -> str | None:
    """The plain text of a ``SecretStr`` (None stays None)."""
    return value.get_secret_value() if value is not None else None


def kafka_connection(settings: Settings, *, client_id: str = "snowsource") -> KafkaConnection:
    """The aiokafka connection settings of this configuration."""
    k = settings.kafka
    return KafkaConnection(
        bootstrap_servers=k.bootstrap_servers,
        security_protocol=str(k.security_protocol),
        sasl_mechanism=str(k.sasl_mechanism) if k.sasl_mechanism else None,
        sasl_username=k.sasl_username,
        sasl_password=secret_value(k.sasl_password),
        ssl_cafile=k.ssl_cafile,
        ssl_certfile=k.ssl_certfile,
        ssl_keyfile=k.ssl_keyfile,
        client_id=client_id,
    )


def snow_auth(settings: Settings) -> Auth:
    """The ServiceNow client's credentials."""
    a = settings.snow.auth
    if a.type == AuthType.OAUTH2:
        assert a.oauth_client_id is not None
        assert a.oauth_client_secret is not None
        return OAuth2Auth(
            grant_type="password"
            if str(a.oauth_grant_type) == "password"
            else "client_credentials",
            client_id=a.oauth_client_id,
            client_secret=a.oauth_client_secret,
            token_url=settings.snow.token_url,
            username=a.username,
            password=a.password,
        )
    if a.type == AuthType.API_KEY:
        assert a.api_key is not None
        return ApiKeyAuth(api_key=a.api_key)
    if a.username is None and a.password is None:
        return None
    assert a.username is not None
    assert a.password is not None
    return BasicAuth(username=a.username, password=a.password)


def snow_client(
    settings: Settings,
    *,
    on_date: Callable[[str], None] | None = None,
    on_response: Callable[[str, int, float], None] | None = None,
) -> ServiceNowClient:
    """The ServiceNow client of this configuration (the daemon's and ``check``'s)."""
    http = settings.snow.http
    return ServiceNowClient(
        settings.snow.url,
        snow_auth(settings),
        connect_timeout=http.connect_timeout_ms / 1000,
        request_timeout=http.request_timeout_ms / 1000,
        max_concurrent_requests=http.max_concurrent_requests,
        requests_per_session=http.requests_per_session,
        max_response_bytes=http.max_response_bytes,
        proxy=http.proxy_url,
        ca_file=http.ca_file,
        on_date=on_date,
        on_response=on_response,
    )


def table_spec(settings: Settings, alias: str, table: TableConfig) -> TableSpec:
    """Resolve one table's configuration into what its poller needs."""
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
    owners = assign(list(settings.tables), settings.tasks_max)
    return [
        spec
        for alias, table in settings.tables.items()
        if owners[alias] == settings.task_id
        for spec in stream_specs(settings, alias, table)
    ]


def connector_specs(settings: Settings) -> list[TableSpec]:
    """Specs of every stream of the connector, whatever task owns it."""
    return [
        spec
        for alias, table in settings.tables.items()
        for spec in stream_specs(settings, alias, table)
    ]


def table_deliveries(
    settings: Settings, conn: KafkaConnection, store: OffsetsTopic, retry: RetryPolicy
) -> Deliveries:
    """How each stream's pages reach Kafka: the shared producer, or with ``exactly.once`` a
    transactional producer per stream."""
    if not settings.exactly_once:
        return Deliveries(None)
    k = settings.kafka
    make = transactional_producer(
        conn,
        connector=settings.name,
        offsets_topic=settings.offset_storage_topic,
        linger_ms=k.linger_ms,
        max_request_size=k.max_request_size,
        compression_type=str(k.compression_type),
    )
    return Deliveries(make, store=store, retry=retry, others=other_members(conn, settings.name))
