"""A ServiceNow Table API emulator (aiohttp) for tests and demos (SPEC §11).

``Emulator`` is the in-memory instance with its Python control API; ``make_app`` is the aiohttp
application serving one, and ``serve`` runs that on a TCP port. See ``docs/dev/emulator-api.md``.
"""

from snowsource.emulator.app import make_app
from snowsource.emulator.emulator import Emulator
from snowsource.emulator.server import serve

__all__ = ["Emulator", "make_app", "serve"]
