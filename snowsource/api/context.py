"""What every handler of one REST server shares: the connector, its options and the guards.

The guards are the rules every operator action obeys: the connector name must match (each call
answers with Connect's own 404 wording), actions wait until the daemon started its pollers, and
once shutdown began every state change is refused with 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Final

from aiohttp import web

from snowsource.api.errors import NOT_FOUND_MESSAGE, SHUTTING_DOWN, RestError
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableStatus
from snowsource.engine.facade import ApiOptions, EngineFacade
from snowsource.runtime.aio import done_before

__all__ = ["WILDCARD_HOSTS", "ApiContext"]

WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - recognised, not bound


class ApiContext:
    """The state one REST server's handlers share."""

    def __init__(self, control: EngineFacade, options: ApiOptions) -> None:
        self.daemon = control
        self.options = options
        self.name = options.name
        # Every configured table, not only this task's: PATCH must recognise (and refuse)
        # partitions another task owns, and GET classifies against the whole configuration.
        self.all_specs: list[TableSpec] = list(options.all_specs)
        self.owners = options.owners
        # One operator action at a time: a PATCH must never interleave with a resume.
        self.lock = asyncio.Lock()
        # The tables' status when their pollers were last stopped, shown while none runs.
        self.last_status: dict[str, TableStatus] = {}
        self.closing = asyncio.Event()
        self.port: int | None = None

    @property
    def worker_id(self) -> str:
        """``host:port`` as Connect's ``worker_id``."""
        if self.port is None:
            raise RuntimeError("the REST server is not started")
        host = self.options.host
        if host in WILDCARD_HOSTS:
            host = socket.gethostname()
        return f"{host}:{self.port}"

    def connector(self, request: web.Request, message: str = NOT_FOUND_MESSAGE) -> None:
        """404 with ``message`` unless the request names this connector."""
        name = request.match_info["name"]
        if name != self.name:
            raise RestError(404, message.format(name))

    async def started(self) -> None:
        """Operator actions wait until the daemon started its pollers (they race it otherwise),
        but never hold up a shutdown: a start that failed never sets ``ready``."""
        self.require_open()
        if self.daemon.ready.is_set():
            return
        ready = asyncio.create_task(self.daemon.ready.wait(), name="rest:wait-ready")
        if not await done_before(ready, self.closing):
            ready.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ready
        if not self.daemon.ready.is_set():
            raise RestError(503, SHUTTING_DOWN)
        self.require_open()

    def require_open(self) -> None:
        """Every state change is refused once shutdown began."""
        if self.daemon.closing or self.closing.is_set():
            raise RestError(503, SHUTTING_DOWN)
