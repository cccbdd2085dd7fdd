"""``tasks.assignment`` as one strategy object: which tables this process runs, and how.

``static`` runs the tables its ``task.id`` owns as one generation; ``group`` runs what the
consumer group gives this member, each table a generation of its own (``engine.group_owner``).
The daemon asks its mode the few things that differ (start, stop, which pollers run, where a
table runs) and never which mode it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState
from snowsource.engine.budget import PageBudget
from snowsource.engine.facade import Placement
from snowsource.engine.generation import Generation, stop_generation
from snowsource.engine.group_owner import UNASSIGNED, BuildPollers, GroupOwner, RunPollers
from snowsource.engine.poller import Poller
from snowsource.observability import metrics
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.tasks import TaskSet


class TablesMode(Protocol):
    """What differs between ``static`` and ``group``."""

    group_mode: bool

    def pollers(self) -> dict[str, Poller]: ...

    async def start(self, *, reload: bool) -> None: ...

    async def stop(self, deadline: Deadline, *, closing: bool) -> list[str]: ...

    async def add(self, alias: str, specs: list[TableSpec]) -> None: ...

    async def remove(self, alias: str, deadline: Deadline) -> list[str]: ...

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
        self._pages: PageBudget | None = None
        # Discovered tables: each a generation of its own, started and stopped alone.
        self._discovered: dict[str, list[TableSpec]] = {}
        self._extra: dict[str, Generation] = {}

    def pollers(self) -> dict[str, Poller]:
        found = dict(self._generation.pollers) if self._generation else {}
        for generation in self._extra.values():
            found.update(generation.pollers)
        return found

    async def start(self, *, reload: bool) -> None:
        """A fresh generation from the stored offsets; ``reload`` re-reads them first."""
        if self._generation is not None:
            return
        if reload:
            await self._prepare()
        self._pages = PageBudget(self._page_slots)
        self._generation = self._spawn(self._specs, "pollers")
        for alias, specs in self._discovered.items():
            self._extra[alias] = self._spawn(specs, f"pollers:{alias}")

    def _spawn(self, specs: list[TableSpec], name: str) -> Generation:
        assert self._pages is not None
        stop = StopSignal()
        pollers = self._build(specs, stop, self._pages)
        runnable = {a: p for a, p in pollers.items() if p.status.state != TableState.FAILED}
        task = self._tasks.spawn(self._run(runnable), name=name)
        return Generation(stop=stop, pollers=pollers, task=task)

    async def stop(self, deadline: Deadline, *, closing: bool) -> list[str]:
        generation, self._generation = self._generation, None
        extra, self._extra = self._extra, {}
        stopping = [g for g in (generation, *extra.values()) if g is not None]
        results = await asyncio.gather(*(stop_generation(g, deadline) for g in stopping))
        return [problem for found in results for problem in found]

    async def add(self, alias: str, specs: list[TableSpec]) -> None:
        """Run a discovered table (and its streams) as a generation of its own, beside the
        others, which are not touched (SPEC §15.2); remembered across stop and start."""
        self._discovered[alias] = specs
        if self._generation is not None and alias not in self._extra:
            self._extra[alias] = self._spawn(specs, f"pollers:{alias}")

    async def remove(self, alias: str, deadline: Deadline) -> list[str]:
        """Stop a table no longer discovered; its offsets stay where they are, its gauges go
        (it no longer runs anywhere; in a group the owner's release drops them)."""
        specs = self._discovered.pop(alias, [])
        generation = self._extra.pop(alias, None)
        problems = await stop_generation(generation, deadline) if generation is not None else []
        for spec in specs:
            metrics.forget_table(spec.alias)
        return problems

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

    async def add(self, alias: str, specs: list[TableSpec]) -> None:
        # The group decides which member runs it (every member reports what it found).
        self.owner.discovered(alias, specs)

    async def remove(self, alias: str, deadline: Deadline) -> list[str]:
        self.owner.undiscovered(alias)
        return []

    def placement(self, alias: str) -> Placement:
        return Placement(*self.owner.placement(alias))

    def busy_workers(self) -> list[str]:
        return self.owner.busy_workers()
