"""``/metrics`` (Prometheus text format), ``/health/live`` and ``/health/ready``.

Ready means this process does its job or will again without help: Kafka is reachable (asked of
the producer's own client, see ``adapters.kafka_probe``), the offsets topic is loaded, the
pollers were started, and not every owned table is stuck — FAILED, or failing (retried errors)
for longer than ``health.unready.after.seconds``. A task owning no tables, and a STOPPED or
PAUSED connector (no poller runs), are ready: that is configuration or an operator's choice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from aiohttp import web
from prometheus_client import generate_latest

from snowsource.api.context import ApiContext
from snowsource.api.errors import error_response, json_response
from snowsource.core.table_status import TableState, TableStatus
from snowsource.engine.failures import failing_seconds
from snowsource.observability import metrics
from snowsource.observability.redact import redact

__all__ = ["PROMETHEUS_CONTENT_TYPE", "HealthHandlers", "stuck_tables"]

# generate_latest writes the classic text format; prometheus_client's CONTENT_TYPE_LATEST now
# names a newer version than the bytes it produces.
PROMETHEUS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


def stuck_tables(
    statuses: Mapping[str, TableStatus], unready_after: float, now: datetime
) -> dict[str, str]:
    """Alias -> why, for the tables that are FAILED or failing for over ``unready_after`` s."""
    stuck: dict[str, str] = {}
    for alias, status in sorted(statuses.items()):
        failing = failing_seconds(status, now)
        if status.state == TableState.FAILED:
            stuck[alias] = "FAILED"
        elif failing is not None and failing > unready_after:
            stuck[alias] = (
                f"failing for {failing:.0f} s ({status.consecutive_failures} failed attempts)"
            )
    return stuck


class HealthHandlers:
    """Metrics and the two health probes."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx

    async def metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``; ``snowsource_ready`` is the readiness check run for this scrape,
        so an alert on it needs no second probe of ``/health/ready``."""
        _, problems = await self._readiness()
        metrics.READY.set(0 if problems else 1)
        metrics.ASYNCIO_TASKS.set(len(asyncio.all_tasks()))
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def live(self, request: web.Request) -> web.Response:
        """``GET /health/live``: the process answers."""
        return json_response({"status": "live", "message": "the snowsource process is running"})

    async def ready(self, request: web.Request) -> web.Response:
        """``GET /health/ready``: 200, or 503 naming what is missing."""
        checks, problems = await self._readiness()
        if problems:
            message = redact("not ready: " + "; ".join(problems))
            return error_response(503, message, status="not ready", checks=checks)
        return json_response({"status": "ready", "message": "ready", "checks": checks})

    async def _readiness(self) -> tuple[dict[str, object], list[str]]:
        """The checks, and what is missing (nothing when ready)."""
        daemon = self._ctx.daemon
        unready_after = self._ctx.options.health_unready_after_seconds
        store = daemon.offsets
        pollers = daemon.statuses()
        kafka = await daemon.kafka_reachable()
        failed = sorted(a for a, s in pollers.items() if s.state == TableState.FAILED)
        stuck = stuck_tables(pollers, unready_after, datetime.now(UTC))
        checks: dict[str, object] = {
            "kafka_connected": kafka,
            "offsets_loaded": store is not None and store.loaded.is_set(),
            "started": daemon.ready.is_set(),
            "connector_state": daemon.state.value,
            "tables": len(daemon.specs),
            "failed_tables": failed,
            "failing_tables": sorted(a for a, why in stuck.items() if why != "FAILED"),
            "unready_after_seconds": unready_after,
        }
        problems: list[str] = []
        if not kafka:
            problems.append("Kafka is not reachable (no broker answers the producer)")
        if not checks["offsets_loaded"]:
            problems.append("the offsets topic is not loaded")
        if not daemon.ready.is_set():
            problems.append("the pollers have not been started yet")
        if pollers and len(stuck) == len(pollers):
            if len(failed) == len(pollers):
                problems.append(f"every table has FAILED ({', '.join(failed)})")
            else:
                why = "; ".join(f"{alias}: {reason}" for alias, reason in stuck.items())
                problems.append(
                    f"every table has FAILED or has been failing for longer than "
                    f"health.unready.after.seconds ({unready_after:g} s): {why}"
                )
        return checks, problems
