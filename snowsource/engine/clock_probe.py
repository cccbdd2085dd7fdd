"""One instance-clock probe for the whole process, not one per table.

A sweep's high-water mark needs one ``Date`` header from the instance first (SPEC §5: "one
small request at start-up if need be"). The clock is shared by every table, so ten tables that
start together need one probe, not ten: with ``max.concurrent.requests`` shared by all of them,
nine extra probes would hold request slots that the tables' first pages are waiting for.

The supervisor sends the probe while Kafka start-up is still running (``StartupProbe``), so its
round trip is paid beside the offsets topic load rather than before the first page. A table
that needs the clock waits for a probe in flight; when that probe failed, the table sends its
own through its reader (retried and reported like any request), and the next table waits for
that one.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable

import structlog

from snowsource.core.clock import InstanceClock
from snowsource.core.grants import Priority
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import clock_probe_params
from snowsource.engine.snow_requests import SnowRequests
from snowsource.runtime.aio import done_before
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource
from snowsource.runtime.retrying import StoppedError

log = structlog.get_logger(__name__)

# The probe in flight per clock: whoever needs the clock meanwhile waits for it instead of
# sending another. Weak keys: a clock (and its entry) goes with the daemon that owns it.
_pending: weakref.WeakKeyDictionary[InstanceClock, asyncio.Future[None]] = (
    weakref.WeakKeyDictionary()
)


async def observed(
    clock: InstanceClock, send: Callable[[], Awaitable[object]], *, stop: asyncio.Event
) -> None:
    """Return once no probe is in flight and ``clock`` has seen a ``Date`` header, or once
    ``send`` was awaited: wait for the probe in flight, or send one. ``send``'s errors are the
    caller's; a waiter whose probe brought no ``Date`` header (it failed) sends its own. Raises
    ``StoppedError`` when ``stop`` is set while waiting for another's probe.
    """
    loop = asyncio.get_running_loop()
    while True:
        pending = _pending.get(clock)
        if pending is not None and not pending.done() and pending.get_loop() is loop:
            # Waited for even when the clock is known: a throttled probe holds everyone back
            # for the instance's Retry-After. Waiting never cancels the shared probe.
            if not await done_before(pending, stop):
                raise StoppedError("stop requested")
            continue
        if clock.has_observation:
            return
        mine: asyncio.Future[None] = loop.create_future()
        _pending[clock] = mine
        try:
            await send()
        finally:
            if _pending.get(clock) is mine:
                del _pending[clock]
            mine.set_result(None)  # the waiters look at the clock again
        return


class StartupProbe(AsyncResource):
    """The process's first ServiceNow request, sent as soon as the HTTP session is open.

    One attempt (``SnowRequests.once``), in the background: start-up never waits for it, and a
    failure only means each table probes on its own (with retries and a WARN per failed
    attempt), as it would without this probe. A 429 with ``Retry-After`` holds the whole client
    (``runtime.pause``), so the tables' first requests wait as asked without this probe's help.
    """

    def __init__(self, clock: InstanceClock, requests: SnowRequests, spec: TableSpec) -> None:
        self._clock = clock
        self._requests = requests
        self._spec = spec
        self._task: asyncio.Task[None] | None = None
        self._never = asyncio.Event()  # closing cancels the probe; nothing else stops it

    async def start(self) -> None:
        """Send the probe (returns at once)."""
        if self._task is None and not self._clock.has_observation:
            self._task = asyncio.create_task(
                observed(self._clock, self._once, stop=self._never), name="clock-probe"
            )

    async def close(self, deadline: Deadline | None = None) -> None:
        """Abandon the probe if it is still in flight. Idempotent."""
        del deadline  # cancelling a request does not wait on the network
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _once(self) -> None:
        spec = self._spec
        try:
            # A retriable failure answers None: the tables' own probes retry and report it.
            await self._requests.once(spec.name, clock_probe_params(spec), priority=Priority.STREAM)
        except Exception as exc:  # noqa: BLE001 - so do they a refusal (and FAIL on it)
            log.debug(
                "clock probe at start-up failed; the tables probe on their own", error=str(exc)
            )
