"""Serving an emulator on a real TCP port (tests needing a URL, the CLI, the demo)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from snowsource.emulator.emulator import Emulator


@contextlib.asynccontextmanager
async def serve(emu: Emulator, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``emu`` and yield its base URL (``http://host:port``; ``port=0`` picks a free one).

    Leaving the block stops the server and the emulator's background activity.
    """
    # handler_cancellation: a client that gives up (timeout) stops its slow-fault handler.
    runner = web.AppRunner(
        emu.make_app(), handle_signals=False, access_log=None, handler_cancellation=True
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        addresses = runner.addresses
        bound_port = addresses[0][1] if addresses else port
        url_host = f"[{host}]" if ":" in host else host
        yield f"http://{url_host}:{bound_port}"
    finally:
        await runner.cleanup()
