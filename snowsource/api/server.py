"""``RestServer``: the aiohttp application of one connector, served until closed.

It composes the handlers of the other ``api`` modules over one shared ``ApiContext`` and owns
the server's lifecycle: bind, serve, and close within the shutdown deadline.
"""

from __future__ import annotations

import structlog
from aiohttp import web

from snowsource.api import middleware
from snowsource.api.actions import ConnectorActions
from snowsource.api.console import Console
from snowsource.api.context import WILDCARD_HOSTS, ApiContext
from snowsource.api.health import HealthHandlers
from snowsource.api.offsets import OffsetsHandlers
from snowsource.api.views import StatusViews
from snowsource.engine.facade import ApiOptions, EngineFacade
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

__all__ = ["RestServer"]

log = structlog.get_logger("snowsource.api.server")


class RestServer(AsyncResource):
    """The REST API of one connector's ``control``, served by aiohttp until closed.

    An async context manager; ``close`` is idempotent. ``port`` and ``url`` are known once
    started (``rest.port: 0`` binds a free port). ``options`` is all it knows of the
    configuration (its token is known to the redactor from the configuration walk).
    """

    def __init__(self, control: EngineFacade, options: ApiOptions) -> None:
        self._options = options
        self._token = options.token.encode() if options.token is not None else None
        self._ctx = ApiContext(control, options)
        self._views = StatusViews(self._ctx)
        self._actions = ConnectorActions(self._ctx, self._views)
        self._offsets = OffsetsHandlers(self._ctx)
        self._health = HealthHandlers(self._ctx)
        self._runner: web.AppRunner | None = None
        self._closed = False
        self.app = self._make_app()

    async def start(self) -> None:
        """Bind ``rest.host``:``rest.port`` and serve."""
        options = self._options
        # handle_signals=False: the daemon owns SIGTERM/SIGINT. No access log: ours never
        # touches headers (Authorization).
        runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=options.shutdown_timeout_seconds,
            # aiohttp arms this timer when a connection opens and only disarms it once the
            # request headers are complete: it bounds header read time (and idle keep-alive).
            keepalive_timeout=middleware.READ_TIMEOUT_SECONDS,
            lingering_time=middleware.LINGER_SECONDS,
        )
        await runner.setup()
        self._runner = runner
        try:
            site = web.TCPSite(runner, options.host, options.port)
            await site.start()
        except BaseException:
            await self.close()
            raise
        self._ctx.port = int(runner.addresses[0][1])
        log.info("REST API listening", url=self.url, auth=self._token is not None)

    async def close(self, deadline: Deadline | None = None) -> None:
        """Stop serving (in-flight requests finish first, within ``deadline``). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._ctx.closing.set()
        if self._runner is not None:
            try:
                async with (deadline or Deadline.never()).limit():
                    await self._runner.cleanup()
            except TimeoutError:
                log.warning("REST requests still running at the shutdown deadline; dropped")

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._ctx.port is None:
            raise RuntimeError("the REST server is not started")
        return self._ctx.port

    @property
    def url(self) -> str:
        """Base URL a local client can use, e.g. ``http://127.0.0.1:8083``."""
        host = self._options.host
        if host in WILDCARD_HOSTS:
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def worker_id(self) -> str:
        """``host:port`` as Connect's ``worker_id``."""
        return self._ctx.worker_id

    def _make_app(self) -> web.Application:
        console = Console() if self._options.console else None
        open_paths = middleware.OPEN_PATHS | (console.paths if console else frozenset())
        app = web.Application(
            middlewares=[
                middleware.errors_middleware(),
                middleware.auth_middleware(self._token, open_paths),
            ]
        )
        views, actions, offsets, health = self._views, self._actions, self._offsets, self._health
        app.router.add_get("/", views.root)
        app.router.add_get("/connectors", views.connectors)
        app.router.add_get("/connectors/{name}", views.connector_info)
        app.router.add_get("/connectors/{name}/status", views.connector_status)
        app.router.add_put("/connectors/{name}/stop", actions.stop)
        app.router.add_put("/connectors/{name}/pause", actions.pause)
        app.router.add_put("/connectors/{name}/resume", actions.resume)
        app.router.add_post("/connectors/{name}/restart", actions.restart)
        app.router.add_get("/connectors/{name}/offsets", offsets.get)
        app.router.add_patch("/connectors/{name}/offsets", offsets.patch)
        app.router.add_delete("/connectors/{name}/offsets", offsets.delete)
        app.router.add_get("/metrics", health.metrics)
        app.router.add_get("/health/live", health.live)
        app.router.add_get("/health/ready", health.ready)
        if console is not None:
            console.add_routes(app)
        return app
