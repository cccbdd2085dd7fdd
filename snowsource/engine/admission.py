"""Backfill admission (SPEC §15.2): at most ``backfill.max.tables`` tables backfill at once.

A table that starts without an offset (or from one whose phase is ``backfill``) asks for a slot
before its first sweep and gives it back when the sweep reached its high-water mark (or when it
stops). Meanwhile it is ``QUEUED`` with its place in the queue. Streaming tables never ask.

A table that finds a free slot and nobody waiting starts at once. Every other table asks the
Aggregate API for its row count (at ``Priority.LOW``) and queues; grants wait a short settle
time after the last arrival, so tables that queue together (a discovery's batch) are admitted
in order (``core.admission``), not in the order their counts happened to come back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import structlog

from snowsource.core.admission import AdmissionKey, admission_key, grants
from snowsource.core.grants import Priority
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import scope_params
from snowsource.engine.ports import InstanceClient
from snowsource.engine.snow_requests import SnowRequests

__all__ = ["BackfillAdmission", "aggregate_count"]

_NO_RETRY = RetryPolicy(0.0, 0.0)

log = structlog.get_logger("snowsource.engine.admission")

#: Seconds after the last arrival before free slots are granted (arrivals of one start).
SETTLE_SECONDS: Final = 1.0

RowCount = Callable[[], Awaitable[int | None]]


class BackfillAdmission:
    """The process's backfill slots and their queue."""

    def __init__(self, slots: int, *, explicit: frozenset[str] = frozenset()) -> None:
        self.slots = slots
        self._explicit = explicit
        self._running: set[str] = set()
        self._waiting: dict[AdmissionKey, asyncio.Future[None]] = {}
        self._pump: asyncio.TimerHandle | None = None
        self.peak = 0

    @property
    def running(self) -> frozenset[str]:
        """Aliases holding a slot now."""
        return frozenset(self._running)

    def position(self, alias: str) -> int | None:
        """1-based place of ``alias`` in the queue, None when it does not wait."""
        for place, key in enumerate(sorted(self._waiting), start=1):
            if key.alias == alias:
                return place
        return None

    @contextlib.asynccontextmanager
    async def slot(
        self, alias: str, rows: RowCount, on_queued: Callable[[], None]
    ) -> AsyncIterator[Callable[[], None]]:
        """Hold a slot for the block; yields ``release`` to give it back early (caught up)."""
        await self._acquire(alias, rows, on_queued)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release(alias)

        try:
            yield release
        finally:
            release()

    async def _acquire(self, alias: str, rows: RowCount, on_queued: Callable[[], None]) -> None:
        explicit = alias in self._explicit
        if len(self._running) < self.slots and not self._waiting:
            # A table that finds a free slot and nobody waiting starts at once: there is no
            # queue to order it in, so no count is asked and no time is lost.
            self._admit(alias)
            return
        try:
            count = await rows()
        except Exception as exc:  # noqa: BLE001 - the count only orders the queue
            log.info("row count unavailable; the table queues last", table=alias, error=str(exc))
            count = None
        key = admission_key(alias, explicit=explicit, rows=count)
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[key] = ticket
        on_queued()
        self._schedule()
        try:
            await ticket
        except BaseException:
            self._waiting.pop(key, None)
            if ticket.done() and not ticket.cancelled():
                self._release(alias)  # granted just as it was cancelled
            raise

    def _schedule(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
        self._pump = asyncio.get_running_loop().call_later(SETTLE_SECONDS, self._grant)

    def _grant(self) -> None:
        self._pump = None
        for key in grants(list(self._waiting), len(self._running), self.slots):
            ticket = self._waiting.pop(key)
            if not ticket.done():
                self._admit(key.alias)
                ticket.set_result(None)

    def _admit(self, alias: str) -> None:
        self._running.add(alias)
        self.peak = max(self.peak, len(self._running))

    def _release(self, alias: str) -> None:
        self._running.discard(alias)
        if self._waiting:
            self._grant()


async def aggregate_count(client: InstanceClient, spec: TableSpec) -> int | None:
    """The table's row count from the Aggregate API (orders the backfill queue), at the lowest
    priority, in one attempt; None when the answer has no count."""
    params = {"sysparm_count": "true", "sysparm_query": spec.normalised_query}
    params.update(scope_params(spec.query_domain, spec.query_category))
    # Through the request path like every ServiceNow request (no retry: a hint may be missing).
    requests = SnowRequests(client, alias=spec.alias, retry=_NO_RETRY, stop=asyncio.Event())
    doc = await requests.document(f"/api/now/stats/{spec.name}", params, priority=Priority.LOW)
    try:
        return int(doc["result"]["stats"]["count"])
    except (KeyError, TypeError, ValueError):
        return None
