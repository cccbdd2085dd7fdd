"""Running the tables the consumer group gives this member (``tasks.assignment: group``).

Each table (with its delete stream) runs as a generation of its own, so a rebalance touches
only the tables that move. The group's answer arrives as a ``GroupView`` from the table
assignor (``adapters/group_protocol.py``); a reconciler task then, under one lock:

1. stops the pollers of the tables this member no longer has, each draining its acks and
   writing its final offset (a table that moves between live members is withheld by the plan
   until this is done, so nobody polls it twice);
2. asks the group for a new round when it held a table the plan withheld, so the table goes to
   its new owner without waiting for anything else to change;
3. re-reads the offsets topic (another member wrote the offsets of the tables it released)
   and starts the tables it gained from there.

What this member reports at every join (``running``) is what it polls, what it is still
stopping and what it was given but has not started yet: the leader must never hand out a table
that may still be polled here. A member that lost its membership stops every table at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import structlog

from snowsource.core.group_plan import GroupView, member_key
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState
from snowsource.engine.budget import PageBudget
from snowsource.engine.generation import Generation, stop_generation
from snowsource.engine.poller import Poller
from snowsource.observability import metrics
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.tasks import TaskSet

__all__ = ["GroupLink", "GroupOwner", "JoinGroup"]

log = structlog.get_logger("snowsource.engine.group_owner")

# With no news from the group, how often the reconciler looks again whether it still owes the
# group a new round (a withheld table it held): a lost rejoin request must not park a table.
_RECHECK_SECONDS = 5.0
# A table's state in REST while no member runs it: withheld during a move, or owned by a
# stopped member.
UNASSIGNED = "UNASSIGNED"

BuildPollers = Callable[[list[TableSpec], StopSignal, PageBudget], dict[str, Poller]]
RunPollers = Callable[[dict[str, Poller]], Coroutine[Any, Any, None]]


class GroupLink(Protocol):
    """What the owner needs of its group membership (``adapters.membership``)."""

    def request_rejoin(self) -> None:
        """Ask the group for a new round."""
        ...

    def lease(self) -> Callable[[], str | None]:
        """The membership's lease for tables started now: a call says why they must stop
        (None while the membership holds)."""
        ...


#: Builds the owner's membership around the owner (its assignor reports and learns from it),
#: once, in the owner's constructor: ``engine.wiring.Adapters.group_membership``.
JoinGroup = Callable[["GroupOwner"], GroupLink]


class GroupOwner:
    """Starts and stops this member's tables as the group's plan changes."""

    def __init__(
        self,
        specs: list[TableSpec],
        *,
        build: BuildPollers,
        run: RunPollers,
        reload: Callable[[], Awaitable[None]],
        tasks: TaskSet,
        page_slots: int,
        stop_timeout: float,
        join: JoinGroup,
        on_members: Callable[[int], None] = lambda members: None,
        resolve: Callable[[str], list[TableSpec] | None] | None = None,
    ) -> None:
        """``join`` builds this member's group membership around it; ``on_members`` learns how
        many members the group has at each round (they share the ServiceNow rate budget).
        ``resolve`` builds the streams of a discovered table the plan gives this member (any
        member's discovery may have found it, SPEC §15.2), or None while this member cannot
        yet (the table waits here, claimed, and is looked at again at the next reconcile)."""
        self.key = member_key(socket.gethostname(), os.getpid(), _now_ms(), uuid.uuid4().hex[:8])
        self.streams: dict[str, list[TableSpec]] = {}
        for spec in specs:
            alias = spec.base.alias if spec.base else spec.alias
            self.streams.setdefault(alias, []).append(spec)
        self._configured = sorted(self.streams)
        self._resolve = resolve
        # What this member's discovery found, reported at every join (``found``).
        self.found: set[str] = set()
        self.view: GroupView | None = None
        self._build = build
        self._run = run
        self._reload = reload
        # Generations and the reconciler run in the daemon's task set: a crash (a bug) reaches
        # the daemon, which shuts down, and none outlives it.
        self._tasks = tasks
        self._pages = PageBudget(page_slots)
        self._stop_timeout = stop_timeout
        self._on_members = on_members
        self._units: dict[str, Generation] = {}
        # Tables whose pollers are draining: still polled as far as the group is concerned.
        self._stopping: dict[str, Generation] = {}
        self._claimed: set[str] = set()
        self._enabled = False
        self._stopped_by_operator = False
        self._lost = False
        self._closing = False
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # Last: the membership's assignor reads this member's state through the above.
        self.group = join(self)

    # ----------------------------------------------------------------- what the group sees

    @property
    def aliases(self) -> list[str]:
        """Every configured table: the leader plans over these and every member's ``found``."""
        return list(self._configured)

    def discovered(self, alias: str, specs: list[TableSpec]) -> None:
        """This member's discovery found ``alias``: report it at a new round."""
        self.streams[alias] = specs
        self.found.add(alias)
        self.group.request_rejoin()

    def undiscovered(self, alias: str) -> None:
        """This member's discovery no longer finds ``alias``; the plan drops it once no
        member reports it, and its runner then stops it like any table it loses."""
        self.found.discard(alias)
        self.group.request_rejoin()

    def running(self) -> set[str]:
        """The tables that may be polled here now or soon (reported at every join)."""
        claimed = set(self._units) | set(self._stopping) | self._desired()
        self._claimed = claimed
        return claimed

    def on_view(self, view: GroupView) -> None:
        """The assignor's callback with each round's plan (runs in aiokafka's task: no wait)."""
        self.view = view
        self._on_members(max(1, len(view.members)))
        self._changed.set()

    def on_lost(self, why: str) -> None:
        """The membership's callback when this member is no longer in the group: the group
        may have given its tables to others already, so every one of them stops, even if the
        next round (which may arrive first) gives them back."""
        log.warning("consumer group membership lost; stopping every table", reason=why)
        self.view = None
        self._lost = True
        self._changed.set()

    @property
    def pollers(self) -> dict[str, Poller]:
        """The pollers of every table running here."""
        return {a: p for unit in self._units.values() for a, p in unit.pollers.items()}

    # ----------------------------------------------------------------- control

    async def enable(self) -> None:
        """Run the tables the group gives this member (start, REST resume)."""
        if self._task is None:
            log.info("group member", member=self.key)
            # A bug in the reconciler ends the process, not leave the tables unmanaged.
            self._task = self._tasks.spawn(self._reconcile_forever(), name="group-owner")
        resumed = self._stopped_by_operator
        self._enabled = True
        self._stopped_by_operator = False
        self._changed.set()
        if resumed:
            # The other members learn at the next round that these tables run again.
            self.group.request_rejoin()

    async def stop_all(self, deadline: Deadline, *, closing: bool = False) -> list[str]:
        """Stop every table here within ``deadline`` (REST stop, or shutdown when ``closing``:
        then nothing starts again). The tables stay assigned to this member meanwhile."""
        self._enabled = False
        if not closing:
            self._stopped_by_operator = True
        if closing:
            self._closing = True
            self._changed.set()
            if self._task is not None:
                await asyncio.wait({self._task}, timeout=deadline.remaining())
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        async with self._lock:
            # A drain the cancelled reconciler left behind is finished (or cancelled) here.
            leftover = list(self._stopping.values())
            problems = await self._stop(list(self._units), deadline)
            for unit in leftover:
                problems += await stop_generation(unit, deadline)
            self._stopping.clear()
        if not closing:
            # A new round tells every member's REST API that nothing runs here any more.
            self.group.request_rejoin()
        return problems

    # ----------------------------------------------------------------- what REST shows

    def active(self) -> bool:
        """False while an operator stopped this member (or it shuts down)."""
        return not self._stopped_by_operator and not self._closing

    def placement(self, alias: str) -> tuple[str | None, str]:
        """Where the group runs ``alias``: its owner's worker id (None while withheld) and
        its state as the group reports it: RUNNING, STOPPED while its owner is stopped, or
        UNASSIGNED while it waits to move."""
        view = self.view
        if view is None:
            return None, UNASSIGNED
        owner = view.owners.get(alias)
        report = view.members.get(owner) if owner is not None else None
        if report is None:
            return None, UNASSIGNED
        state = TableState.RUNNING if report.active else TableState.STOPPED
        return report.worker_id, state.value

    def busy_workers(self) -> list[str]:
        """Worker ids of the other members that were not stopped at the last round."""
        view = self.view
        if view is None:
            return []
        return sorted(
            r.worker_id
            for key, r in view.members.items()
            if key != self.key and (r.active or r.running)
        )

    # ----------------------------------------------------------------- reconciling

    def _desired(self) -> set[str]:
        if not self._enabled or self._closing or self.view is None:
            return set()
        mine = self.view.tables_of(self.key)
        return mine if self._resolve is not None else mine & set(self.streams)

    async def _reconcile_forever(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), _RECHECK_SECONDS)
            self._changed.clear()
            if self._closing:
                return
            async with self._lock:
                await self._reconcile()

    async def _reconcile(self) -> None:
        if self._lost:
            self._lost = False
            await self._release(list(self._units))
        desired = self._desired()
        losing = sorted(a for a in self._units if a not in desired)
        if losing:
            await self._release(losing)
        view = self.view
        if view is not None:
            withheld = {a for a, owner in view.owners.items() if owner is None}
            owed = withheld & self._claimed
            if owed and not owed & (set(self._units) | set(self._stopping)):
                # We held these when the leader planned; now that they are stopped, a new
                # round lets their new owner start them.
                self._claimed -= owed
                log.info("asking the group for a new round", released=sorted(owed))
                self.group.request_rejoin()
        gaining = sorted(a for a in self._desired() if a not in self._units and self._buildable(a))
        if not gaining or self._closing:
            return
        try:
            # Another member wrote the offsets of what it released after we loaded them.
            await self._reload()
        except Exception as exc:  # noqa: BLE001 - retried at the next look, like any outage
            log.warning(
                "could not re-read the offsets topic; tables not started yet",
                tables=gaining,
                error=repr(exc),
            )
            return
        # The plan may have changed while we read.
        gaining = [a for a in gaining if a in self._desired() and a not in self._units]
        if not gaining or self._closing:
            return
        for alias in gaining:
            self._start(alias)
        log.info("tables started", tables=gaining, member=self.key)

    def _buildable(self, alias: str) -> bool:
        """Whether this member knows ``alias``'s streams, resolving a table another member's
        discovery found (a table it cannot resolve yet waits, claimed, without a reload)."""
        if alias not in self.streams and self._resolve is not None:
            specs = self._resolve(alias)
            if specs is None:
                return False
            self.streams[alias] = specs
        return alias in self.streams

    def _start(self, alias: str) -> None:
        stop = StopSignal(self.group.lease())
        pollers = self._build(self.streams[alias], stop, self._pages)
        runnable = {a: p for a, p in pollers.items() if p.status.state != TableState.FAILED}
        task = self._tasks.spawn(self._run(runnable), name=f"table:{alias}")
        self._units[alias] = Generation(stop=stop, pollers=pollers, task=task)
        for stream in runnable:
            # A stream that FAILed as it was built (its topic refused) keeps that state.
            metrics.set_state(stream, TableState.RUNNING.value)

    async def _release(self, aliases: list[str]) -> None:
        """Stop tables another member now owns: their gauges go with them (the owner's are
        the ones that count), their counters stay."""
        streams = [s for a in aliases if a in self._units for s in self._units[a].pollers]
        await self._stop(aliases, Deadline.after(self._stop_timeout))
        for stream in streams:
            metrics.forget_table(stream)

    async def _stop(self, aliases: list[str], deadline: Deadline) -> list[str]:
        units = {a: self._units.pop(a) for a in aliases if a in self._units}
        self._stopping.update(units)
        results = await asyncio.gather(
            *(stop_generation(unit, deadline) for unit in units.values())
        )
        # Not in a finally: cancelled half-way, the drains stay listed for stop_all to finish.
        for alias in units:
            self._stopping.pop(alias, None)
        problems = [problem for found in results for problem in found]
        if units:
            log.info("tables released", tables=sorted(units), problems=problems, member=self.key)
        return problems


def _now_ms() -> int:
    return int(time.time() * 1000)
