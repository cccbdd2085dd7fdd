"""The page budget bounds decoded pages across tables and always gives its slots back."""

from __future__ import annotations

import pytest

from snowsource.core.clock import InstanceClock
from snowsource.core.retry import RetryPolicy
from snowsource.engine.budget import PageBudget, page_slots
from snowsource.engine.poller import Poller, TableState
from snowsource.runtime.deadline import StopSignal
from tests.fakes import FakeStore, make_spec
from tests.unit import test_poller
from tests.unit.test_poller import Running, World, until

world = test_poller.world  # the emulator and fakes of the poller's own tests


def _poller(world: World, alias: str, budget: PageBudget, stop: StopSignal) -> Poller:

    return Poller(
        make_spec(alias, name=alias, snow_url=world.url, batch_size=10),
        client=world.client,
        sink=world.sink,
        store=FakeStore(),
        clock=InstanceClock(),
        retry=RetryPolicy(0.01, 0.05),
        stop=stop,
        pages=budget,
    )


def test_one_table_can_always_fetch_ahead() -> None:
    assert page_slots(1) == 2
    assert page_slots(8) == 16
    with pytest.raises(ValueError, match="two slots"):
        PageBudget(1)


async def test_three_tables_share_two_slots_and_every_slot_comes_back(world: World) -> None:
    tables = ("incident", "change_request", "sys_user")
    world.emu.seed(tables=tables, rows=45)
    budget = PageBudget(2)
    stop = StopSignal()
    runs = [Running(_poller(world, alias, budget, stop)) for alias in tables]
    await until(lambda: all(r.poller.status.caught_up for r in runs), timeout=20)
    # Five pages or more per table went through two shared slots: nothing was lost on the way.
    expected = {r["sys_id"].encode() for t in tables for r in world.emu.rows(t)}
    assert {r.key for r in world.sink.sent} == expected
    await runs[0].finish()
    for run in runs[1:]:
        await run.task
    assert all(r.poller.status.state == TableState.STOPPED for r in runs)
    assert budget._free._value == 2  # every slot was given back, the prefetch's included
