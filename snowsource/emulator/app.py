"""The aiohttp application: routes, and the middleware every Table API request passes through.

Per request, in order: the instance model (``instance_app``: session turn, node thread; 202 or
429 when it refuses) -> journal entry -> configured latency -> injected fault (Table API only) ->
authentication (401) -> rate-limit rules (429 / ``X-RateLimit-*``) -> handler. Every response,
errors included, carries a ``Date`` header from the emulator clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from snowsource.emulator.aggregate import count_records
from snowsource.emulator.catalog import catalog_routes
from snowsource.emulator.clock import http_date
from snowsource.emulator.emulator import Emulator
from snowsource.emulator.faults import Fault
from snowsource.emulator.instance_app import instance_middleware, statistics_routes
from snowsource.emulator.journal import Request
from snowsource.emulator.tableapi import (
    EMULATOR,
    ROWS_KEY,
    USER_KEY,
    create_record,
    delete_record,
    error_response,
    get_record,
    json_response,
    list_records,
    modify_record,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_STATUS_MESSAGES = {
    400: "Bad Request",
    401: "User Not Authenticated",
    403: "Insufficient rights to query records",
    404: "No Record found",
    429: "Rate limit exceeded",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
_HTML_PAGE = (
    "<!DOCTYPE html><html><head><title>Instance Unavailable</title></head><body>"
    "<h1>Your instance is hibernating</h1><p>This instance is unavailable. "
    "Please try again later.</p></body></html>"
)
# Deliberately not JSON: a proxy or a half-written page.
_MALFORMED_BODY = b'{"result": [{"sys_id": "0f3e", "number": INC0010001, <html>'
_DROPPED: web.RequestKey[bool] = web.RequestKey("snowsource.emulator.dropped", bool)
_ACCEPTABLE = ("json", "*/*", "application/*")


def _unauthenticated() -> web.Response:
    return error_response(401, "User Not Authenticated", "Required to provide Auth information")


def _fault_response(fault: Fault) -> web.Response:
    if fault.status == 202 and not fault.html:
        return web.Response(status=202)  # a request dropped by session queueing: no body
    if fault.html:
        return web.Response(status=fault.status, text=_HTML_PAGE, content_type="text/html")
    headers: dict[str, str] = {}
    if fault.status == 429 and fault.retry_after is not None:
        headers["Retry-After"] = str(int(fault.retry_after))
    message = fault.message or _STATUS_MESSAGES.get(fault.status, "Simulated failure")
    detail = None
    if fault.status == 429:
        detail = "Too many concurrent requests for Table API (semaphore exhausted)"
    return error_response(fault.status, message, detail, headers=headers)


async def _truncated(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """Send the real response's headers and half its body, then cut the connection."""
    body = response.body if isinstance(response, web.Response) else None
    payload = body if isinstance(body, bytes) else b'{"result": []}'
    cut = web.StreamResponse(status=response.status, headers=response.headers)
    cut.content_length = len(payload)
    await cut.prepare(request)
    await cut.write(payload[: max(1, len(payload) // 2)])
    if request.transport is not None:
        request.transport.abort()
    return cut


async def _table_request(
    request: web.Request, handler: Handler, emu: Emulator, entry: Request
) -> web.StreamResponse:
    table = request.match_info["table"]
    counting = request.query.get("sysparm_no_count", "").strip().lower() != "true"
    fault = emu.faults.take(table, request.query.get("sysparm_query", ""), counting)
    if fault is not None and (faulty := await _injected(request, fault)) is not None:
        return faulty
    accept = request.headers.get("Accept", "")
    if accept and not any(token in accept for token in _ACCEPTABLE):
        return error_response(406, "Not Acceptable", "The emulator only produces application/json")
    now = emu.clock.timestamp()
    user = (
        emu.auth.authenticate(request.headers, request.query, now)
        if emu.auth_enabled
        else emu.default_user
    )
    if user is None:
        return _unauthenticated()
    entry.user = user.name
    request[USER_KEY] = user
    decision = emu.rate_limiter.check(user, table, now)
    if decision is not None and not decision.allowed:
        return error_response(
            429,
            "Rate limit exceeded",
            f"Rate limit of {decision.rule.limit_per_hour} requests per hour for Table API "
            "exceeded",
            headers={**decision.headers(), "Retry-After": str(decision.retry_after)},
        )
    emu.run_request_hooks(entry)
    response = await handler(request)
    if decision is not None:
        response.headers.update(decision.headers())
    if fault is not None and fault.kind == "truncated":
        return await _truncated(request, response)
    return response


async def _injected(request: web.Request, fault: Fault) -> web.StreamResponse | None:
    """The response an injected fault gives instead of the real one; None when the request
    goes on (a slow fault, once it waited, and a truncation, which cuts the real response)."""
    if fault.kind == "status":
        return _fault_response(fault)
    if fault.kind == "malformed":
        return web.Response(status=200, body=_MALFORMED_BODY, content_type="application/json")
    if fault.kind == "empty":
        return web.Response(status=200, body=b"{}", content_type="application/json")
    if fault.kind == "disconnect":
        if request.transport is not None:
            request.transport.abort()
        request[_DROPPED] = True
        return web.Response(status=499)
    if fault.kind == "slow":
        await asyncio.sleep(fault.delay)
    return None


@web.middleware
async def _pipeline(request: web.Request, handler: Handler) -> web.StreamResponse:
    emu = request.app[EMULATOR]
    entry = Request(
        method=request.method,
        path=request.path,
        params=dict(request.query),
        headers=dict(request.headers),
        at=emu.clock.now(),
        wall=time.monotonic(),
        table=request.match_info.get("table"),
    )
    emu.journal.append(entry)
    if emu.latency_ms > 0:
        await asyncio.sleep(emu.latency_ms / 1000)
    try:
        if "table" in request.match_info:
            response = await _table_request(request, handler, emu, entry)
        else:
            response = await handler(request)
    except web.HTTPException as exc:
        entry.status = exc.status
        raise
    entry.status = 0 if request.get(_DROPPED) else response.status
    entry.rows = request.get(ROWS_KEY)
    return response


async def _oauth_token(request: web.Request) -> web.Response:
    """``POST /oauth_token.do`` (form-encoded password / client_credentials / refresh_token)."""
    emu = request.app[EMULATOR]
    form = await request.post()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    answer = emu.auth.token_request(fields, emu.clock.timestamp())
    if answer is None:
        return json_response(
            {"error_description": "access_denied", "error": "server_error"}, status=401
        )
    return json_response(answer)


async def _unknown_api(request: web.Request) -> web.Response:
    return error_response(400, "Requested URI does not represent any resource", None)


async def _set_date(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Date"] = http_date(request.app[EMULATOR].clock.now())


def make_app(emu: Emulator) -> web.Application:
    """The aiohttp app for ``emu``; its lifecycle owns the emulator's background activity."""
    # The instance model (sessions, node semaphores) runs first: everything after it, latency
    # included, happens while the request holds its session turn and a node thread.
    app = web.Application(middlewares=[instance_middleware, _pipeline])
    app[EMULATOR] = emu
    app.on_response_prepare.append(_set_date)

    async def lifecycle(_app: web.Application) -> AsyncIterator[None]:
        await emu.app_started()
        try:
            yield
        finally:
            await emu.app_stopped()

    app.cleanup_ctx.append(lifecycle)
    router = app.router
    for prefix in ("/api/now/table", "/api/now/{version:v[12]}/table"):
        router.add_get(prefix + "/{table}", list_records)
        router.add_post(prefix + "/{table}", create_record)
        router.add_get(prefix + "/{table}/{sys_id}", get_record)
        router.add_put(prefix + "/{table}/{sys_id}", modify_record)
        router.add_patch(prefix + "/{table}/{sys_id}", modify_record)
        router.add_delete(prefix + "/{table}/{sys_id}", delete_record)
    for prefix in ("/api/now/stats", "/api/now/v1/stats"):
        router.add_get(prefix + "/{table}", count_records)
    router.add_post("/oauth_token.do", _oauth_token)
    statistics_routes(router)
    catalog_routes(router)
    router.add_route("*", "/api/{tail:.*}", _unknown_api)
    return app
