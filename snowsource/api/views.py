"""Read-only views of the connector: ``GET /``, ``/connectors``, its info and its status.

The status is Connect's ``ConnectorStateInfo`` plus ``tables``: one entry per owned table with
its state, position and counters. A table with no poller (STOPPED, PAUSED) shows where a resume
would start it and the counters of its last run. Every text in it passes through the redactor.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime

import orjson
import structlog
from aiohttp import web

from snowsource import __version__
from snowsource.api.context import ApiContext
from snowsource.api.errors import NO_STATUS_MESSAGE, json_response
from snowsource.core.errors import OffsetError
from snowsource.core.offsets_codec import SourceOffset, decode_value
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState, TableStatus
from snowsource.engine.facade import ConnectorState
from snowsource.observability import build
from snowsource.observability.redact import redact, redact_value

__all__ = ["CONNECTOR_CLASS", "StatusViews", "flatten", "offset_dict", "utc_text"]

log = structlog.get_logger("snowsource.api.views")

CONNECTOR_CLASS = "snowsource"


def flatten(prefix: str, value: object, out: dict[str, str]) -> None:
    """Connect configs are flat string maps: nested YAML keys joined with ``.``."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif value is None:
        return
    elif isinstance(value, bool):
        out[prefix] = "true" if value else "false"
    elif isinstance(value, list | tuple):
        out[prefix] = orjson.dumps(list(value)).decode()
    else:
        out[prefix] = str(value)


def utc_text(moment: datetime | None) -> str | None:
    """An instant as ISO 8601 in UTC with milliseconds, e.g. ``2026-09-29T07:00:00.000Z``."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def offset_dict(offset: SourceOffset | None) -> dict[str, str] | None:
    """An offset as Connect shows it, or None."""
    return offset.as_dict() if offset is not None else None


class StatusViews:
    """The read-only handlers, and the status document the actions answer with."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx
        self._cluster_id: str | None = None

    async def root(self, request: web.Request) -> web.Response:
        """``GET /``: version, commit and the Kafka cluster id."""
        return json_response(
            {
                "version": __version__,
                "commit": await asyncio.to_thread(build.commit),
                "kafka_cluster_id": await self._kafka_cluster_id(),
            }
        )

    async def _kafka_cluster_id(self) -> str | None:
        if self._cluster_id is None:
            self._cluster_id = await self._ctx.daemon.kafka_cluster_id()
        return self._cluster_id

    async def connectors(self, request: web.Request) -> web.Response:
        """``GET /connectors``, with Connect's ``?expand=status`` / ``?expand=info``."""
        name = self._ctx.name
        expansions = request.query.getall("expand", [])
        if not expansions:
            return json_response([name])
        expanded: dict[str, object] = {}
        for expansion in expansions:
            if expansion == "status":
                expanded["status"] = self.status()
            elif expansion == "info":
                expanded["info"] = self.info()
        return json_response({name: expanded})

    async def connector_info(self, request: web.Request) -> web.Response:
        """``GET /connectors/{name}``."""
        self._ctx.connector(request)
        return json_response(self.info())

    async def connector_status(self, request: web.Request) -> web.Response:
        """``GET /connectors/{name}/status``."""
        self._ctx.connector(request, NO_STATUS_MESSAGE)
        return json_response(self.status())

    def info(self) -> dict[str, object]:
        """Connect's ``ConnectorInfo``: this process's task; none while STOPPED (as Connect)."""
        ctx = self._ctx
        config: dict[str, str] = {"connector.class": CONNECTOR_CLASS}
        flatten("", ctx.options.config, config)
        stopped = ctx.daemon.state == ConnectorState.STOPPED
        tasks = [] if stopped else [{"connector": ctx.name, "task": ctx.options.task_id}]
        return {"name": ctx.name, "config": config, "tasks": tasks, "type": "source"}

    def status(self) -> dict[str, object]:
        """Connect's ``ConnectorStateInfo`` plus ``tables``: per-table state and position."""
        ctx = self._ctx
        state = ctx.daemon.state
        worker = ctx.worker_id
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
                "id": ctx.options.task_id,
                "state": state.value,
                "worker_id": worker,
                "version": __version__,
            }
            if state == ConnectorState.FAILED and trace:
                task["trace"] = trace
            tasks.append(task)
        document: dict[str, object] = {
            "name": ctx.name,
            "connector": connector,
            "tasks": tasks,
            "type": "source",
            "tables": redact_value(tables),
        }
        # The session pool of SPEC §14.1: concurrency limit, sessions, requests in flight.
        pool = ctx.daemon.servicenow_pool()
        if pool is not None:
            document["servicenow"] = {**pool, "rate_budget": ctx.daemon.rate_budget()}
        return document

    def _tables(self, state: ConnectorState) -> dict[str, dict[str, object]]:
        daemon = self._ctx.daemon
        statuses = daemon.statuses()
        out: dict[str, dict[str, object]] = {}
        for spec in daemon.specs:
            status = statuses.get(spec.alias)
            if status is not None:
                out[spec.alias] = _running_table(spec, status)
                if daemon.group_mode:
                    out[spec.alias]["worker_id"] = self._ctx.worker_id
                continue
            out[spec.alias] = self._idle_table(spec, state)
            if daemon.group_mode:
                # Owned elsewhere (or waiting to move): as the group reported it at its last
                # round; position and counters are those of the offsets topic.
                where = daemon.placement(spec.base.alias if spec.base else spec.alias)
                if where.worker_id != self._ctx.worker_id:
                    out[spec.alias]["state"] = where.state
                out[spec.alias]["worker_id"] = where.worker_id
        for alias, status in statuses.items():
            if alias not in out and status.state == TableState.SKIPPED:
                out[alias] = self._skipped_table(alias, status)
        return out

    def _skipped_table(self, alias: str, status: TableStatus) -> dict[str, object]:
        """A discovered table the integration user cannot read (SPEC §15.2): no poller."""
        return {
            "table": alias,
            "topic": f"{self._ctx.options.topic_prefix}{alias}",
            "partition": None,
            "state": status.state.value,
            "phase": None,
            "cursor": None,
            "committed": None,
            "lag_seconds": None,
            "caught_up": False,
            "last_error": status.last_error,
            "consecutive_failures": 0,
            "failing_since": None,
            "rows_emitted": 0,
            "rows_suppressed": 0,
            "rows_late": 0,
            "pages": 0,
            "sweeps": 0,
            "backfill": None,
            "queue_position": None,
        }

    def _idle_table(self, spec: TableSpec, state: ConnectorState) -> dict[str, object]:
        """A table with no poller (STOPPED, PAUSED): where a resume would start it."""
        last = self._ctx.last_status.get(spec.alias)
        stored: object = None
        store = self._ctx.daemon.offsets
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
            "partition": spec.partition.as_dict(),
            "state": state.value,
            "phase": committed.get("phase") if committed else None,
            "cursor": {"timestamp": timestamp, "sys_id": sys_id} if committed else None,
            "committed": committed,
            "lag_seconds": None,
            "caught_up": False,
            "last_error": last.last_error if last else None,
            # No poller, so nothing is being retried: the last run's error is history.
            "consecutive_failures": 0,
            "failing_since": None,
            "rows_emitted": last.rows_emitted if last else 0,
            "rows_suppressed": last.rows_suppressed if last else 0,
            "rows_late": last.rows_late if last else 0,
            "pages": last.pages if last else 0,
            "sweeps": last.sweeps if last else 0,
            "backfill": None,  # no poller, so no sliced backfill runs
            "queue_position": None,
        }


def _running_table(spec: TableSpec, status: TableStatus) -> dict[str, object]:
    cursor = status.cursor
    return {
        "table": spec.name,
        "topic": spec.topic,
        "partition": spec.partition.as_dict(),
        "state": status.state.value,
        "phase": status.phase,
        "cursor": {"timestamp": cursor.ts, "sys_id": cursor.id} if cursor else None,
        "committed": offset_dict(status.committed),
        "lag_seconds": status.lag_seconds,
        "caught_up": status.caught_up,
        "last_error": status.last_error,
        "consecutive_failures": status.consecutive_failures,
        "failing_since": utc_text(status.failing_since),
        "rows_emitted": status.rows_emitted,
        "rows_suppressed": status.rows_suppressed,
        "rows_late": status.rows_late,
        "pages": status.pages,
        "sweeps": status.sweeps,
        # The slices' combined progress while a sliced backfill runs (SPEC §14.2).
        "backfill": dataclasses.asdict(status.backfill) if status.backfill else None,
        # While QUEUED for a backfill slot: the place in the queue (1 is next).
        "queue_position": status.queue_place(),
    }
