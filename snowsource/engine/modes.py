"""``tasks.assignment`` as one strategy object: which tables this process runs, and how.

``static`` runs the tables its ``task.id`` owns as one generation; ``group`` runs what the
consumer group gives this member, each table a generation of its own (``engine.group_owner``).
The daemon asks its mode the few things that differ (start, stop, which pollers run, where a
table runs) and never which mode it has.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState
from snowsource.engine.budget import PageBudget
from snowsource.engine.facade import Placement
from snowsource.engine.generation import Generation, stop_generation
from snowsource.engine.group_owner import UNASSIGNED, BuildPollers, GroupOwner, RunPollers
from snowsource.engine.poller import Poller
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.tasks import TaskSet


class TablesMode(Protocol):
    """What differs between ``static`` and ``group``."""

    group_mode: bool

    def pollers(self) -> dict[str, Poller]: ...

    async def start(self, *, reload: bool) -> None: ...

    async def stop(self, deadline: Deadline, *, closing: bool) -> list[str]: ...

    def placement(self, alias: str) -> Placement: ...

    def busy_workers(self) -> list[str]: ...


class StaticTables:
    """``tasks.assignment: static``: every owned table in one generation."""

    group_mode = False

    def __init__(
        self,
        specs: list[TableSpec],
        *,
        build: BuildPollers,
        run: RunPollers,
        prepare: Callable[[], Awaitable[None]],
        tasks: TaskSet,
        page_slots: int,
    ) -> None:
        self._specs = specs
        self._build = build
        self._run = run
        self._prepare = prepare
        self._tasks = tasks
        self._page_slots = page_slots
        self._generation: Generation | None = None

    def pollers(self) -> dict[str, Poller]:
        return dict(self._generation.pollers) if self._generation else {}

    async def start(self, *, reload: bool) -> None:
        """A fresh generation from the stored offsets; ``reload`` re-reads them first."""
        if self._generation is not None:
            return
        if reload:
            await self._prepare()
        stop = StopSignal()
        pollers = self._build(self._specs, stop, PageBudget(self._page_slots))
        runnable = {a: p for a, p in pollers.items() if p.status.state != TableState.FAILED}
        task = self._tasks.spawn(self._run(runnable), name="pollers")
        self._generation = Generation(stop=stop, pollers=pollers, task=task)

    async def stop(self, deadline: Deadline, *, closing: bool) -> list[str]:
        generation, self._generation = self._generation, None
        return await stop_generation(generation, deadline) if generation is not None else []

    def placement(self, alias: str) -> Placement:
        # Without a group a table runs in its own task's process, which REST does not know.
        return Placement(None, UNASSIGNED)

    def busy_workers(self) -> list[str]:
        return []


class GroupTables:
    """``tasks.assignment: group``: the tables the consumer group gives this member."""

    group_mode = True

    def __init__(self, owner: GroupOwner) -> None:
        self.owner = owner

    def pollers(self) -> dict[str, Poller]:
        return self.owner.pollers

    async def start(self, *, reload: bool) -> None:
        # Every table the group gives this member starts from offsets read when it arrives.
        await self.owner.enable()

    async def stop(self, deadline: Deadline, *, closing: bool) -> list[str]:
        return await self.owner.stop_all(deadline, closing=closing)

    def placement(self, alias: str) -> Placement:
        return Placement(*self.owner.placement(alias))

    def busy_workers(self) -> list[str]:
        return self.owner.busy_workers()
