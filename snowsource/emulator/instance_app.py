"""The instance model over HTTP: the middleware every ``/api/`` request passes first, and the
statistics endpoint (``GET``/``DELETE /emulator/statistics``).

The middleware runs outside the rest of the pipeline, so the configured latency, faults and the
handler all run while the request holds its session turn and a node thread, as on an instance.
A request the model drops (202) or refuses (429) is journaled with that status.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from snowsource.emulator.instance import Admission
from snowsource.emulator.journal import Request
from snowsource.emulator.tableapi import EMULATOR, error_response, json_response

__all__ = ["instance_middleware", "statistics_routes"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STATISTICS_PATH = "/emulator/statistics"


def _set_cookies(response: web.StreamResponse, admission: Admission) -> None:
    for name, value in admission.cookies.items():
        response.set_cookie(name, value, path="/", httponly=True)


def _rejection(admission: Admission) -> web.Response:
    if admission.verdict == "queued_out":
        # What an instance answers when too many requests wait on one session: nothing usable.
        return web.Response(status=202)
    return error_response(
        429,
        "Too Many Requests",
        f"API_INT semaphore of node {admission.node} exhausted (all threads busy, queue full)",
    )


@web.middleware
async def instance_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Sessions and node semaphores for ``/api/`` requests when the model is on."""
    emu = request.app[EMULATOR]
    model = emu.instance
    if not model.enabled or not request.path.startswith("/api/"):
        return await handler(request)
    response: web.StreamResponse
    async with model.admit(request.cookies) as admission:
        if admission.verdict != "served":
            response = _rejection(admission)
            emu.journal.append(
                Request(
                    method=request.method,
                    path=request.path,
                    params=dict(request.query),
                    headers=dict(request.headers),
                    at=emu.clock.now(),
                    wall=time.monotonic(),
                    table=request.match_info.get("table"),
                    status=response.status,
                )
            )
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                _set_cookies(exc, admission)
                raise
    _set_cookies(response, admission)
    return response


async def _statistics(request: web.Request) -> web.Response:
    return json_response(request.app[EMULATOR].instance.statistics())


async def _reset_statistics(request: web.Request) -> web.Response:
    """The statistics up to now, and counting starts afresh (one step: nothing falls between)."""
    model = request.app[EMULATOR].instance
    until_now = model.statistics()
    model.reset_statistics()
    return json_response(until_now)


def statistics_routes(router: web.UrlDispatcher) -> None:
    """Add the statistics endpoint (outside ``/api/``: no instance has it, none is modelled)."""
    router.add_get(STATISTICS_PATH, _statistics)
    router.add_delete(STATISTICS_PATH, _reset_statistics)
