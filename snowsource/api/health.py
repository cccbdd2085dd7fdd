"""``/metrics`` (Prometheus text format), ``/health/live`` and ``/health/ready``."""

from __future__ import annotations

from typing import Final

from aiohttp import web
from prometheus_client import generate_latest

from snowsource.api.context import ApiContext
from snowsource.api.errors import error_response, json_response
from snowsource.engine.poller import TableState
from snowsource.observability import metrics

__all__ = ["PROMETHEUS_CONTENT_TYPE", "HealthHandlers"]

# generate_latest writes the classic text format; prometheus_client's CONTENT_TYPE_LATEST now
# names a newer version than the bytes it produces.
PROMETHEUS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


class HealthHandlers:
    """Metrics and the two health probes."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx

    async def metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``."""
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def live(self, request: web.Request) -> web.Response:
        """``GET /health/live``: the process answers."""
        return json_response({"status": "live", "message": "the snowsource process is running"})

    async def ready(self, request: web.Request) -> web.Response:
        """``GET /health/ready``: 200, or 503 naming what is missing."""
        daemon = self._ctx.daemon
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
            return error_response(
                503, "not ready: " + "; ".join(problems), status="not ready", checks=checks
            )
        return json_response({"status": "ready", "message": "ready", "checks": checks})
