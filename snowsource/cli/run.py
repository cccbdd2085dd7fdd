"""``snowsource run``: the daemon composed with its REST API, SIGTERM/SIGINT wired to shutdown.

The one place that knows both the engine and the API: the supervisor runs the pollers and
knows nothing of HTTP; the REST server talks to it through ``engine.facade.EngineFacade``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from snowsource.config.models import Settings
from snowsource.engine.supervisor import Daemon
from snowsource.engine.wiring import Adapters, api_options

if TYPE_CHECKING:
    from snowsource.runtime.resource import AsyncResource


def _rest(daemon: Daemon) -> AsyncResource:
    # Imported only when the REST API is on: aiohttp's server side and the REST module cost a
    # good part of start-up, and no ServiceNow request should wait for them.
    from snowsource.api.server import RestServer  # noqa: PLC0415  (see above)

    return RestServer(daemon, api_options(daemon.settings))


def compose(
    settings: Settings,
    *,
    allow_full_replay: bool = False,
    adapters: Callable[[Settings], Adapters] | None = None,
) -> Daemon:
    """The daemon of ``settings``, serving the REST API when ``rest.enabled``; ``adapters``
    builds its adapters (by default from the settings)."""
    return Daemon(
        settings,
        api=_rest if settings.rest.enabled else None,
        allow_full_replay=allow_full_replay,
        adapters=adapters(settings) if adapters is not None else None,
    )


async def run_until_signal(
    settings: Settings,
    *,
    allow_full_replay: bool = False,
    adapters: Callable[[Settings], Adapters] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (a graceful shutdown within ``shutdown.timeout.seconds``)."""
    shutdown = asyncio.Event()
    loop = asyncio.get_running_loop()
    # The handler only sets the event: cancelling from a signal handler would skip the drain.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, shutdown.set)
    try:
        daemon = compose(settings, allow_full_replay=allow_full_replay, adapters=adapters)
        return await daemon.run(shutdown)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
