"""The supervisor: one process, its resources, and one poller per owned table (SPEC §1, §10).

Resources are opened in dependency order (Kafka reachable, HTTP session, producer, offsets
store, the API given by the caller, group membership) and closed in reverse. The pollers of one
*generation* run in one ``asyncio.TaskGroup``; the supervisor can stop a generation (stop
requests, drain acks, write final offsets), start a fresh one from the stored offsets (resume /
restart) and shut down.

Shutdown creates one ``Deadline`` (``shutdown.timeout.seconds``) when it is requested; the
pollers' drains and every close get what is left of it, and whatever is still running when it
passes is cancelled. Once shutdown began the supervisor is *closing* (a flag kept under its lock):
no generation starts any more, whoever asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from enum import StrEnum
from typing import Any, TypeVar

import structlog

from snowsource.adapters.kafka import KafkaConnection, wait_for_kafka
from snowsource.adapters.membership import GroupMembership
from snowsource.adapters.offset_store import OffsetStore
from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.adapters.sink import RecordSink, ensure_topics
from snowsource.adapters.topic_keys import TopicKeys
from snowsource.adapters.topic_tail import TopicTail
from snowsource.config.settings import Settings, TasksAssignment, redacted_dict
from snowsource.core.clock import InstanceClock
from snowsource.core.errors import FencedError, SnowsourceError
from snowsource.core.reconcile import KEY_PAGE_SIZE
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.engine.budget import PageBudget, page_slots
from snowsource.engine.clock_probe import StartupProbe
from snowsource.engine.delivery import PageDelivery
from snowsource.engine.generation import Generation, stop_generation
from snowsource.engine.group_owner import GroupOwner, group_membership
from snowsource.engine.poller import Poller, TableState
from snowsource.engine.reconcile import ReconcilePoller
from snowsource.engine.streams import stream_hooks
from snowsource.engine.topic_watch import TopicWatch, run_watched
from snowsource.engine.txn_delivery import Deliveries
from snowsource.engine.wiring import (
    kafka_connection,
    owned_specs,
    secret_value,
    snow_auth,
    snow_client,
    table_deliveries,
    table_spec,
)
from snowsource.observability import metrics
from snowsource.observability.logs import register_secrets
from snowsource.runtime.aio import done_before, together
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.resource import AsyncResource

__all__ = [
    "ConnectorState",
    "Daemon",
    "ShuttingDownError",
    "kafka_connection",
    "owned_specs",
    "snow_auth",
    "table_spec",
]

log = structlog.get_logger("snowsource.engine.supervisor")

R = TypeVar("R", bound=AsyncResource)
ApiFactory = Callable[["Daemon"], AsyncResource]


class ConnectorState(StrEnum):
    """Connector-level state as Kafka Connect names it."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class ShuttingDownError(SnowsourceError):
    """Shutdown began: no poller starts any more."""


class Daemon:
    """Runs the owned tables of one task until shutdown.

    ``api`` builds a resource served beside the pollers (the REST server); it is opened after
    the offsets store and closed before it.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        api: ApiFactory | None = None,
        allow_full_replay: bool = False,
        reconcile_page_size: int = KEY_PAGE_SIZE,
    ) -> None:
        self.settings = settings
        # sys_ids per key-sweep page: SPEC §14.3's 10,000 (tests give a smaller one).
        self.reconcile_page_size = reconcile_page_size
        self.allow_full_replay = allow_full_replay
        self.specs = owned_specs(settings)
        self.clock = InstanceClock()
        self.store: OffsetStore | None = None
        self.client: ServiceNowClient | None = None
        self.sink: RecordSink | None = None
        self.deliveries: Deliveries | None = None
        self.target = ConnectorState.RUNNING
        self.kafka_ready = False
        self.topic_problems: dict[str, str] = {}
        self.ready = asyncio.Event()
        self.fenced_by: str | None = None
        self.membership: GroupMembership | None = None
        self.topic_watch: TopicWatch | None = None
        self.api: AsyncResource | None = None
        self._api_factory = api
        self._conn: KafkaConnection = kafka_connection(settings)
        self._generation: Generation | None = None
        self._lock = asyncio.Lock()
        self._closing = False
        self._deadline: Deadline | None = None
        self._shutdown: asyncio.Event | None = None
        self._crashed: BaseException | None = None
        self._retry = RetryPolicy(
            settings.snow.http.retry_initial_backoff_ms / 1000,
            settings.snow.http.retry_max_backoff_ms / 1000,
        )
        # With tasks.assignment: group the consumer group decides, table by table, what runs.
        self.group: GroupOwner | None = None
        if settings.tasks_assignment == TasksAssignment.GROUP:
            self.group = GroupOwner(
                self.specs,
                build=self.build_pollers,
                run=self.run_pollers,
                reload=self._reload_offsets,
                on_crash=self._generation_ended,
                page_slots=self._page_slots(),
                stop_timeout=settings.shutdown_timeout_seconds,
            )
        register_secrets(
            secret_value(s)
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
        if self.group is not None:
            return self.group.pollers
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

    @property
    def closing(self) -> bool:
        """True once shutdown began: nothing starts any more."""
        return self._closing

    # ----------------------------------------------------------------- running

    async def run(self, shutdown: asyncio.Event) -> int:
        """Open resources, run pollers until ``shutdown`` is set, then stop within the deadline."""
        s = self.settings
        self._log_start()
        self._shutdown = shutdown
        # SIGTERM while Kafka is still unreachable at start is a clean exit (0), not a failure.
        waiting = asyncio.create_task(
            wait_for_kafka(self._conn, s.kafka.startup_timeout_seconds), name="wait-for-kafka"
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
            await self._open_resources(stack)
            await self.start_pollers()
            self.ready.set()
            try:
                await shutdown.wait()
            finally:
                await self._shut_down()
        log.info("shutdown complete")
        if self.fenced_by is not None:
            raise FencedError(
                f"a newer process with task.id {s.task_id} took over ({self.fenced_by}); "
                f"this one committed what Kafka acknowledged and stopped"
            )
        if self._crashed is not None:
            raise SnowsourceError(f"the pollers crashed: {self._crashed!r}")
        return 0

    def _log_start(self) -> None:
        s = self.settings
        log.info("effective configuration", config=redacted_dict(s))
        for spec in self.specs:
            log.info(
                "table partition",
                table=spec.alias,
                topic=spec.topic,
                partition=spec.partition.as_dict(),
            )
        if not self.specs and self.group is None:
            log.warning(
                "this task owns no tables",
                task_id=s.task_id,
                tasks_max=s.tasks_max,
                tables=list(s.tables),
            )

    async def _open_resources(self, stack: AsyncExitStack) -> None:
        s, conn = self.settings, self._conn
        client = snow_client(
            s, on_date=self.clock.observe_date_header, on_response=_observe_response
        )
        sink = RecordSink(
            conn,
            linger_ms=s.kafka.linger_ms,
            max_request_size=s.kafka.max_request_size,
            compression_type=str(s.kafka.compression_type),
        )
        store = OffsetStore(
            conn,
            topic=s.offset_storage_topic,
            connector=s.name,
            partitions=s.offset_storage_partitions,
            replication_factor=s.offset_storage_replication_factor,
            output_topics=self._replay_topics(),
            allow_full_replay=self.allow_full_replay,
        )
        watch = TopicWatch(conn, [spec.topic for spec in self.specs])
        probe = StartupProbe(self.clock, client, self.specs[0]) if self.specs else None
        # Closed in reverse order, each whether or not its start got far: close copes with that.
        for resource in (client, sink, store, probe, watch):
            if resource is not None:
                stack.push_async_callback(self._close, resource)

        # What a refused start must not do (create output topics, ask ServiceNow anything)
        # waits for the offsets topic rule, not for the rest of the store's start.
        async def session_and_probe() -> None:
            await client.start()
            if probe is not None:
                await store.allowed.wait()
                await probe.start()  # in the background: nothing below waits for its answer

        async def output_topics() -> None:
            await store.allowed.wait()
            self.topic_problems = await self._topic_problems([spec.topic for spec in self.specs])
            await watch.start()  # the topics exist now (or their tables fail)

        # None of these needs another's result, so their round trips to Kafka overlap: the HTTP
        # session (and the clock probe), the producer, the offsets store and the output topics.
        await together(session_and_probe(), sink.start(), store.start(), output_topics())
        self.client, self.sink, self.store, self.topic_watch = client, sink, store, watch
        self.deliveries = await self._open(stack, table_deliveries(s, conn, store, self._retry))
        if self._api_factory is not None:
            self.api = await self._open(stack, self._api_factory(self))
        self.membership = await self._open(stack, self._membership())

    def _membership(self) -> GroupMembership:
        s = self.settings
        if self.group is not None:
            return group_membership(
                self._conn, s, self.group, worker_id=self._worker_id, on_fenced=self._fenced
            )
        return GroupMembership(
            self._conn,
            connector=s.name,
            task_id=s.task_id,
            topic=s.offset_storage_topic,
            on_fenced=self._fenced,
        )

    def _worker_id(self) -> str:
        """This process's REST worker id (``host:port``), or its host name without REST."""
        worker = getattr(self.api, "worker_id", None)
        return str(worker) if worker else socket.gethostname()

    async def _reload_offsets(self) -> None:
        assert self.store is not None
        await self.store.load()

    def _replay_topics(self) -> list[str]:
        """Output topics whose records mean a missing offsets topic was lost, not never made:
        the owned tables' (in group mode every configured table's, since any of them may be
        this process's after the next rebalance)."""
        return [spec.topic for spec in self.specs]

    async def _open(self, stack: AsyncExitStack, resource: R) -> R:
        """Start ``resource`` (a failed start closes what it opened) and close it at the end
        within the shutdown deadline."""
        await resource.__aenter__()
        stack.push_async_callback(self._close, resource)
        return resource

    async def _close(self, resource: AsyncResource) -> None:
        await resource.close(self._shutdown_deadline())

    def _shutdown_deadline(self) -> Deadline:
        """The one deadline of this shutdown, created the first time it is needed."""
        if self._deadline is None:
            self._deadline = Deadline.after(self.settings.shutdown_timeout_seconds)
        return self._deadline

    async def _shut_down(self) -> None:
        deadline = self._shutdown_deadline()
        log.info("shutting down", timeout_s=self.settings.shutdown_timeout_seconds)
        async with self._lock:
            self._closing = True
            await self._stop_generation(deadline)

    def _fenced(self, newer: str) -> None:
        """Called by the group membership when a newer member has our task id."""
        if self.fenced_by is None:
            self.fenced_by = newer
            log.error("fenced by a newer process with the same task.id", newer=newer)
            if self._shutdown is not None:
                self._shutdown.set()

    async def _topic_problems(self, topics: list[str]) -> dict[str, str]:
        s = self.settings
        return await ensure_topics(
            self._conn,
            topics,
            create=s.topic_creation_enable,
            partitions=s.topic_creation_partitions,
            replication_factor=s.topic_creation_replication_factor,
            configs=s.topic_creation_configs,
        )

    # ----------------------------------------------------------------- generations

    async def start_pollers(self, *, reload: bool = False) -> None:
        """Start a fresh generation from the stored offsets (start, resume, restart).

        ``reload`` re-reads the offsets topic first (a PATCH or the offsets script may have
        changed it) and looks again at output topics that were missing. Raises
        ``ShuttingDownError`` once shutdown began.
        """
        async with self._lock:
            if self._closing:
                raise ShuttingDownError("snowsource is shutting down; nothing is started")
            if self.group is not None:
                await self.group.enable()
                self.target = ConnectorState.RUNNING
                return
            if self._generation is not None:
                return
            assert self.client is not None
            assert self.sink is not None
            assert self.store is not None
            if reload:
                await self.store.load()
                # A topic deleted while running counts like one missing at start: a restart
                # creates it when topic.creation.enable is true, or fails the table again.
                deleted = self.topic_watch.missing() if self.topic_watch else set()
                if self.topic_problems or deleted:
                    recheck = sorted(set(self.topic_problems) | deleted)
                    self.topic_problems = await self._topic_problems(recheck)
                    if self.topic_watch is not None:
                        await self.topic_watch.refresh()
            stop = StopSignal()
            pollers = self.build_pollers(self.specs, stop, PageBudget(self._page_slots()))
            runnable = {a: p for a, p in pollers.items() if p.status.state != TableState.FAILED}
            task = asyncio.create_task(self.run_pollers(runnable), name="pollers")
            task.add_done_callback(self._generation_ended)
            self._generation = Generation(stop=stop, pollers=pollers, task=task)
            self.target = ConnectorState.RUNNING

    async def stop_pollers(
        self, deadline: Deadline, *, target: ConnectorState = ConnectorState.STOPPED
    ) -> list[str]:
        """Stop every poller within ``deadline`` and enter ``target``.

        Returns one problem per table whose final offset could not be written (empty when
        every acknowledged record's offset is in the offsets topic).
        """
        async with self._lock:
            problems = await self._stop_generation(deadline)
            self.target = target
            return problems

    async def _stop_generation(self, deadline: Deadline) -> list[str]:
        if self.group is not None:
            return await self.group.stop_all(deadline, closing=self._closing)
        generation = self._generation
        if generation is None:
            return []
        self._generation = None
        return await stop_generation(generation, deadline)

    def build_pollers(
        self, specs: list[TableSpec], stop: StopSignal, pages: PageBudget
    ) -> dict[str, Poller]:
        """The pollers of ``specs`` for one generation (a table whose output topic is unusable
        starts FAILED with the reason)."""
        assert self.client is not None
        assert self.sink is not None
        assert self.store is not None
        hooks = stream_hooks(specs, client=self.client, retry=self._retry, stop=stop.event)
        pollers: dict[str, Poller] = {}
        for spec in specs:
            common: dict[str, Any] = {
                "client": self.client,
                "sink": self.sink,
                "store": self.store,
                "clock": self.clock,
                "retry": self._retry,
                "stop": stop,
                "hooks": hooks[spec.alias],
                "pages": pages,
                "tail": TopicTail(self._conn),
                "delivery": self.deliveries.factory(spec) if self.deliveries else PageDelivery,
            }
            if spec.stream == "reconcile":
                poller: Poller = ReconcilePoller(
                    spec, keys=TopicKeys(self._conn), page_size=self.reconcile_page_size, **common
                )
            else:
                poller = Poller(spec, **common)
            pollers[spec.alias] = poller
            problem = self.topic_problems.get(spec.topic)
            if problem:
                poller.fail(problem)
        return pollers

    def run_pollers(self, pollers: dict[str, Poller]) -> Coroutine[Any, Any, None]:
        """Run ``pollers`` (the runnable ones of a generation) in one task group."""
        return _run_all(pollers, self.topic_watch)

    def _page_slots(self) -> int:
        return page_slots(self.settings.snow.http.max_concurrent_requests)

    def _generation_ended(self, task: asyncio.Task[None]) -> None:
        """A generation ends only when stopped; a crash (a bug) shuts the process down."""
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]  # the poller's own error, not the group around it
        self._crashed = error
        log.error("pollers crashed; shutting down", error=repr(self._crashed))
        if self._shutdown is not None:
            self._shutdown.set()


async def _run_all(pollers: dict[str, Poller], watch: TopicWatch | None) -> None:
    """Every table of a generation in one task group: a poller that raises (a bug; tables
    fail on their own otherwise) ends the whole generation instead of vanishing."""
    async with asyncio.TaskGroup() as group:
        for alias, poller in pollers.items():
            group.create_task(_bound(alias, poller, watch), name=f"poller:{alias}")


async def _bound(alias: str, poller: Poller, watch: TopicWatch | None) -> None:
    """Run a poller with its table bound to every log line it (and what it calls) writes."""
    with structlog.contextvars.bound_contextvars(table=alias):
        await run_watched(alias, poller, watch)


def _observe_response(table: str, status: int, seconds: float) -> None:
    metrics.HTTP_REQUESTS.labels(table=table, status=str(status)).inc()
    metrics.HTTP_LATENCY.labels(table=table).observe(seconds)
