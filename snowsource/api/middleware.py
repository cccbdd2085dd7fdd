"""What every request passes through: bearer authentication, errors in Connect's shape, and the
bounds on how long a client may take to send its request.

With ``rest.auth.token`` set, every request but ``GET /health/live`` and the console's static
page (``api.console``) needs ``Authorization: Bearer <token>`` (401 otherwise), compared in
constant time. A header that is not valid UTF-8/Latin-1 is simply a wrong token (401).

A client gets ``READ_TIMEOUT_SECONDS`` to send its request headers (the server's keep-alive
timer, see ``api.server``) and again for its body (``read_json_body``); a slower connection is
closed (408 for a body), so slow clients cannot hold the API's sockets.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import Final

import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from snowsource.api.errors import RestError, error_response
from snowsource.observability.redact import redact

__all__ = [
    "LINGER_SECONDS",
    "OPEN_PATHS",
    "READ_TIMEOUT_SECONDS",
    "auth_middleware",
    "bearer_matches",
    "errors_middleware",
    "read_json_body",
]

log = structlog.get_logger("snowsource.api.middleware")

#: Seconds a client has for its request headers, and again for its body. Read at use, so a
#: test may lower it.
READ_TIMEOUT_SECONDS: float = 30.0
# After an early answer (401, 408) aiohttp drains the unread body so the client sees the answer
# rather than a reset; 2 s is enough for that and holds no slow socket.
LINGER_SECONDS: Final = 2.0
# Liveness stays open so an orchestrator's probe needs no secret; it reveals nothing but "the
# process answers".
OPEN_PATHS: Final = frozenset({"/health/live"})


def bearer_matches(header: str, token: bytes) -> bool:
    """Constant-time check of ``Bearer <token>``. aiohttp hands over bytes that are not UTF-8 as
    surrogate escapes; they are compared as the raw bytes they were, and so never match."""
    scheme, _, given = header.partition(" ")
    raw = given.strip().encode("utf-8", "surrogateescape")
    return scheme.lower() == "bearer" and hmac.compare_digest(raw, token)


def auth_middleware(token: bytes | None, open_paths: frozenset[str] = OPEN_PATHS) -> Middleware:
    """401 for a request without ``Bearer <token>`` (none needed when ``token`` is None, nor for
    ``open_paths``)."""

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is None or request.path in open_paths:
            return await handler(request)
        if not bearer_matches(request.headers.get("Authorization", ""), token):
            response = error_response(
                401, "Unauthorized: this API needs 'Authorization: Bearer <rest.auth.token>'"
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="snowsource"'
            return response
        return await handler(request)

    return auth


def errors_middleware() -> Middleware:
    """Every failure answered in Connect's shape, redacted; operator actions logged."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        began = time.monotonic()
        try:
            response = await handler(request)
        except RestError as exc:
            response = error_response(exc.status, redact(exc.message))
            if exc.status == 408:
                # What is left of a slow body would be read as the next request.
                response.force_close()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            # Jersey's wording for routing errors, e.g. "HTTP 404 Not Found".
            response = error_response(exc.status, f"HTTP {exc.status} {exc.reason}")
            if "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
        except Exception as exc:
            log.exception("REST request failed", method=request.method, path=request.path)
            response = error_response(500, redact(f"{type(exc).__name__}: {exc}"))
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


async def read_json_body(request: web.Request) -> object:
    """The request's JSON body (None when empty), read within ``READ_TIMEOUT_SECONDS``."""
    try:
        async with asyncio.timeout(READ_TIMEOUT_SECONDS):
            raw = await request.read()
    except TimeoutError:
        raise RestError(
            408, f"the request body did not arrive within {READ_TIMEOUT_SECONDS:g} s"
        ) from None
    if not raw.strip():
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RestError(400, f"the request body is not valid JSON: {exc}") from None
