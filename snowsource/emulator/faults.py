"""Injectable faults: what a flaky instance, proxy or network does to Table API requests.

No I/O here; the app asks :meth:`Faults.take` for the next fault that matches a request and acts
it out. Faults are consumed in FIFO order: the first pending fault whose ``table`` matches
(``None`` matches any Table API request) and, when it has one, whose ``window`` holds the start
of the request's keyset window, is used and its ``times`` counter decremented.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

# The lower bound of a keyset window (``ts>=T`` / ``ts>T``, SPEC §5): where a page starts.
_WINDOW_START = re.compile(r"(?:^|\^)[A-Za-z0-9_]+>=?([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8})")


def window_start(query: str) -> str | None:
    """The timestamp a keyset page query reads from, or ``None`` when it has no lower bound."""
    found = _WINDOW_START.search(query)
    return found.group(1) if found else None


FaultKind = Literal["status", "malformed", "empty", "truncated", "slow", "disconnect"]
_KINDS = ("status", "malformed", "empty", "truncated", "slow", "disconnect")


@dataclasses.dataclass
class Fault:
    """One injected fault.

    - ``status``: answer ``status`` at once, as a JSON error envelope, or an HTML page when
      ``html`` is set (``status=200, html=True`` is a hibernating developer instance). For 429,
      ``retry_after`` (seconds) adds a ``Retry-After`` header; ``None`` leaves it out (semaphore
      saturation).
    - ``status=202``: an empty 202, what an instance answers a request it dropped from a
      session's queue.
    - ``malformed``: 200 with a body that is not JSON.
    - ``empty``: 200 with the JSON body ``{}`` (valid JSON, no ``result`` list).
    - ``truncated``: 200 whose body stops half way (the connection closes before
      ``Content-Length`` bytes arrived).
    - ``slow``: wait ``delay`` wall-clock seconds, then answer normally.
    - ``disconnect``: close the connection without any response.

    ``window = (a, b)`` restricts a fault to page requests whose keyset window starts in
    ``[a, b)`` (a slow time range: one slice of a parallel backfill lags the others).
    ``counting`` restricts it to requests that ask for ``X-Total-Count``
    (``sysparm_no_count=false``, ``True``) or to those that do not (``False``): a count over a
    large window is what a real instance is slow at.
    """

    kind: FaultKind
    status: int = 200
    html: bool = False
    retry_after: float | None = None
    delay: float = 0.0
    times: int | None = 1
    table: str | None = None
    message: str | None = None
    window: tuple[str, str] | None = None
    counting: bool | None = None

    def matches(self, table: str, query: str, counting: bool = False) -> bool:
        """Whether this fault applies to a request for ``table`` with ``sysparm_query``
        (``counting``: the request asks for the total count)."""
        if self.table is not None and self.table != table:
            return False
        if self.counting is not None and self.counting != counting:
            return False
        if self.window is None:
            return True
        start = window_start(query)
        return start is not None and self.window[0] <= start < self.window[1]


class Faults:
    """The FIFO queue of pending faults."""

    def __init__(self) -> None:
        self._pending: list[Fault] = []

    def add(
        self,
        *,
        status: int | None = None,
        kind: FaultKind | None = None,
        html: bool = False,
        retry_after: float | None = None,
        delay: float = 0.0,
        times: int | None = 1,
        table: str | None = None,
        message: str | None = None,
        window: tuple[str, str] | None = None,
        counting: bool | None = None,
    ) -> Fault:
        """Queue a fault; ``times=None`` keeps it forever (until :meth:`clear`)."""
        if kind is None:
            if status is None:
                raise ValueError("a fault needs a status or a kind")
            kind = "status"
        if kind not in _KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        if kind == "status" and status is None:
            raise ValueError("a status fault needs a status")
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 (or None for ever)")
        fault = Fault(
            kind=kind,
            status=status if status is not None else 200,
            html=html,
            retry_after=retry_after,
            delay=delay,
            times=times,
            table=table,
            message=message,
            window=window,
            counting=counting,
        )
        self._pending.append(fault)
        return fault

    def take(self, table: str, query: str = "", counting: bool = False) -> Fault | None:
        """Consume the first pending fault matching ``table`` (and ``query``), if any."""
        for index, fault in enumerate(self._pending):
            if fault.matches(table, query, counting):
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times == 0:
                        del self._pending[index]
                return fault
        return None

    def clear(self) -> None:
        """Drop every pending fault."""
        self._pending.clear()

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def pending(self) -> list[Fault]:
        """A copy of the queue, oldest first."""
        return list(self._pending)
