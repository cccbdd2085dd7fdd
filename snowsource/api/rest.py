"""The REST API of one snowsource process: a Kafka Connect-compatible subset (SPEC §8, §9).

The usual Connect curl recipes work unchanged against it: status, stop / pause / resume /
restart, and KIP-875 offsets management (GET, PATCH, DELETE ``/connectors/{name}/offsets``), with
Connect's own status codes, response shapes and messages. Beside them: ``/metrics`` (Prometheus
text format), ``/health/live`` and ``/health/ready``.

States (``ConnectorState``):

* RUNNING / FAILED — pollers run; FAILED when every table has failed.
* STOPPED — ``PUT stop`` stopped every poller (no requests to ServiceNow), waited for their acks
  and wrote their final offsets before answering 204, so a later PATCH cannot be overwritten.
  Status shows ``"tasks": []``, like Connect. Only here may offsets be modified.
* PAUSED — ``PUT pause`` stops the pollers exactly like ``stop`` (no requests, final offsets
  written), but the task stays listed as PAUSED and offsets cannot be modified, as in Connect.
  A paused table keeps nothing in memory: resuming it is a restart from its stored offset.

``PUT resume`` (from STOPPED or PAUSED; nothing otherwise) re-reads the offsets topic and starts
every poller from its stored offset exactly like a process restart. ``POST restart`` restarts
every poller the same way, FAILED ones included; a STOPPED or PAUSED connector stays so (Connect
restarts a connector in its target state). None of these states survives a process restart.

Once shutdown began every state change answers 503: the supervisor refuses to start pollers
after it stopped them (its closing flag), so a resume racing SIGTERM starts nothing.

The server knows the supervisor only through ``ConnectorControl``, a protocol this module owns;
``snowsource.cli.run`` composes the two.

With ``rest.auth.token`` set, every request but ``GET /health/live`` needs
``Authorization: Bearer <token>`` (401 otherwise). Liveness stays open so an orchestrator's probe
needs no secret; it reveals nothing but "the process answers". The token is never logged. A
header that is not valid UTF-8/Latin-1 is simply a wrong token (401).

A client gets ``READ_TIMEOUT_SECONDS`` to send its request headers and again for its body; a
slower connection is closed (408 for a body), so slow clients cannot hold the API's sockets. Every
text the API returns (``last_error``, ``trace``, error messages) passes through the redactor.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from aiokafka.errors import KafkaError
from prometheus_client import generate_latest

from snowsource import __version__
from snowsource.adapters.kafka import admin_client
from snowsource.adapters.offset_store import OffsetStore
from snowsource.config.settings import Settings, redacted_dict
from snowsource.core.assignment import assign
from snowsource.core.errors import OffsetError
from snowsource.core.offsets_codec import (
    SourceOffset,
    SourcePartition,
    StoredEntry,
    decode_value,
    encode_value,
)
from snowsource.core.offsets_plan import (
    OffsetChange,
    connect_listing,
    parse_offsets_document,
    validate_changes,
)
from snowsource.core.table import TableSpec
from snowsource.engine.poller import Poller, TableState, TableStatus
from snowsource.engine.supervisor import ConnectorState, ShuttingDownError
from snowsource.engine.wiring import connector_specs, kafka_connection
from snowsource.observability import build, metrics
from snowsource.observability.redact import redact, redact_value, register_secret
from snowsource.runtime.aio import done_before
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

__all__ = [
    "ALTERED_MESSAGE",
    "CONNECTOR_CLASS",
    "MUST_BE_STOPPED_MESSAGE",
    "NEED_OFFSETS_MESSAGE",
    "PROMETHEUS_CONTENT_TYPE",
    "READ_TIMEOUT_SECONDS",
    "RESET_MESSAGE",
    "ConnectorControl",
    "RestServer",
]

log = structlog.get_logger("snowsource.api.rest")

# Connect's own texts (ConnectorsResource, AbstractHerder, Worker): scripts compare them.
MUST_BE_STOPPED_MESSAGE: Final = (
    "Connectors must be in the STOPPED state before their offsets can be modified. This can be "
    "done for the specified connector by issuing a 'PUT' request to the "
    "'/connectors/{name}/stop' endpoint"
)
NEED_OFFSETS_MESSAGE: Final = (
    "Partitions / offsets need to be provided for an alter offsets request"
)
# A Connect worker words "no such connector" differently per call; scripts match on the text.
NOT_FOUND_MESSAGE: Final = "Connector {} not found"
NO_STATUS_MESSAGE: Final = "No status found for connector {}"
UNKNOWN_MESSAGE: Final = "Unknown connector {}"  # stop, pause, resume
UNKNOWN_RESTART_MESSAGE: Final = "Unknown connector: {}"  # restart
# Jersey refuses a body that is not application/json before any resource code runs.
UNSUPPORTED_MEDIA_MESSAGE: Final = "HTTP 415 Unsupported Media Type"
# snowsource validates submitted offsets itself (Connect's alterOffsets hook returning true).
ALTERED_MESSAGE: Final = "The offsets for this connector have been altered successfully"
RESET_MESSAGE: Final = "The offsets for this connector have been reset successfully"

CONNECTOR_CLASS: Final = "snowsource"
# generate_latest writes the classic text format; prometheus_client's CONTENT_TYPE_LATEST now
# names a newer version than the bytes it produces.
PROMETHEUS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
_OPEN_PATHS: Final = frozenset({"/health/live"})
#: Seconds a client has for its request headers, and again for its body.
READ_TIMEOUT_SECONDS: float = 30.0
_LINGER_SECONDS: Final = 2.0
_WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - recognised, not bound


class ConnectorControl(Protocol):
    """What the REST API needs from the supervisor (``engine.supervisor.Daemon``)."""

    @property
    def specs(self) -> Sequence[TableSpec]:
        """The tables this task owns."""
        ...

    @property
    def pollers(self) -> Mapping[str, Poller]:
        """The running generation's pollers (empty while STOPPED or PAUSED)."""
        ...

    @property
    def state(self) -> ConnectorState:
        """The connector state as Connect names it."""
        ...

    @property
    def store(self) -> OffsetStore | None:
        """The daemon's offsets store, once open."""
        ...

    @property
    def ready(self) -> asyncio.Event:
        """Set once the first generation started."""
        ...

    @property
    def kafka_ready(self) -> bool:
        """True once Kafka answered."""
        ...

    @property
    def closing(self) -> bool:
        """True once shutdown began."""
        ...

    async def stop_pollers(self, deadline: Deadline, *, target: ConnectorState) -> list[str]:
        """Stop every poller within ``deadline``; the tables whose final offset is unwritten."""
        ...

    async def start_pollers(self, *, reload: bool) -> None:
        """Start every poller from the stored offsets; ``ShuttingDownError`` once closing."""
        ...


_SHUTTING_DOWN: Final = "snowsource is shutting down"


class _RestError(Exception):
    """An error answer in Connect's shape ``{"error_code": status, "message": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _error(code: int, message: str, **extra: object) -> web.Response:
    return _json({"error_code": code, "message": message, **extra}, code)


def _bearer_matches(header: str, token: bytes) -> bool:
    """Constant-time check of ``Bearer <token>``. aiohttp hands over bytes that are not UTF-8 as
    surrogate escapes; they are compared as the raw bytes they were, and so never match."""
    scheme, _, given = header.partition(" ")
    raw = given.strip().encode("utf-8", "surrogateescape")
    return scheme.lower() == "bearer" and hmac.compare_digest(raw, token)


def _flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter the way JAX-RS parses ``Boolean``: only "true" is true."""
    return request.query.get(name, "false").strip().lower() == "true"


def _flatten(prefix: str, value: object, out: dict[str, str]) -> None:
    """Connect configs are flat string maps: nested YAML keys joined with ``.``."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif value is None:
        return
    elif isinstance(value, bool):
        out[prefix] = "true" if value else "false"
    elif isinstance(value, list | tuple):
        out[prefix] = orjson.dumps(list(value)).decode()
    else:
        out[prefix] = str(value)


def _by_table(item: Mapping[str, object]) -> tuple[str, bytes]:
    partition = item.get("partition")
    table = partition.get("table") if isinstance(partition, Mapping) else None
    return (str(table or ""), orjson.dumps(partition, option=orjson.OPT_SORT_KEYS))


def _offset_dict(offset: SourceOffset | None) -> dict[str, str] | None:
    return offset.as_dict() if offset is not None else None


class RestServer(AsyncResource):
    """The REST API of one connector's ``control``, served by aiohttp until closed.

    An async context manager; ``close`` is idempotent. ``port`` and ``url`` are known once
    started (``rest.port: 0`` binds a free port).
    """

    def __init__(self, control: ConnectorControl, settings: Settings) -> None:
        self._daemon = control
        self._settings = settings
        self._name = settings.name
        token = settings.rest.auth_token
        self._token = token.get_secret_value().encode() if token is not None else None
        if token is not None:
            register_secret(token.get_secret_value())
        # Every configured table, not only this task's: PATCH must recognise (and refuse)
        # partitions another task owns, and GET classifies against the whole configuration.
        self._all_specs: list[TableSpec] = connector_specs(settings)
        owners = assign(list(settings.tables), settings.tasks_max)
        # A delete stream (<alias>.deletes) always belongs to its table's task.
        self._owners = {
            spec.alias: owners[spec.base.alias if spec.base else spec.alias]
            for spec in self._all_specs
        }
        # One operator action at a time: a PATCH must never interleave with a resume.
        self._lock = asyncio.Lock()
        self._last_status: dict[str, TableStatus] = {}
        self._cluster_id: str | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._closed = False
        self._closing = asyncio.Event()
        self.app = self._make_app()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind ``rest.host``:``rest.port`` and serve."""
        rest = self._settings.rest
        # handle_signals=False: the daemon owns SIGTERM/SIGINT. No access log: ours never
        # touches headers (Authorization).
        runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=self._settings.shutdown_timeout_seconds,
            # aiohttp arms this timer when a connection opens and only disarms it once the
            # request headers are complete: it bounds header read time (and idle keep-alive).
            keepalive_timeout=READ_TIMEOUT_SECONDS,
            # After an early answer (401, 408) aiohttp drains the unread body so the client sees
            # the answer rather than a reset; 2 s is enough for that and holds no slow socket.
            lingering_time=_LINGER_SECONDS,
        )
        await runner.setup()
        self._runner = runner
        try:
            site = web.TCPSite(runner, rest.host, rest.port)
            await site.start()
        except BaseException:
            await self.close()
            raise
        self._port = int(runner.addresses[0][1])
        log.info("REST API listening", url=self.url, auth=self._token is not None)

    async def close(self, deadline: Deadline | None = None) -> None:
        """Stop serving (in-flight requests finish first, within ``deadline``). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        if self._runner is not None:
            try:
                async with (deadline or Deadline.never()).limit():
                    await self._runner.cleanup()
            except TimeoutError:
                log.warning("REST requests still running at the shutdown deadline; dropped")

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._port is None:
            raise RuntimeError("the REST server is not started")
        return self._port

    @property
    def url(self) -> str:
        """Base URL a local client can use, e.g. ``http://127.0.0.1:8083``."""
        host = self._settings.rest.host
        if host in _WILDCARD_HOSTS:
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def worker_id(self) -> str:
        """``host:port`` as Connect's ``worker_id``."""
        host = self._settings.rest.host
        if host in _WILDCARD_HOSTS:
            host = socket.gethostname()
        return f"{host}:{self.port}"

    # ------------------------------------------------------------------ application

    def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors_middleware(), self._auth_middleware()])
        app.router.add_get("/", self._root)
        app.router.add_get("/connectors", self._connectors)
        app.router.add_get("/connectors/{name}", self._connector_info)
        app.router.add_get("/connectors/{name}/status", self._connector_status)
        app.router.add_put("/connectors/{name}/stop", self._stop)
        app.router.add_put("/connectors/{name}/pause", self._pause)
        app.router.add_put("/connectors/{name}/resume", self._resume)
        app.router.add_post("/connectors/{name}/restart", self._restart)
        app.router.add_get("/connectors/{name}/offsets", self._get_offsets)
        app.router.add_patch("/connectors/{name}/offsets", self._patch_offsets)
        app.router.add_delete("/connectors/{name}/offsets", self._delete_offsets)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._ready)
        return app

    def _errors_middleware(self) -> Middleware:
        @web.middleware
        async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
            began = time.monotonic()
            try:
                response = await handler(request)
            except _RestError as exc:
                response = _error(exc.status, redact(exc.message))
                if exc.status == 408:
                    # What is left of a slow body would be read as the next request.
                    response.force_close()
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                # Jersey's wording for routing errors, e.g. "HTTP 404 Not Found".
                response = _error(exc.status, f"HTTP {exc.status} {exc.reason}")
                if "Allow" in exc.headers:
                    response.headers["Allow"] = exc.headers["Allow"]
            except Exception as exc:
                log.exception("REST request failed", method=request.method, path=request.path)
                response = _error(500, redact(f"{type(exc).__name__}: {exc}"))
            # Operator actions are worth a line; reads are not.
            emit = log.debug if request.method in ("GET", "HEAD") else log.info
            emit(
                "REST request",
                method=request.method,
                path=request.path,
                status=response.status,
                duration_s=round(time.monotonic() - began, 3),
            )
            return response

        return errors

    def _auth_middleware(self) -> Middleware:
        token = self._token

        @web.middleware
        async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
            if token is None or request.path in _OPEN_PATHS:
                return await handler(request)
            if not _bearer_matches(request.headers.get("Authorization", ""), token):
                response = _error(
                    401, "Unauthorized: this API needs 'Authorization: Bearer <rest.auth.token>'"
                )
                response.headers["WWW-Authenticate"] = 'Bearer realm="snowsource"'
                return response
            return await handler(request)

        return auth

    def _connector(self, request: web.Request, message: str = NOT_FOUND_MESSAGE) -> None:
        name = request.match_info["name"]
        if name != self._name:
            raise _RestError(404, message.format(name))

    async def _started(self) -> None:
        """Operator actions wait until the daemon started its pollers (they race it otherwise),
        but never hold up a shutdown: a start that failed never sets ``ready``."""
        self._require_open()
        if self._daemon.ready.is_set():
            return
        ready = asyncio.create_task(self._daemon.ready.wait(), name="rest:wait-ready")
        if not await done_before(ready, self._closing):
            ready.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ready
        if not self._daemon.ready.is_set():
            raise _RestError(503, _SHUTTING_DOWN)
        self._require_open()

    def _require_open(self) -> None:
        """Every state change is refused once shutdown began."""
        if self._daemon.closing or self._closing.is_set():
            raise _RestError(503, _SHUTTING_DOWN)

    # ------------------------------------------------------------------ read-only views

    async def _root(self, request: web.Request) -> web.Response:
        return _json(
            {
                "version": __version__,
                "commit": await asyncio.to_thread(build.commit),
                "kafka_cluster_id": await self._kafka_cluster_id(),
            }
        )

    async def _kafka_cluster_id(self) -> str | None:
        if self._cluster_id is None:
            try:
                async with asyncio.timeout(10):
                    async with admin_client(kafka_connection(self._settings)) as admin:
                        cluster = await admin.describe_cluster()
                found = cluster.get("cluster_id")
                self._cluster_id = str(found) if found else None
            except (KafkaError, OSError, TimeoutError) as exc:  # GET / answers without Kafka
                log.warning("could not read the Kafka cluster id", error=repr(exc))
        return self._cluster_id

    async def _connectors(self, request: web.Request) -> web.Response:
        expansions = request.query.getall("expand", [])
        if not expansions:
            return _json([self._name])
        expanded: dict[str, object] = {}
        for expansion in expansions:
            if expansion == "status":
                expanded["status"] = self._status()
            elif expansion == "info":
                expanded["info"] = self._info()
        return _json({self._name: expanded})

    async def _connector_info(self, request: web.Request) -> web.Response:
        self._connector(request)
        return _json(self._info())

    async def _connector_status(self, request: web.Request) -> web.Response:
        self._connector(request, NO_STATUS_MESSAGE)
        return _json(self._status())

    def _info(self) -> dict[str, object]:
        """Connect's ``ConnectorInfo``: this process's task; none while STOPPED (as Connect)."""
        config: dict[str, str] = {"connector.class": CONNECTOR_CLASS}
        _flatten("", redacted_dict(self._settings), config)
        stopped = self._daemon.state == ConnectorState.STOPPED
        tasks = [] if stopped else [{"connector": self._name, "task": self._settings.task_id}]
        return {"name": self._name, "config": config, "tasks": tasks, "type": "source"}

    def _status(self) -> dict[str, object]:
        """Connect's ``ConnectorStateInfo`` plus ``tables``: per-table state and position."""
        state = self._daemon.state
        worker = self.worker_id
        tables = self._tables(state)
        trace = "\n".join(
            f"{alias}: {redact(str(table['last_error']))}"
            for alias, table in tables.items()
            if table["state"] == TableState.FAILED
        )
        # Connect 4.1 reports the plugin version of the connector and of each task.
        connector: dict[str, object] = {
            "state": state.value,
            "worker_id": worker,
            "version": __version__,
        }
        tasks: list[dict[str, object]] = []
        if state == ConnectorState.FAILED and trace:
            connector["trace"] = trace
        if state != ConnectorState.STOPPED:
            task: dict[str, object] = {
                "id": self._settings.task_id,
                "state": state.value,
                "worker_id": worker,
                "version": __version__,
            }
            if state == ConnectorState.FAILED and trace:
                task["trace"] = trace
            tasks.append(task)
        return {
            "name": self._name,
            "connector": connector,
            "tasks": tasks,
            "type": "source",
            "tables": redact_value(tables),
        }

    def _tables(self, state: ConnectorState) -> dict[str, dict[str, object]]:
        pollers = self._daemon.pollers
        out: dict[str, dict[str, object]] = {}
        for spec in self._daemon.specs:
            poller = pollers.get(spec.alias)
            if poller is not None:
                out[spec.alias] = self._running_table(spec, poller.status)
            else:
                out[spec.alias] = self._idle_table(spec, state)
        return out

    @staticmethod
    def _running_table(spec: TableSpec, status: TableStatus) -> dict[str, object]:
        cursor = status.cursor
        return {
            "table": spec.name,
            "topic": spec.topic,
            "state": status.state.value,
            "phase": status.phase,
            "cursor": {"timestamp": cursor.ts, "sys_id": cursor.id} if cursor else None,
            "committed": _offset_dict(status.committed),
            "lag_seconds": status.lag_seconds,
            "caught_up": status.caught_up,
            "last_error": status.last_error,
            "rows_emitted": status.rows_emitted,
            "rows_suppressed": status.rows_suppressed,
            "rows_late": status.rows_late,
            "pages": status.pages,
            "sweeps": status.sweeps,
        }

    def _idle_table(self, spec: TableSpec, state: ConnectorState) -> dict[str, object]:
        """A table with no poller (STOPPED, PAUSED): where a resume would start it."""
        last = self._last_status.get(spec.alias)
        stored: object = None
        store = self._daemon.store
        raw = store.get(spec.partition) if store is not None else None
        if raw is not None:
            try:
                stored = decode_value(raw)
            except OffsetError:
                stored = None
        committed = stored if isinstance(stored, Mapping) else None
        timestamp = committed.get("timestamp") if committed else None
        sys_id = committed.get("sys_id") if committed else None
        return {
            "table": spec.name,
            "topic": spec.topic,
            "state": state.value,
            "phase": committed.get("phase") if committed else None,
            "cursor": {"timestamp": timestamp, "sys_id": sys_id} if committed else None,
            "committed": committed,
            "lag_seconds": None,
            "caught_up": False,
            "last_error": last.last_error if last else None,
            "rows_emitted": last.rows_emitted if last else 0,
            "rows_suppressed": last.rows_suppressed if last else 0,
            "rows_late": last.rows_late if last else 0,
            "pages": last.pages if last else 0,
            "sweeps": last.sweeps if last else 0,
        }

    # ------------------------------------------------------------------ state changes

    async def _stop_pollers(self, target: ConnectorState) -> list[str]:
        """Stop every poller; returns once each drained its acks and wrote its final offset,
        or with the tables whose final offset could not be written in time."""
        daemon = self._daemon
        running = daemon.pollers
        if running:
            self._last_status = {alias: poller.status for alias, poller in running.items()}
        deadline = Deadline.after(self._settings.shutdown_timeout_seconds)
        return await daemon.stop_pollers(deadline, target=target)

    async def _start_pollers(self) -> None:
        """Start every poller from the offsets topic as it is now (a PATCH or the offsets
        script may have changed it), exactly like a process restart."""
        self._require_open()
        try:
            await self._daemon.start_pollers(reload=True)
        except ShuttingDownError:
            raise _RestError(503, _SHUTTING_DOWN) from None

    def _mark_tables(self, state: str) -> None:
        for spec in self._daemon.specs:
            metrics.set_state(spec.alias, state)

    async def _stop(self, request: web.Request) -> web.Response:
        self._connector(request, UNKNOWN_MESSAGE)
        await self._started()
        async with self._lock:
            self._require_open()
            problems = await self._stop_pollers(ConnectorState.STOPPED)
            self._mark_tables(ConnectorState.STOPPED.value)
        if problems:
            # Connect answers 500 when a stop did not complete; a later PATCH would race writes.
            log.error(
                "connector STOPPED through REST, but final offsets are missing", problems=problems
            )
            raise _RestError(
                500,
                "The connector was stopped, but the final offsets of some tables could not be "
                "written: " + "; ".join(problems) + ". Check GET /connectors/"
                f"{self._name}/offsets before altering offsets.",
            )
        log.info("connector STOPPED through REST; final offsets written")
        return web.Response(status=204)

    async def _pause(self, request: web.Request) -> web.Response:
        self._connector(request, UNKNOWN_MESSAGE)
        await self._started()
        async with self._lock:
            self._require_open()
            problems = await self._stop_pollers(ConnectorState.PAUSED)
            self._mark_tables(ConnectorState.PAUSED.value)
        if problems:
            log.warning("connector PAUSED, but final offsets are missing", problems=problems)
        log.info("connector PAUSED through REST")
        return web.Response(status=202)

    async def _resume(self, request: web.Request) -> web.Response:
        self._connector(request, UNKNOWN_MESSAGE)
        await self._started()
        async with self._lock:
            if self._daemon.state in (ConnectorState.STOPPED, ConnectorState.PAUSED):
                await self._start_pollers()
                log.info("connector resumed through REST from the stored offsets")
        return web.Response(status=202)

    async def _restart(self, request: web.Request) -> web.Response:
        self._connector(request, UNKNOWN_RESTART_MESSAGE)
        include_tasks = _flag(request, "includeTasks")
        only_failed = _flag(request, "onlyFailed")
        await self._started()
        async with self._lock:
            daemon = self._daemon
            failed = any(p.status.state == TableState.FAILED for p in daemon.pollers.values())
            running = daemon.state in (ConnectorState.RUNNING, ConnectorState.FAILED)
            if running and (failed or not only_failed):
                self._require_open()
                problems = await self._stop_pollers(ConnectorState.RUNNING)
                if problems:
                    log.warning("restart: final offsets are missing", problems=problems)
                await self._start_pollers()
                log.info("every table restarted through REST from the stored offsets")
        if include_tasks or only_failed:
            return _json(self._status(), 202)
        return web.Response(status=204)

    # ------------------------------------------------------------------ offsets

    async def _get_offsets(self, request: web.Request) -> web.Response:
        self._connector(request)
        listing = connect_listing(self._name, await self._fresh_entries(), self._all_specs)
        # Connect lists partitions in hash order; by table (then the rest of the partition)
        # two calls diff cleanly.
        listing["offsets"].sort(key=_by_table)
        return _json(listing)

    async def _fresh_entries(self) -> list[StoredEntry]:
        """This connector's records, read from the topic now, like Connect's GET.

        A separate reader: reloading the daemon's own store under running pollers could drop
        an offset one of them writes meanwhile.
        """
        s = self._settings
        async with OffsetStore(
            kafka_connection(s, client_id="snowsource-rest"),
            topic=s.offset_storage_topic,
            connector=s.name,
            create=False,
        ) as reader:
            return reader.entries()

    async def _patch_offsets(self, request: web.Request) -> web.Response:
        if request.content_type != "application/json":
            raise _RestError(415, UNSUPPORTED_MEDIA_MESSAGE)
        document = await self._json_body(request)
        if not isinstance(document, Mapping) or not document.get("offsets"):
            raise _RestError(400, NEED_OFFSETS_MESSAGE)
        self._connector(request)
        await self._started()
        async with self._lock:
            self._require_stopped()
            changes = self._validated(document)
            store = self._store()
            await store.load()
            entries = store.entries()
            for change in changes:
                await self._apply(store, change, entries)
        log.info(
            "offsets altered through REST",
            changes=[
                {
                    "alias": c.alias,
                    "partition": c.partition.as_dict(),
                    "offset": _offset_dict(c.offset),
                }
                for c in changes
            ],
        )
        return _json({"message": ALTERED_MESSAGE})

    async def _delete_offsets(self, request: web.Request) -> web.Response:
        self._connector(request)
        await self._started()
        async with self._lock:
            self._require_stopped()
            store = self._store()
            await store.load()
            removed = 0
            for entry in store.entries():
                if self._may_reset(entry.partition):
                    # The exact stored bytes: a foreign key spelling is removed too.
                    await store.write_raw(entry.key, None)
                    removed += 1
        log.info("offsets reset through REST", partitions=removed)
        return _json({"message": RESET_MESSAGE})

    def _store(self) -> OffsetStore:
        store = self._daemon.store
        if store is None:
            raise _RestError(503, "the offsets store is not open yet")
        return store

    def _require_stopped(self) -> None:
        self._require_open()
        if self._daemon.state != ConnectorState.STOPPED:
            raise _RestError(400, MUST_BE_STOPPED_MESSAGE.format(name=self._name))

    @staticmethod
    async def _json_body(request: web.Request) -> object:
        try:
            async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                raw = await request.read()
        except TimeoutError:
            raise _RestError(
                408, f"the request body did not arrive within {READ_TIMEOUT_SECONDS:g} s"
            ) from None
        if not raw.strip():
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _RestError(400, f"the request body is not valid JSON: {exc}") from None

    def _validated(self, document: Mapping[str, object]) -> list[OffsetChange]:
        """Every submitted pair checked like the daemon checks offsets, and owned by this
        task; one 400 names every problem and nothing is written."""
        try:
            changes = validate_changes(parse_offsets_document(document), self._all_specs)
        except OffsetError as exc:
            raise _RestError(400, str(exc)) from None
        s = self._settings
        problems = []
        for i, change in enumerate(changes):
            owner = self._owner_of(change.partition)
            if owner is not None and owner != s.task_id:
                alias = change.alias or self._alias_of(change.partition)
                problems.append(
                    f"offsets[{i}]: the partition of table alias {alias!r} belongs to task "
                    f"{owner} (tasks.max={s.tasks_max}), not to this process's task "
                    f"{s.task_id}; send the request to task {owner}'s REST API"
                )
        if problems:
            raise _RestError(400, "\n".join(problems))
        return changes

    async def _apply(
        self, store: OffsetStore, change: OffsetChange, entries: list[StoredEntry]
    ) -> None:
        """Write one change under the canonical key; other spellings of it are deleted, since
        the daemon would fall back to them once the canonical key is gone."""
        canonical = change.key(self._name)
        await store.write(change.partition, encode_value(change.offset))
        doomed = {change.partition}
        if change.offset is None:
            # Deleting a table's offset means "replay from start.timestamp": the Java
            # connector's (legacy) offset of that table must go too, or the daemon's migration
            # fallback would adopt it instead (the offsets script's `delete` does the same).
            doomed |= {
                spec.legacy_partition
                for spec in self._all_specs
                if spec.partition == change.partition
            }
        for entry in entries:
            if entry.key != canonical and SourcePartition.from_mapping(entry.partition) in doomed:
                await store.write_raw(entry.key, None)

    def _owner_of(self, partition: SourcePartition | None) -> int | None:
        """The task owning a configured table's partition (or its legacy one), else None."""
        alias = self._alias_of(partition)
        return self._owners[alias] if alias is not None else None

    def _alias_of(self, partition: SourcePartition | None) -> str | None:
        if partition is None:
            return None
        for spec in self._all_specs:
            if partition in (spec.partition, spec.legacy_partition):
                return spec.alias
        return None

    def _may_reset(self, partition: Mapping[str, object]) -> bool:
        """DELETE touches this task's tables; partitions no configured table uses (orphaned,
        stale, foreign) belong to task 0, so a DELETE on every task resets everything."""
        if self._settings.tasks_max == 1:
            return True
        owner = self._owner_of(SourcePartition.from_mapping(partition))
        return (owner if owner is not None else 0) == self._settings.task_id

    # ------------------------------------------------------------------ metrics and health

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def _live(self, request: web.Request) -> web.Response:
        return _json({"status": "live", "message": "the snowsource process is running"})

    async def _ready(self, request: web.Request) -> web.Response:
        daemon = self._daemon
        store = daemon.store
        pollers = daemon.pollers
        failed = sorted(a for a, p in pollers.items() if p.status.state == TableState.FAILED)
        checks: dict[str, object] = {
            "kafka_connected": daemon.kafka_ready,
            "offsets_loaded": store is not None and store.loaded.is_set(),
            "started": daemon.ready.is_set(),
            "connector_state": daemon.state.value,
            "tables": len(daemon.specs),
            "failed_tables": failed,
        }
        problems: list[str] = []
        if not daemon.kafka_ready:
            problems.append("Kafka is not connected")
        if not checks["offsets_loaded"]:
            problems.append("the offsets topic is not loaded")
        if not daemon.ready.is_set():
            problems.append("the pollers have not been started yet")
        if pollers and len(failed) == len(pollers):
            problems.append(f"every table has FAILED ({', '.join(failed)})")
        if problems:
            return _error(
                503, "not ready: " + "; ".join(problems), status="not ready", checks=checks
            )
        return _json({"status": "ready", "message": "ready", "checks": checks})
