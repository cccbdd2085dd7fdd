"""A ServiceNow Table API emulator (aiohttp) for tests and demos (SPEC §11).

``Emulator`` is the in-memory instance with its Python control API; ``serve`` runs it on a TCP
port. See ``docs/dev/emulator-api.md``.
"""

from snowsource.emulator.emulator import Emulator
from snowsource.emulator.server import serve

__all__ = ["Emulator", "serve"]
