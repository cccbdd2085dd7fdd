"""The group owner's reconciling, with fake pollers: what starts, what stops, when it asks the
group for a new round, and that an expelled member drops everything."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from snowsource.adapters.group_protocol import GroupView, MemberReport
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState
from snowsource.engine.budget import PageBudget
from snowsource.engine.group_owner import GroupOwner
from snowsource.engine.poller import Poller
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.tasks import TaskSet
from tests.polling import poll_until

ALIASES = ["a", "b", "c"]


@dataclass
class _Status:
    state: TableState = TableState.RUNNING
    unfinished: str | None = None


@dataclass
class _Spec:
    alias: str
    base: Any = None
    describe: str = ""


@dataclass
class _Poller:
    spec: _Spec
    stop: StopSignal
    status: _Status = field(default_factory=_Status)

    async def run(self) -> None:
        await self.stop.event.wait()
        self.status.state = TableState.STOPPED


class _World:
    def __init__(self, resolve: Callable[[str], list[TableSpec] | None] | None = None) -> None:
        self.rejoins = 0
        self.reloads = 0
        self.started: list[str] = []
        self.crashes: list[BaseException] = []
        self.tasks = TaskSet(self.crashes.append)
        specs = cast("list[TableSpec]", [_Spec(alias) for alias in ALIASES])
        self.owner = GroupOwner(
            specs,
            build=self.build,
            run=self.run,
            reload=self.reload,
            tasks=self.tasks,
            page_slots=4,
            stop_timeout=5,
            join=lambda owner: self,
            resolve=resolve,
        )

    def build(
        self, specs: list[TableSpec], stop: StopSignal, pages: PageBudget
    ) -> dict[str, Poller]:
        del pages
        self.started += [s.alias for s in specs]
        return {s.alias: cast("Poller", _Poller(cast("_Spec", s), stop)) for s in specs}

    async def run(self, pollers: dict[str, Poller]) -> None:
        await asyncio.gather(*(p.run() for p in pollers.values()))

    async def reload(self) -> None:
        self.reloads += 1

    def request_rejoin(self) -> None:
        self.rejoins += 1

    def lease(self) -> Callable[[], str | None]:
        return lambda: None

    def view(self, mine: set[str], withheld: set[str] = frozenset()) -> GroupView:  # type: ignore[assignment]
        me, other = self.owner.key, "other"
        owners = {a: (None if a in withheld else me if a in mine else other) for a in ALIASES}
        return GroupView(
            owners=owners,
            members={me: MemberReport("me:1", ()), other: MemberReport("other:1", ())},
        )


async def _settle(world: _World, running: set[str]) -> None:
    await poll_until(lambda: set(world.owner.pollers) == running, timeout=5, interval=0.01)


async def test_starts_what_it_is_given_and_claims_it_before_it_runs() -> None:
    world = _World()
    await world.owner.enable()
    world.owner.on_view(world.view({"a", "b"}))
    # Claimed at once: the next join must not see these tables as free.
    assert world.owner.running() == {"a", "b"}
    await _settle(world, {"a", "b"})
    assert world.reloads == 1
    await world.owner.stop_all(Deadline.after(5), closing=True)


async def test_a_withheld_table_stops_then_the_member_asks_for_a_new_round() -> None:
    world = _World()
    await world.owner.enable()
    world.owner.on_view(world.view({"a", "b"}))
    await _settle(world, {"a", "b"})
    kept = world.owner.pollers["b"]
    world.owner.running()  # the join that the leader planned the next round from
    world.owner.on_view(world.view({"b"}, withheld={"a"}))
    await _settle(world, {"b"})
    await poll_until(lambda: world.rejoins == 1, timeout=5, interval=0.01)
    # The table that did not move kept its poller.
    assert world.owner.pollers["b"] is kept
    assert world.owner.running() == {"b"}
    await world.owner.stop_all(Deadline.after(5), closing=True)


async def test_a_table_withheld_because_another_member_runs_it_asks_nothing() -> None:
    world = _World()
    await world.owner.enable()
    world.owner.running()
    world.owner.on_view(world.view(set(), withheld={"a"}))
    owner = world.owner
    # The reconciler took the change and finished its step.
    await poll_until(
        lambda: not owner._changed.is_set() and not owner._lock.locked(), timeout=5, interval=0.01
    )
    assert world.rejoins == 0
    assert owner.pollers == {}
    await world.owner.stop_all(Deadline.after(5), closing=True)


async def test_an_expelled_member_restarts_every_table_even_if_given_them_back() -> None:
    world = _World()
    await world.owner.enable()
    world.owner.on_view(world.view({"a"}))
    await _settle(world, {"a"})
    first = world.owner.pollers["a"]
    world.owner.on_lost("session expired")
    world.owner.on_view(world.view({"a"}))
    await poll_until(lambda: world.started.count("a") == 2, timeout=5, interval=0.01)
    assert cast("_Poller", first).status.state == TableState.STOPPED
    await world.owner.stop_all(Deadline.after(5), closing=True)


async def test_operator_stop_keeps_tables_stopped_until_resume() -> None:
    world = _World()
    await world.owner.enable()
    world.owner.on_view(world.view({"a", "c"}))
    await _settle(world, {"a", "c"})
    assert await world.owner.stop_all(Deadline.after(5)) == []
    assert world.owner.pollers == {}
    assert not world.owner.active()
    assert world.rejoins == 1  # the others learn it at the next round
    world.owner.on_view(world.view({"a", "c"}))
    assert world.owner.running() == set()
    await world.owner.enable()
    await _settle(world, {"a", "c"})
    assert world.rejoins == 2
    await world.owner.stop_all(Deadline.after(5), closing=True)
    world.owner.on_view(world.view({"a", "c"}))
    assert world.owner.running() == set()
    assert world.owner.pollers == {}
    assert world.crashes == []


async def test_a_table_only_another_members_discovery_found_waits_until_it_resolves() -> None:
    # Only this member's own discovery can say how to read a discovered table (a view reads
    # by prefixed cursor fields): until then it waits, claimed, and costs no offsets reload.
    known: set[str] = set()
    asked: list[str] = []

    def resolve(alias: str) -> list[TableSpec] | None:
        asked.append(alias)
        return cast("list[TableSpec]", [_Spec(alias)]) if alias in known else None

    world = _World(resolve)
    await world.owner.enable()
    me = world.owner.key
    view = GroupView(
        owners={"a": me, "found_elsewhere": me},
        members={me: MemberReport("me:1", ())},
    )
    world.owner.on_view(view)
    await _settle(world, {"a"})
    assert "found_elsewhere" in asked
    assert world.owner.running() == {"a", "found_elsewhere"}  # claimed while it waits
    reloads = world.reloads
    known.add("found_elsewhere")
    world.owner.on_view(view)
    await _settle(world, {"a", "found_elsewhere"})
    assert world.reloads == reloads + 1
    await world.owner.stop_all(Deadline.after(5), closing=True)
