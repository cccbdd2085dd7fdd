"""The supervisor: one process, its resources, and one poller per owned table (SPEC §1, §10).

Resources are opened in dependency order (Kafka reachable, HTTP session, producer, offsets
store, the API given by the caller, group membership) and closed in reverse; every one of them
is built by ``engine.wiring.Adapters``, and which tables run is the ``tasks.assignment`` mode's
business (``engine.modes``): the daemon only orchestrates. Generations run in the daemon's task
set, so none outlives it and a crash (a bug) shuts the process down instead of vanishing.

Shutdown creates one ``Deadline`` (``shutdown.timeout.seconds``) when it is requested; the
pollers' drains and every close get what is left of it, and whatever is still running when it
passes is cancelled. Once shutdown began the supervisor is *closing* (a flag kept under its lock):
no generation starts any more, whoever asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from snowsource.adapters.kafka_probe import KafkaProbe
from snowsource.adapters.membership import GroupMembership
from snowsource.adapters.offset_store import OffsetStore
from snowsource.adapters.schema_registry import RegistryClient
from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.adapters.sink import RecordSink
from snowsource.config.fields import TasksAssignment
from snowsource.config.models import Settings
from snowsource.config.redaction import redacted_dict
from snowsource.core.clock import InstanceClock
from snowsource.core.errors import FencedError, SnowsourceError
from snowsource.core.offsets_codec import StoredEntry
from snowsource.core.reconcile import KEY_PAGE_SIZE
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState, TableStatus
from snowsource.engine.admission import BackfillAdmission, aggregate_count
from snowsource.engine.budget import PageBudget, page_slots
from snowsource.engine.clock_probe import StartupProbe
from snowsource.engine.delivery import PageDelivery
from snowsource.engine.discovery import Discoverer, static_discoverer
from snowsource.engine.facade import ConnectorState, OffsetsAdmin, Placement, ShuttingDownError
from snowsource.engine.group_owner import GroupOwner
from snowsource.engine.modes import GroupTables, StaticTables, TablesMode
from snowsource.engine.poller import Poller
from snowsource.engine.ports import PageSource
from snowsource.engine.reconcile import ReconcilePoller
from snowsource.engine.schemas import SchemaRegistrar
from snowsource.engine.snow_requests import SnowRequests
from snowsource.engine.stream_hooks import stream_hooks
from snowsource.engine.table_specs import owned_specs, stream_specs
from snowsource.engine.topic_watch import TopicWatch, run_watched
from snowsource.engine.txn_delivery import Deliveries
from snowsource.engine.wiring import Adapters, kafka_retries, registry_connection, snow_retry
from snowsource.runtime.aio import done_before, first_error, together
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.resource import AsyncResource
from snowsource.runtime.tasks import TaskSet

__all__ = ["ApiFactory", "Daemon"]

log = structlog.get_logger("snowsource.engine.supervisor")

R = TypeVar("R", bound=AsyncResource)
ApiFactory = Callable[["Daemon"], AsyncResource]


@dataclass
class _Opened:
    """The adapters of a running daemon, once open."""

    client: ServiceNowClient
    sink: RecordSink
    store: OffsetStore
    watch: TopicWatch
    probe: KafkaProbe
    deliveries: Deliveries | None = None
    registrar: SchemaRegistrar | None = None


class Daemon:
    """Runs the owned tables of one task until shutdown (``engine.facade.EngineFacade``).

    ``api`` builds a resource served beside the pollers (the REST server); it is opened after
    the offsets store and closed before it. ``adapters`` builds every adapter (by default from
    ``settings``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        api: ApiFactory | None = None,
        allow_full_replay: bool = False,
        adapters: Adapters | None = None,
        reconcile_page_size: int = KEY_PAGE_SIZE,
    ) -> None:
        self.settings = settings
        # sys_ids per key-sweep page: SPEC §14.3's 10,000 (tests give a smaller one).
        self._reconcile_page_size = reconcile_page_size
        self._explicit_specs = owned_specs(settings)
        # Discovered tables running here, by name (their streams' specs): ``engine.discovery``.
        self._discovered: dict[str, list[TableSpec]] = {}
        self.ready = asyncio.Event()
        self._adapters = adapters or Adapters(settings)
        self._allow_full_replay = allow_full_replay
        self._api_factory = api
        self._api: AsyncResource | None = None
        self._clock = InstanceClock()
        self._opened: _Opened | None = None
        self._target = ConnectorState.RUNNING
        self._kafka_ready = False
        self._topic_problems: dict[str, str] = {}
        self._fenced_by: str | None = None
        self._lock = asyncio.Lock()
        self._closing = False
        self._deadline: Deadline | None = None
        self._shutdown: asyncio.Event | None = None
        self._crashed: BaseException | None = None
        self._retry = snow_retry(settings)
        self._kafka_retry = kafka_retries(settings)
        self._tasks = TaskSet(self._generation_crashed)
        # Fences a second process of this task.id (static) or carries the table assignor
        # (group); opened with the other resources.
        self._membership: GroupMembership | None = None
        self.admission = BackfillAdmission(
            settings.backfill_max_tables,
            explicit=frozenset(spec.alias for spec in self._explicit_specs),
        )
        self._mode = self._tables_mode()
        self.discoverer = self._make_discoverer()

    def _tables_mode(self) -> TablesMode:
        slots = page_slots(self.settings.snow.http.max_concurrent_requests)
        if self.settings.tasks_assignment == TasksAssignment.GROUP:
            # The consumer group decides, table by table, what runs here.
            owner = GroupOwner(
                self._explicit_specs,
                build=self._build_pollers,
                run=self._run_pollers,
                reload=self._reload_offsets,
                tasks=self._tasks,
                page_slots=slots,
                stop_timeout=self.settings.shutdown_timeout_seconds,
                join=self._join,
                on_members=self._share_budget,
                resolve=self._resolve_discovered,
            )
            return GroupTables(owner)
        self._membership = self._adapters.static_membership(self._fenced)
        return StaticTables(
            self._explicit_specs,
            build=self._build_pollers,
            run=self._run_pollers,
            prepare=self._prepare_restart,
            tasks=self._tasks,
            page_slots=slots,
        )

    def _make_discoverer(self) -> Discoverer | None:
        if self.settings.snow.discover is None:
            return None
        return static_discoverer(
            self.settings,
            client=lambda: self._opened.client if self._opened else None,
            retry=self._retry,
            target=self,
        )

    async def add_discovered(self, names: list[str]) -> None:
        """Start newly discovered tables beside the running ones (``engine.discovery``)."""
        async with self._lock:
            if self._closing:
                return
            added: dict[str, list[TableSpec]] = {}
            for name in names:
                added[name] = self._discovered_streams(name)
            topics = [spec.topic for specs in added.values() for spec in specs]
            self._topic_problems.update(await self._adapters.ensure_topics(topics))
            for name, specs in added.items():
                for spec in specs:
                    log.info("table partition", table=spec.alias, topic=spec.topic)
                self._discovered[name] = specs
                await self._mode.add(name, specs)

    def _resolve_discovered(self, name: str) -> list[TableSpec] | None:
        """The streams of a table the group gives this member that only another member's
        discovery found so far: None (it waits here) until this member's own discovery, asked
        now, selects and probes it; only that discovery knows whether it is a view and by which
        prefixed fields it reads. Without discovery here: the template's settings."""
        if self.discoverer is None:
            return self._discovered_streams(name)
        self.discoverer.ask(name)
        return None

    def _discovered_streams(self, name: str) -> list[TableSpec]:
        """A discovered table's streams (its own, then its derived ones); a database view reads
        by the prefixed cursor fields its discovery found."""
        view = self.discoverer.view_cursor(name) if self.discoverer is not None else None
        return stream_specs(self.settings, name, self.settings.discovered_table(name, view))

    async def remove_discovered(self, names: list[str]) -> None:
        """Stop tables no longer discovered; their offsets stay (``offsets list``: orphaned)."""
        async with self._lock:
            for name in names:
                self._discovered.pop(name, None)
                deadline = Deadline.after(self.settings.shutdown_timeout_seconds)
                for problem in await self._mode.remove(name, deadline):
                    log.warning("a table no longer discovered stopped uncleanly", problem=problem)

    # ----------------------------------------------------------------- the facade

    @property
    def specs(self) -> list[TableSpec]:
        """Every stream this process owns: the configured ones, then the discovered ones."""
        return [
            *self._explicit_specs,
            *(spec for specs in self._discovered.values() for spec in specs),
        ]

    @property
    def pollers(self) -> dict[str, Poller]:
        """The pollers running here (empty while STOPPED)."""
        return self._mode.pollers()

    def statuses(self) -> dict[str, TableStatus]:
        """The status of every table running here, by alias, and of every discovered table
        SKIPPED as unreadable."""
        found = {alias: poller.status for alias, poller in self._mode.pollers().items()}
        if self.discoverer is not None:
            for alias, status in self.discoverer.statuses().items():
                found.setdefault(alias, status)
        return found

    @property
    def state(self) -> ConnectorState:
        """RUNNING while any table runs, FAILED when all have failed (SPEC §8)."""
        if self._target in (ConnectorState.STOPPED, ConnectorState.PAUSED):
            return self._target
        statuses = self.statuses()
        if statuses and all(s.state == TableState.FAILED for s in statuses.values()):
            return ConnectorState.FAILED
        return ConnectorState.RUNNING

    @property
    def target(self) -> ConnectorState:
        """The state an operator asked for (RUNNING, STOPPED or PAUSED)."""
        return self._target

    @property
    def fenced_by(self) -> str | None:
        """Who took this process's ``task.id`` over (it then stops), or None."""
        return self._fenced_by

    @property
    def closing(self) -> bool:
        """True once shutdown began: nothing starts any more."""
        return self._closing

    @property
    def group_mode(self) -> bool:
        """True with ``tasks.assignment: group``."""
        return self._mode.group_mode

    @property
    def offsets(self) -> OffsetsAdmin | None:
        """The offsets store, once open."""
        return self.store

    @property
    def store(self) -> OffsetStore | None:
        """The offsets store, once open."""
        return self._opened.store if self._opened else None

    @property
    def sink(self) -> RecordSink | None:
        """The shared producer, once open."""
        return self._opened.sink if self._opened else None

    @property
    def api(self) -> AsyncResource | None:
        """The resource ``api`` built (the REST server), once open."""
        return self._api

    def placement(self, alias: str) -> Placement:
        """Where the group runs ``alias``."""
        return self._mode.placement(alias)

    def busy_workers(self) -> list[str]:
        """Worker ids of the other group members still running tables."""
        return self._mode.busy_workers()

    def servicenow_pool(self) -> dict[str, float] | None:
        """The ServiceNow session pool's figures (limit, sessions, in flight) and the seconds
        left in a pause a 429's ``Retry-After`` asked for, once open."""
        client = self._opened.client if self._opened else None
        pool = client.pool_status() if client is not None else None
        if client is None or pool is None:
            return None
        return {**pool.as_dict(), "paused_seconds": round(client.paused_for(), 3)}

    def _share_budget(self, members: int) -> None:
        # Each member of a group takes its share of the ServiceNow rate budget (SPEC §15.3).
        if self._opened is not None:
            self._opened.client.set_members(members)

    def rate_budget(self) -> dict[str, float | int | None] | None:
        """The ServiceNow rate budget (SPEC §15.3) once the client is open and a budget applies."""
        budget = self._opened.client.rate_budget() if self._opened else None
        return budget.as_dict() if budget is not None else None

    async def kafka_reachable(self) -> bool:
        """Kafka answered at start, and a broker answers the producer now."""
        opened = self._opened
        return self._kafka_ready and opened is not None and await opened.probe.reachable()

    async def read_offsets(self) -> list[StoredEntry]:
        """The connector's records in the offsets topic, read now (REST's GET offsets)."""
        return await self._adapters.read_offsets()

    async def kafka_cluster_id(self) -> str | None:
        """The Kafka cluster id (None when Kafka does not answer)."""
        return await self._adapters.cluster_id()

    # ----------------------------------------------------------------- running

    async def run(self, shutdown: asyncio.Event) -> int:
        """Open resources, run pollers until ``shutdown`` is set, then stop within the deadline."""
        self._log_start()
        self._shutdown = shutdown
        # SIGTERM while Kafka is still unreachable at start is a clean exit (0), not a failure.
        waiting = asyncio.create_task(self._adapters.wait_for_kafka(), name="wait-for-kafka")
        if not await done_before(waiting, shutdown):
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            log.info("shutdown requested before Kafka was reachable")
            return 0
        waiting.result()
        self._kafka_ready = True
        async with AsyncExitStack() as stack:
            await self._open_resources(stack)
            await self.start_pollers()
            if self.discoverer is not None:
                self._tasks.spawn(self.discoverer.run(), name="discovery")
            self.ready.set()
            try:
                await shutdown.wait()
            finally:
                await self._shut_down()
        log.info("shutdown complete")
        if self._fenced_by is not None:
            raise FencedError(
                f"a newer process with task.id {self.settings.task_id} took over "
                f"({self._fenced_by}); this one committed what Kafka acknowledged and stopped"
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
        if not self.specs and not self._mode.group_mode and s.snow.discover is None:
            log.warning(
                "this task owns no tables",
                task_id=s.task_id,
                tasks_max=s.tasks_max,
                tables=list(s.tables),
            )

    async def _open_resources(self, stack: AsyncExitStack) -> None:
        parts = self._adapters
        topics = [spec.topic for spec in self.specs]
        client = parts.snow_client(self._clock)
        sink = parts.record_sink()
        # Output topics whose records mean a missing offsets topic was lost, not never made:
        # the owned tables' (in group mode every configured table's, any may be ours later).
        store = parts.offset_store(topics, allow_full_replay=self._allow_full_replay)
        watch = parts.topic_watch(topics)
        probe = self._startup_probe(client)
        kafka = parts.kafka_probe(lambda: self.sink)
        stack.push_async_callback(self._close_probe, kafka)
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
            self._topic_problems = await parts.ensure_topics(topics)
            await watch.start()  # the topics exist now (or their tables fail)

        # None of these needs another's result, so their round trips to Kafka overlap: the HTTP
        # session (and the clock probe), the producer, the offsets store and the output topics.
        await together(session_and_probe(), sink.start(), store.start(), output_topics())
        self._opened = _Opened(client, sink, store, watch, kafka)
        self._opened.registrar = await self._registrar(stack)
        deliveries = parts.deliveries(store, self._kafka_retry.transactions)
        self._opened.deliveries = await self._open(stack, deliveries)
        if self._api_factory is not None:
            self._api = await self._open(stack, self._api_factory(self))
        if self._membership is not None:
            await self._open(stack, self._membership)
        # Closed first: whatever generation is still running at the end is cancelled.
        stack.push_async_callback(self._close, self._tasks)

    async def _registrar(self, stack: AsyncExitStack) -> SchemaRegistrar | None:
        """The Schema Registry's client when a table's values are registered (in group mode any
        configured table may become ours)."""
        registry = self.settings.schema_registry
        connection = registry_connection(self.settings)
        if connection is None or not any(
            t.value_format.registered for t in self.settings.tables.values()
        ):
            return None
        client = RegistryClient(connection)
        await client.__aenter__()
        stack.push_async_callback(client.close)
        return SchemaRegistrar(
            client,
            strategy=registry.subject_name_strategy.value,
            auto_register=registry.auto_register,
            retry=self._retry,
        )

    def _join(self, owner: GroupOwner) -> GroupMembership:
        """The group membership of ``owner`` (built while the owner is constructed)."""
        self._membership = self._adapters.group_membership(
            owner, worker_id=self._worker_id, on_fenced=self._fenced
        )
        return self._membership

    def _worker_id(self) -> str:
        """This process's REST worker id (``host:port``), or its host name without REST."""
        worker = getattr(self._api, "worker_id", None)
        return str(worker) if worker else socket.gethostname()

    async def _reload_offsets(self) -> None:
        assert self.store is not None
        await self.store.load()

    async def _open(self, stack: AsyncExitStack, resource: R) -> R:
        """Start ``resource`` (a failed start closes what it opened) and close it at the end
        within the shutdown deadline."""
        await resource.__aenter__()
        stack.push_async_callback(self._close, resource)
        return resource

    async def _close(self, resource: AsyncResource) -> None:
        await resource.close(self._shutdown_deadline())

    @staticmethod
    async def _close_probe(probe: KafkaProbe) -> None:
        await probe.close()

    def _shutdown_deadline(self) -> Deadline:
        """The one deadline of this shutdown, created the first time it is needed."""
        if self._deadline is None:
            self._deadline = Deadline.after(self.settings.shutdown_timeout_seconds)
        return self._deadline

    async def _shut_down(self) -> None:
        deadline = self._shutdown_deadline()
        log.info("shutting down", timeout_s=self.settings.shutdown_timeout_seconds)
        if self.discoverer is not None:
            self.discoverer.stop()
        async with self._lock:
            self._closing = True
            await self._mode.stop(deadline, closing=True)

    def _fenced(self, newer: str) -> None:
        """Called by the group membership when a newer member has our task id."""
        if self._fenced_by is None:
            self._fenced_by = newer
            log.error("fenced by a newer process with the same task.id", newer=newer)
            if self._shutdown is not None:
                self._shutdown.set()

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
            await self._mode.start(reload=reload)
            self._target = ConnectorState.RUNNING

    async def _prepare_restart(self) -> None:
        """Before a restart: the offsets topic as it is now, and the output topics again."""
        opened = self._opened
        assert opened is not None
        await opened.store.load()
        # A topic deleted while running counts like one missing at start: a restart
        # creates it when topic.creation.enable is true, or fails the table again.
        deleted = opened.watch.missing()
        if self._topic_problems or deleted:
            recheck = sorted(set(self._topic_problems) | deleted)
            self._topic_problems = await self._adapters.ensure_topics(recheck)
            await opened.watch.refresh()

    async def stop_pollers(
        self, deadline: Deadline, *, target: ConnectorState = ConnectorState.STOPPED
    ) -> list[str]:
        """Stop every poller within ``deadline`` and enter ``target``.

        Returns one problem per table whose final offset could not be written (empty when
        every acknowledged record's offset is in the offsets topic).
        """
        async with self._lock:
            problems = await self._mode.stop(deadline, closing=self._closing)
            self._target = target
            return problems

    def _startup_probe(self, client: PageSource) -> StartupProbe | None:
        """The process's first request, through the request path of the first table."""
        if not self.specs:
            return None
        spec = self.specs[0]
        # Closing the probe cancels it; no stop event of a generation exists yet.
        requests = SnowRequests(client, alias=spec.alias, retry=self._retry, stop=asyncio.Event())
        return StartupProbe(self._clock, requests, spec)

    def _build_pollers(
        self, specs: list[TableSpec], stop: StopSignal, pages: PageBudget
    ) -> dict[str, Poller]:
        """The pollers of ``specs`` for one generation (a table whose output topic is unusable
        starts FAILED with the reason)."""
        opened = self._opened
        assert opened is not None
        client = opened.client
        hooks = stream_hooks(specs, stop=stop.event, registrar=opened.registrar)
        pollers: dict[str, Poller] = {}
        for spec in specs:
            deliveries = opened.deliveries
            common: dict[str, Any] = {
                "client": client,
                "sink": opened.sink,
                "store": opened.store,
                "clock": self._clock,
                "retry": self._retry,
                "kafka_retry": self._kafka_retry,
                "stop": stop,
                "hooks": hooks[spec.alias],
                "pages": pages,
                "tail": self._adapters.topic_tail(),
                "delivery": deliveries.factory(spec) if deliveries else PageDelivery,
                "admission": self.admission,
                "row_count": functools.partial(aggregate_count, client, spec),
            }
            poller = self._poller(spec, common)
            pollers[spec.alias] = poller
            problem = self._topic_problems.get(spec.topic)
            if problem:
                poller.fail(problem)
        return pollers

    def _poller(self, spec: TableSpec, common: dict[str, Any]) -> Poller:
        """A stream's poller; a key sweep's replaces only ``run``."""
        if spec.stream == "reconcile":
            keys = self._adapters.topic_keys()
            return ReconcilePoller(spec, keys=keys, page_size=self._reconcile_page_size, **common)
        return Poller(spec, **common)

    def _run_pollers(self, pollers: dict[str, Poller]) -> Coroutine[Any, Any, None]:
        """Run ``pollers`` (the runnable ones of a generation) in one task group."""
        return _run_all(pollers, self._opened.watch if self._opened else None)

    def _generation_crashed(self, error: BaseException) -> None:
        """A generation ends only when stopped; a crash (a bug) shuts the process down."""
        if isinstance(error, BaseExceptionGroup):
            error = first_error(error)  # the poller's own error, not the group around it
        self._crashed = error
        log.error("pollers crashed; shutting down", error=repr(error))
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
