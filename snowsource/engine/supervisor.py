"""The supervisor: one process, its resources, and one poller per owned table (SPEC §1, §10).

Resources are opened in dependency order with an ``AsyncExitStack`` (Kafka reachable, HTTP
session, producer, offsets store) and closed in reverse. Pollers run as named tasks; the
supervisor can stop them all (graceful: stop requests, drain acks, write final offsets), start
a fresh generation from the stored offsets (resume / restart) and shut down within one deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import structlog

from snowsource.adapters.kafka import KafkaConnection, wait_for_kafka
from snowsource.adapters.membership import GroupMembership
from snowsource.adapters.offset_store import OffsetStore
from snowsource.adapters.servicenow import ApiKeyAuth, Auth, BasicAuth, OAuth2Auth, ServiceNowClient
from snowsource.adapters.sink import RecordSink, ensure_topics
from snowsource.config.settings import AuthType, Settings, TableConfig, redacted_dict
from snowsource.core.assignment import assign
from snowsource.core.clock import InstanceClock
from snowsource.core.errors import FencedError
from snowsource.core.offsets_codec import legacy_partition_for, partition_for
from snowsource.core.query import normalise_query
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.engine.poller import Poller, TableState
from snowsource.observability import metrics
from snowsource.observability.logs import register_secrets
from snowsource.runtime.aio import done_before

if TYPE_CHECKING:
    from snowsource.api.rest import RestServer

log = structlog.get_logger("snowsource.engine.supervisor")


class ConnectorState(StrEnum):
    """Connector-level state as Kafka Connect names it."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None


def kafka_connection(settings: Settings, *, client_id: str = "snowsource") -> KafkaConnection:
    """The aiokafka connection settings of this configuration."""
    k = settings.kafka
    return KafkaConnection(
        bootstrap_servers=k.bootstrap_servers,
        security_protocol=str(k.security_protocol),
        sasl_mechanism=str(k.sasl_mechanism) if k.sasl_mechanism else None,
        sasl_username=k.sasl_username,
        sasl_password=_secret(k.sasl_password),
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
    )


def owned_specs(settings: Settings) -> list[TableSpec]:
    """Specs of the tables this process's ``task.id`` owns (SPEC §10)."""
    owners = assign(list(settings.tables), settings.tasks_max)
    return [
        table_spec(settings, alias, table)
        for alias, table in settings.tables.items()
        if owners[alias] == settings.task_id
    ]


@dataclass
class _Generation:
    """One set of running pollers sharing a stop event."""

    stop: asyncio.Event
    pollers: dict[str, Poller]
    tasks: dict[str, asyncio.Task[None]]


class Daemon:
    """Runs the owned tables of one task until shutdown."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.specs = owned_specs(settings)
        self.instance = settings.snow.instance
        self.clock = InstanceClock()
        self.store: OffsetStore | None = None
        self.client: ServiceNowClient | None = None
        self.sink: RecordSink | None = None
        self.target = ConnectorState.RUNNING
        self.kafka_ready = False
        self.topic_problems: dict[str, str] = {}
        self._generation: _Generation | None = None
        self._lock = asyncio.Lock()
        self._retry = RetryPolicy(
            settings.snow.http.retry_initial_backoff_ms / 1000,
            settings.snow.http.retry_max_backoff_ms / 1000,
        )
        self.ready = asyncio.Event()
        self.fenced_by: str | None = None
        self.membership: GroupMembership | None = None
        self.rest: RestServer | None = None  # set while the REST API serves (url, port)
        self._shutdown: asyncio.Event | None = None
        register_secrets(
            _secret(s)
            for s in (
                settings.snow.auth.password,
                settings.snow.auth.oauth_client_secret,
                settings.snow.auth.api_key,
                settings.kafka.sasl_password,
                settings.rest.auth_token,
            )
        )

    # ----------------------------------------------------------------- introspection

    @property
    def pollers(self) -> dict[str, Poller]:
        """The pollers of the current generation (empty while STOPPED)."""
        return dict(self._generation.pollers) if self._generation else {}

    @property
    def state(self) -> ConnectorState:
        """RUNNING while any table runs, FAILED when all have failed (SPEC §8)."""
        if self.target in (ConnectorState.STOPPED, ConnectorState.PAUSED):
            return self.target
        pollers = self.pollers
        if pollers and all(p.status.state == TableState.FAILED for p in pollers.values()):
            return ConnectorState.FAILED
        return ConnectorState.RUNNING

    # ----------------------------------------------------------------- running

    async def run(
        self, shutdown: asyncio.Event, *, on_ready: Callable[[], None] | None = None
    ) -> int:
        """Open resources, run pollers until ``shutdown`` is set, then stop within the deadline."""
        s = self.settings
        conn = kafka_connection(s)
        log.info("effective configuration", config=redacted_dict(s))
        for spec in self.specs:
            log.info(
                "table partition",
                table=spec.alias,
                topic=spec.topic,
                partition=spec.partition.as_dict(),
            )
        if not self.specs:
            log.warning(
                "this task owns no tables",
                task_id=s.task_id,
                tasks_max=s.tasks_max,
                tables=list(s.tables),
            )
        self._shutdown = shutdown
        # SIGTERM while Kafka is still unreachable at start is a clean exit (0), not a failure.
        waiting = asyncio.create_task(
            wait_for_kafka(conn, s.kafka.startup_timeout_seconds), name="wait-for-kafka"
        )
        if not await done_before(waiting, shutdown):
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            log.info("shutdown requested before Kafka was reachable")
            return 0
        waiting.result()
        self.kafka_ready = True
        async with AsyncExitStack() as stack:
            self.client = await stack.enter_async_context(
                ServiceNowClient(
                    s.snow.url,
                    snow_auth(s),
                    connect_timeout=s.snow.http.connect_timeout_ms / 1000,
                    request_timeout=s.snow.http.request_timeout_ms / 1000,
                    max_concurrent_requests=s.snow.http.max_concurrent_requests,
                    proxy=s.snow.http.proxy_url,
                    ca_file=s.snow.http.ca_file,
                    on_date=self.clock.observe_date_header,
                    on_response=_observe_response,
                )
            )
            self.sink = await stack.enter_async_context(
                RecordSink(
                    conn,
                    linger_ms=s.kafka.linger_ms,
                    max_request_size=s.kafka.max_request_size,
                    compression_type=str(s.kafka.compression_type),
                )
            )
            self.store = await stack.enter_async_context(
                OffsetStore(
                    conn,
                    topic=s.offset_storage_topic,
                    connector=s.name,
                    partitions=s.offset_storage_partitions,
                    replication_factor=s.offset_storage_replication_factor,
                )
            )
            self.topic_problems = await ensure_topics(
                conn,
                [spec.topic for spec in self.specs],
                create=s.topic_creation_enable,
                partitions=s.topic_creation_partitions,
                replication_factor=s.topic_creation_replication_factor,
                configs=s.topic_creation_configs,
            )
            if s.rest.enabled:
                # Imported here because rest imports this module (ConnectorState, table_spec).
                from snowsource.api.rest import RestServer  # noqa: PLC0415

                self.rest = await stack.enter_async_context(RestServer(self))
            membership = await stack.enter_async_context(
                GroupMembership(
                    conn,
                    connector=s.name,
                    task_id=s.task_id,
                    topic=s.offset_storage_topic,
                    on_fenced=self._fenced,
                )
            )
            self.membership = membership
            await self.start_pollers()
            self.ready.set()
            if on_ready is not None:
                on_ready()
            try:
                await shutdown.wait()
            finally:
                log.info("shutting down", timeout_s=s.shutdown_timeout_seconds)
                await self.stop_pollers(deadline=time.monotonic() + s.shutdown_timeout_seconds)
        log.info("shutdown complete")
        if self.fenced_by is not None:
            raise FencedError(
                f"a newer process with task.id {s.task_id} took over ({self.fenced_by}); "
                f"this one committed what Kafka acknowledged and stopped"
            )
        return 0

    def _fenced(self, newer: str) -> None:
        """Called by the group membership when a newer member has our task id."""
        if self.fenced_by is None:
            self.fenced_by = newer
            log.error("fenced by a newer process with the same task.id", newer=newer)
            if self._shutdown is not None:
                self._shutdown.set()

    async def start_pollers(self) -> None:
        """Start a fresh generation of pollers from the stored offsets (start, resume, restart)."""
        async with self._lock:
            if self._generation is not None:
                return
            assert self.client is not None
            assert self.sink is not None
            assert self.store is not None
            stop = asyncio.Event()
            pollers: dict[str, Poller] = {}
            tasks: dict[str, asyncio.Task[None]] = {}
            for spec in self.specs:
                poller = Poller(
                    spec,
                    connector=self.settings.name,
                    instance=self.instance,
                    client=self.client,
                    sink=self.sink,
                    store=self.store,
                    clock=self.clock,
                    retry=self._retry,
                    stop=stop,
                )
                pollers[spec.alias] = poller
                problem = self.topic_problems.get(spec.topic)
                if problem:
                    poller.fail(problem)
                    continue
                tasks[spec.alias] = asyncio.create_task(
                    _bound(spec.alias, poller.run()), name=f"poller:{spec.alias}"
                )
            self._generation = _Generation(stop=stop, pollers=pollers, tasks=tasks)
            self.target = ConnectorState.RUNNING

    async def stop_pollers(self, *, deadline: float | None = None) -> None:
        """Stop every poller: drain acks and write final offsets, cancel at ``deadline``."""
        async with self._lock:
            generation = self._generation
            if generation is None:
                return
            generation.stop.set()
            tasks = list(generation.tasks.values())
            if tasks:
                timeout = None if deadline is None else max(deadline - time.monotonic(), 0)
                _done, pending = await asyncio.wait(tasks, timeout=timeout)
                for task in pending:
                    log.warning("shutdown deadline passed; cancelling", task=task.get_name())
                    task.cancel()
                if pending:
                    await asyncio.wait(pending)
                for task in tasks:
                    if not task.cancelled() and task.exception() is not None:
                        log.error("poller crashed", task=task.get_name(), error=task.exception())
            self._generation = None

    async def restart_pollers(self) -> None:
        """Stop and start again from the stored offsets (FAILED tables included)."""
        await self.stop_pollers(deadline=time.monotonic() + self.settings.shutdown_timeout_seconds)
        await self.start_pollers()


async def _bound(alias: str, coro: Any) -> None:
    """Run a poller with its table bound to every log line it (and what it calls) writes."""
    with structlog.contextvars.bound_contextvars(table=alias):
        await coro


def _observe_response(table: str, status: int, seconds: float) -> None:
    metrics.HTTP_REQUESTS.labels(table=table, status=str(status)).inc()
    metrics.HTTP_LATENCY.labels(table=table).observe(seconds)


async def run_until_signal(settings: Settings) -> int:
    """``snowsource run``: the daemon with SIGTERM/SIGINT wired to a graceful shutdown."""
    shutdown = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, shutdown.set)
    try:
        return await Daemon(settings).run(shutdown)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
