"""Serving an emulator on a real TCP port (tests needing a URL, the CLI, the demo)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator

from aiohttp import web

from snowsource.emulator.app import make_app
from snowsource.emulator.emulator import Emulator


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server-side TLS context from a PEM certificate (chain) and its private key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


@contextlib.asynccontextmanager
async def serve(
    emu: Emulator,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[str]:
    """Serve ``emu`` and yield its base URL (``http://host:port``; ``port=0`` picks a free one).

    With ``ssl_context`` it serves HTTPS and the URL says ``https``, so TLS to ServiceNow
    (``snow.http.ca.file``, hostname checks) is tested end to end. Leaving the block stops the
    server and the emulator's background activity.
    """
    # handler_cancellation: a client that gives up (timeout) stops its slow-fault handler.
    runner = web.AppRunner(
        make_app(emu), handle_signals=False, access_log=None, handler_cancellation=True
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
        await site.start()
        addresses = runner.addresses
        bound_port = addresses[0][1] if addresses else port
        url_host = f"[{host}]" if ":" in host else host
        scheme = "https" if ssl_context is not None else "http"
        yield f"{scheme}://{url_host}:{bound_port}"
    finally:
        await runner.cleanup()
