"""The sliced backfill's coordinator (SPEC §14.2): every page slot comes back, however it ends.

A page's slot of the page budget is a lease handed over with the page: from before its request
until it is produced, or dropped. Whatever ends the backfill (its end, a stop with pages read
and not produced, a record Kafka refuses while other slices have pages in flight) every slot is
back in the budget afterwards, and the table ends as it should.
"""

from __future__ import annotations

from aiokafka.errors import RecordTooLargeError

from snowsource.core.clock import InstanceClock
from snowsource.core.retry import RetryPolicy
from snowsource.core.table_status import TableState
from snowsource.engine.budget import PageBudget
from snowsource.engine.poller import Poller
from snowsource.runtime.deadline import StopSignal
from tests.fakes import FakeStore
from tests.polling import poll_until
from tests.unit import test_poller
from tests.unit.test_poller import Running, World

world = test_poller.world  # the emulator and fakes of the poller's own tests

SLOTS = 4


def _sliced(world: World, budget: PageBudget) -> Poller:
    world.emu.seed(tables=("incident",), rows=400)
    spec = world.spec(batch_size=10, backfill_slices=4)
    return Poller(
        spec,
        client=world.client,
        sink=world.sink,
        store=FakeStore(),
        clock=InstanceClock(),
        retry=RetryPolicy(0.01, 0.05),
        stop=StopSignal(),
        pages=budget,
    )


async def test_a_sliced_backfill_to_its_end_gives_every_slot_back(world: World) -> None:
    budget = PageBudget(SLOTS)
    run = Running(_sliced(world, budget))
    await poll_until(lambda: run.poller.status.caught_up, timeout=30)
    assert {r.key for r in world.sink.sent} == {
        r["sys_id"].encode() for r in world.emu.rows("incident")
    }
    await run.finish()
    assert budget.free == SLOTS


async def test_a_stop_with_pages_read_and_not_produced_gives_every_slot_back(
    world: World,
) -> None:
    budget = PageBudget(SLOTS)
    world.sink.auto_ack = False  # pages stay in production: the others wait, read, for a turn
    run = Running(_sliced(world, budget))
    await poll_until(lambda: budget.free == 0 and world.sink.pages >= 1, timeout=30)
    await run.finish(seconds=0.5)
    assert run.poller.status.state == TableState.STOPPED
    assert budget.free == SLOTS
    assert budget.waiting == 0


async def test_a_refused_record_fails_the_table_and_gives_every_slot_back(world: World) -> None:
    budget = PageBudget(SLOTS)
    world.sink.auto_ack = False
    run = Running(_sliced(world, budget))
    # Only the prefix range's page goes out before the table has an offset; the others wait.
    await poll_until(lambda: budget.free == 0 and world.sink.pages == 1, timeout=30)
    world.sink.refuse = RecordTooLargeError()  # every page after the first
    world.sink.ack_all()
    await poll_until(lambda: run.poller.status.state == TableState.FAILED, timeout=30)
    await run.task
    assert "Kafka refused the record" in (run.poller.status.last_error or "")
    assert budget.free == SLOTS
    assert budget.waiting == 0
