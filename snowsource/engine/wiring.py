"""From configuration to the objects the engine runs: Kafka connection, ServiceNow credentials,
retry policies, what the REST API needs (``api_options``), how each stream's pages reach Kafka
(``table_deliveries``) and every adapter the daemon runs (``Adapters``): the one engine module
that builds adapters (the streams and their owners are ``engine.table_specs``).

Every connection is built from the configuration here (``kafka_connection``, ``snow_client``),
and each first tells the redactor every secret the configuration holds (``register_config``,
which walks the model): no secret can be sent before the logs know to hide it, and no one lists
secrets by hand."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from typing import Any

import structlog
from aiokafka.errors import KafkaError

from snowsource.adapters.group_protocol import TableAssignor
from snowsource.adapters.kafka import KafkaConnection, admin_client, wait_for_kafka
from snowsource.adapters.kafka_probe import BrokerClient, KafkaProbe
from snowsource.adapters.membership import GROUP_TASK_ID, GroupMembership, describe_members
from snowsource.adapters.offset_store import OffsetStore
from snowsource.adapters.schema_registry import RegistryConnection
from snowsource.adapters.servicenow import ApiKeyAuth, Auth, BasicAuth, OAuth2Auth, ServiceNowClient
from snowsource.adapters.sink import RecordSink, ensure_topics
from snowsource.adapters.topic_keys import TopicKeys
from snowsource.adapters.topic_lookup import TopicLookup
from snowsource.adapters.topic_tail import TopicTail
from snowsource.adapters.txn_producer import TransactionalProducer
from snowsource.config.fields import AuthType
from snowsource.config.kafka import Backoff
from snowsource.config.models import Settings
from snowsource.config.redaction import redacted_dict
from snowsource.config.registry import RegistryAuthType
from snowsource.core.clock import InstanceClock
from snowsource.core.offsets_codec import StoredEntry
from snowsource.core.retry import KafkaRetries, RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.txn_id import transactional_id
from snowsource.engine.facade import ApiOptions
from snowsource.engine.group_owner import GroupOwner
from snowsource.engine.table_specs import connector_specs, table_owners
from snowsource.engine.topic_watch import TopicWatch
from snowsource.engine.txn_delivery import (
    Deliveries,
    OffsetsTopic,
    OthersDescriber,
)
from snowsource.observability import metrics
from snowsource.observability.redact import register_config

log = structlog.get_logger("snowsource.engine.wiring")


def secret_value(value: Any) -> str | None:
    """The plain text of a ``SecretStr`` (None stays None)."""
    return value.get_secret_value() if value is not None else None


def kafka_connection(settings: Settings, *, client_id: str = "snowsource") -> KafkaConnection:
    """The aiokafka connection settings of this configuration."""
    register_config(settings)
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
    register_config(settings)
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
        max_retry_after=snow_retry(settings).retry_after_cap,
        max_requests_per_hour=http.max_requests_per_hour,
        rate_limit_headroom=http.rate_limit_headroom,
    )


def snow_retry(settings: Settings) -> RetryPolicy:
    """How ServiceNow requests are retried (``snow.http.retry.*``)."""
    http = settings.snow.http
    return RetryPolicy(http.retry_initial_backoff_ms / 1000, http.retry_max_backoff_ms / 1000)


def kafka_retries(settings: Settings) -> KafkaRetries:
    """How retriable Kafka errors are retried, per kind of work (``kafka.retry.*``)."""
    retry = settings.kafka.retry

    def policy(backoff: Backoff) -> RetryPolicy:
        return RetryPolicy(backoff.initial_backoff_ms / 1000, backoff.max_backoff_ms / 1000)

    return KafkaRetries(policy(retry.offsets), policy(retry.transactions), policy(retry.tail))


def api_options(settings: Settings) -> ApiOptions:
    """What the REST API needs of this configuration (it reads nothing else of it)."""
    register_config(settings)
    rest = settings.rest
    token = rest.auth_token
    return ApiOptions(
        name=settings.name,
        task_id=settings.task_id,
        tasks_max=settings.tasks_max,
        host=rest.host,
        port=rest.port,
        console=rest.console,
        shutdown_timeout_seconds=settings.shutdown_timeout_seconds,
        health_unready_after_seconds=settings.health_unready_after_seconds,
        config=redacted_dict(settings),
        all_specs=tuple(connector_specs(settings)),
        owners=table_owners(settings),
        token=token.get_secret_value() if token is not None else None,
        topic_prefix=settings.topic_prefix,
    )


def transactional_producer(
    conn: KafkaConnection,
    *,
    connector: str,
    offsets_topic: str,
    linger_ms: int,
    max_request_size: int,
    compression_type: str,
) -> Callable[[TableSpec], TransactionalProducer]:
    """Makes a stream's producer, its id derived from the stream's offsets key."""

    def make(spec: TableSpec) -> TransactionalProducer:
        return TransactionalProducer(
            conn,
            transactional_id=transactional_id(connector, spec.partition),
            offsets_topic=offsets_topic,
            linger_ms=linger_ms,
            max_request_size=max_request_size,
            compression_type=compression_type,
        )

    return make


def other_members(conn: KafkaConnection, connector: str) -> OthersDescriber:
    """Describes the connector's live processes other than this one (group membership).

    All of them, whatever their task id: a process whose ``tasks.max`` differs may own this
    process's tables under another task id (the misconfiguration a fence reports)."""
    me = (socket.gethostname(), os.getpid())

    async def describe() -> list[str]:
        members = await describe_members(conn, connector)
        return [m.describe() for m in members if (m.host, m.pid) != me]

    return describe


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


def offsets_reader(settings: Settings) -> OffsetStore:
    """A reader of the connector's offsets of its own, apart from the daemon's store (REST's
    GET offsets reads the topic as it is now, like Connect's); it never creates the topic."""
    return OffsetStore(
        kafka_connection(settings, client_id="snowsource-rest"),
        topic=settings.offset_storage_topic,
        connector=settings.name,
        create=False,
    )


class Adapters:
    """Builds every adapter the daemon runs, from its configuration: the one place that does.

    ``Daemon`` takes one (by default built from its settings) and only orchestrates what it
    builds; a test that needs a different part (a slower link to Kafka) passes a subclass.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.conn = kafka_connection(settings)

    async def wait_for_kafka(self) -> None:
        """Return once a broker answers, or raise after ``kafka.startup.timeout.seconds``."""
        await wait_for_kafka(self.conn, self.settings.kafka.startup_timeout_seconds)

    def snow_client(self, clock: InstanceClock) -> ServiceNowClient:
        """The ServiceNow client, feeding the instance clock and the HTTP metrics."""
        return snow_client(
            self.settings, on_date=clock.observe_date_header, on_response=_observe_response
        )

    def record_sink(self) -> RecordSink:
        """The shared idempotent producer."""
        k = self.settings.kafka
        return RecordSink(
            self.conn,
            linger_ms=k.linger_ms,
            max_request_size=k.max_request_size,
            compression_type=str(k.compression_type),
        )

    def offset_store(self, output_topics: list[str], *, allow_full_replay: bool) -> OffsetStore:
        """The daemon's offsets store (``output_topics``: whose records mean offsets were lost)."""
        s = self.settings
        return OffsetStore(
            self.conn,
            topic=s.offset_storage_topic,
            connector=s.name,
            partitions=s.offset_storage_partitions,
            replication_factor=s.offset_storage_replication_factor,
            output_topics=output_topics,
            allow_full_replay=allow_full_replay,
        )

    def topic_watch(self, topics: list[str]) -> TopicWatch:
        """Watches the output topics for deletion while the tables run."""
        return TopicWatch(TopicLookup(self.conn), topics)

    def topic_tail(self) -> TopicTail:
        """Reads a table's output topic back at a restart (the dedup rebuild)."""
        return TopicTail(self.conn)

    def topic_keys(self) -> TopicKeys:
        """Reads the keys live in a table's output topic (a key sweep)."""
        return TopicKeys(self.conn)

    def kafka_probe(self, sink: Callable[[], RecordSink | None]) -> KafkaProbe:
        """Asks the producer's own client whether a broker answers (readiness)."""

        def broker() -> BrokerClient | None:
            current = sink()
            return current.broker_client if current is not None else None

        return KafkaProbe(broker)

    def deliveries(self, store: OffsetsTopic, retry: RetryPolicy) -> Deliveries:
        """How each stream's pages reach Kafka (see :func:`table_deliveries`)."""
        return table_deliveries(self.settings, self.conn, store, retry)

    async def ensure_topics(self, topics: list[str]) -> dict[str, str]:
        """Create the missing output topics when allowed; topic -> why it is unusable."""
        s = self.settings
        return await ensure_topics(
            self.conn,
            topics,
            create=s.topic_creation_enable,
            partitions=s.topic_creation_partitions,
            replication_factor=s.topic_creation_replication_factor,
            configs=s.topic_creation_configs,
        )

    async def read_offsets(self) -> list[StoredEntry]:
        """The connector's records, read from the offsets topic now by a reader of their own:
        reloading the daemon's store under running pollers could drop an offset one of them
        writes meanwhile."""
        async with offsets_reader(self.settings) as reader:
            return reader.entries()

    async def cluster_id(self) -> str | None:
        """The Kafka cluster id; None when Kafka does not answer within 10 s."""
        try:
            async with asyncio.timeout(10), admin_client(self.conn) as admin:
                cluster = await admin.describe_cluster()
        except (KafkaError, OSError, TimeoutError) as exc:  # GET / answers without Kafka
            log.warning("could not read the Kafka cluster id", error=repr(exc))
            return None
        found = cluster.get("cluster_id")
        return str(found) if found else None

    def group_membership(
        self,
        owner: GroupOwner,
        *,
        worker_id: Callable[[], str],
        on_fenced: Callable[[str], None],
    ) -> GroupMembership:
        """``tasks.assignment: group``: this member's membership, carrying the table assignor
        that reports ``owner``'s tables to the group and hands it each round's plan."""
        s = self.settings
        assignor = TableAssignor(
            key=owner.key,
            aliases=owner.aliases,
            worker_id=worker_id,
            running=owner.running,
            on_view=owner.on_view,
            active=owner.active,
            found=lambda: owner.found,
        )
        return GroupMembership(
            self.conn,
            connector=s.name,
            task_id=GROUP_TASK_ID,
            topic=s.offset_storage_topic,
            on_fenced=on_fenced,
            assignor=assignor,
            session_timeout_ms=s.group_session_timeout_ms,
            on_lost=owner.on_lost,
        )

    def static_membership(self, on_fenced: Callable[[str], None]) -> GroupMembership:
        """``tasks.assignment: static``: the membership that fences a second ``task.id``."""
        s = self.settings
        return GroupMembership(
            self.conn,
            connector=s.name,
            task_id=s.task_id,
            topic=s.offset_storage_topic,
            on_fenced=on_fenced,
        )


def _observe_response(table: str, status: int, seconds: float) -> None:
    metrics.HTTP_REQUESTS.labels(table=table, status=str(status)).inc()
    metrics.HTTP_LATENCY.labels(table=table).observe(seconds)


def registry_connection(settings: Settings) -> RegistryConnection | None:
    """The Schema Registry of ``schema.registry`` (None when no URL is set)."""
    registry = settings.schema_registry
    if registry.url is None:
        return None
    basic = registry.auth_type is RegistryAuthType.BASIC
    bearer = registry.auth_type is RegistryAuthType.BEARER
    return RegistryConnection(
        url=registry.url,
        username=registry.username if basic else None,
        password=secret_value(registry.password) if basic else None,
        token=secret_value(registry.token) if bearer else None,
        ca_file=registry.ca_file,
        timeout_seconds=registry.request_timeout_ms / 1000,
    )
