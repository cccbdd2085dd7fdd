"""The connector's state changes: ``PUT stop``, ``PUT pause``, ``PUT resume``, ``POST restart``.

STOPPED and PAUSED both stop every poller (no requests to ServiceNow), wait for their acks and
write their final offsets before answering; only STOPPED lets offsets be modified. Resume and
restart start every poller from its stored offset exactly like a process restart. One action at
a time (the context's lock), and none once shutdown began (503).
"""

from __future__ import annotations

import structlog
from aiohttp import web

from snowsource.api.context import ApiContext
from snowsource.api.errors import (
    SHUTTING_DOWN,
    UNKNOWN_MESSAGE,
    UNKNOWN_RESTART_MESSAGE,
    RestError,
    json_response,
)
from snowsource.api.views import StatusViews
from snowsource.core.table_status import TableState
from snowsource.engine.facade import ConnectorState, ShuttingDownError
from snowsource.observability import metrics
from snowsource.runtime.deadline import Deadline

__all__ = ["ConnectorActions"]

log = structlog.get_logger("snowsource.api.actions")


def _flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter the way JAX-RS parses ``Boolean``: only "true" is true."""
    return request.query.get(name, "false").strip().lower() == "true"


class ConnectorActions:
    """The handlers that change the connector's state."""

    def __init__(self, ctx: ApiContext, views: StatusViews) -> None:
        self._ctx = ctx
        self._views = views

    async def _stop_as(self, request: web.Request, target: ConnectorState) -> list[str]:
        """Stop every poller and enter ``target``; the tables whose final offset is missing."""
        ctx = self._ctx
        ctx.connector(request, UNKNOWN_MESSAGE)
        await ctx.started()
        async with ctx.lock:
            ctx.require_open()
            here = self._tables_here()
            problems = await self._stop_pollers(target)
            for alias in here:
                metrics.set_state(alias, target.value)
                # Nothing retries any more: the status says 0, and the alert must agree.
                metrics.CONSECUTIVE_FAILURES.labels(table=alias).set(0)
        return problems

    async def stop(self, request: web.Request) -> web.Response:
        """``PUT stop``: 204 once every final offset is written, 500 naming those that are not."""
        ctx = self._ctx
        problems = await self._stop_as(request, ConnectorState.STOPPED)
        if problems:
            # Connect answers 500 when a stop did not complete; a later PATCH would race writes.
            log.error(
                "connector STOPPED through REST, but final offsets are missing", problems=problems
            )
            raise RestError(
                500,
                "The connector was stopped, but the final offsets of some tables could not be "
                "written: " + "; ".join(problems) + ". Check GET /connectors/"
                f"{ctx.name}/offsets before altering offsets.",
            )
        log.info("connector STOPPED through REST; final offsets written")
        return web.Response(status=204)

    async def pause(self, request: web.Request) -> web.Response:
        """``PUT pause``: stopped like ``stop``, listed as PAUSED."""
        problems = await self._stop_as(request, ConnectorState.PAUSED)
        if problems:
            log.warning("connector PAUSED, but final offsets are missing", problems=problems)
        log.info("connector PAUSED through REST")
        return web.Response(status=202)

    async def resume(self, request: web.Request) -> web.Response:
        """``PUT resume``: from STOPPED or PAUSED, every table from its stored offset."""
        ctx = self._ctx
        ctx.connector(request, UNKNOWN_MESSAGE)
        await ctx.started()
        async with ctx.lock:
            if ctx.daemon.state in (ConnectorState.STOPPED, ConnectorState.PAUSED):
                await self._start_pollers()
                log.info("connector resumed through REST from the stored offsets")
        return web.Response(status=202)

    async def restart(self, request: web.Request) -> web.Response:
        """``POST restart``: every table from its stored offset, FAILED ones included."""
        ctx = self._ctx
        ctx.connector(request, UNKNOWN_RESTART_MESSAGE)
        include_tasks = _flag(request, "includeTasks")
        only_failed = _flag(request, "onlyFailed")
        await ctx.started()
        async with ctx.lock:
            daemon = ctx.daemon
            failed = any(s.state == TableState.FAILED for s in daemon.statuses().values())
            running = daemon.state in (ConnectorState.RUNNING, ConnectorState.FAILED)
            if running and (failed or not only_failed):
                ctx.require_open()
                problems = await self._stop_pollers(ConnectorState.RUNNING)
                if problems:
                    log.warning("restart: final offsets are missing", problems=problems)
                await self._start_pollers()
                log.info("every table restarted through REST from the stored offsets")
        if include_tasks or only_failed:
            return json_response(self._views.status(), 202)
        return web.Response(status=204)

    async def _stop_pollers(self, target: ConnectorState) -> list[str]:
        """Stop every poller; returns once each drained its acks and wrote its final offset,
        or with the tables whose final offset could not be written in time."""
        ctx = self._ctx
        running = ctx.daemon.statuses()
        if running:
            ctx.last_status = running
        deadline = Deadline.after(ctx.options.shutdown_timeout_seconds)
        return await ctx.daemon.stop_pollers(deadline, target=target)

    async def _start_pollers(self) -> None:
        """Start every poller from the offsets topic as it is now (a PATCH or the offsets
        script may have changed it), exactly like a process restart."""
        self._ctx.require_open()
        try:
            await self._ctx.daemon.start_pollers(reload=True)
        except ShuttingDownError:
            raise RestError(503, SHUTTING_DOWN) from None

    def _tables_here(self) -> list[str]:
        """The streams whose state this process exports: in group mode the ones it runs (the
        other members export theirs), in static mode every one it owns."""
        daemon = self._ctx.daemon
        if daemon.group_mode:
            return list(daemon.statuses())
        return [spec.alias for spec in daemon.specs]
