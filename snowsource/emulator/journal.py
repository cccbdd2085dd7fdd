"""The request journal: every request the emulator answered, for tests to assert on."""

from __future__ import annotations

import dataclasses
from datetime import datetime


@dataclasses.dataclass
class Request:
    """One request. ``status`` is 0 when the connection was dropped without an answer."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    at: datetime
    wall: float
    status: int = 0
    user: str | None = None
    table: str | None = None
    # Rows a list request answered (after ACLs), None for any other request.
    rows: int | None = None


class Journal(list[Request]):
    """Requests in arrival order (a plain list: ``clear()``, ``len()``, slicing all work)."""

    def for_table(self, table: str) -> list[Request]:
        """The Table API requests made against ``table``."""
        return [r for r in self if r.table == table]
