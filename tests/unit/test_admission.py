"""Backfill admission (SPEC §15.2): the order, the slot limit, the queue positions."""

from __future__ import annotations

import asyncio
import math

from snowsource.core.admission import admission_key, grants
from snowsource.engine.admission import BackfillAdmission
from tests.polling import poll_until


def test_explicit_first_then_fewer_rows_unknown_last() -> None:
    keys = [
        admission_key("big", explicit=False, rows=900),
        admission_key("unknown", explicit=False, rows=None),
        admission_key("small", explicit=False, rows=5),
        admission_key("mine", explicit=True, rows=10_000),
        admission_key("a_tie", explicit=False, rows=5),
    ]
    assert [k.alias for k in sorted(keys)] == ["mine", "a_tie", "small", "big", "unknown"]
    assert admission_key("x", explicit=False, rows=None).rows == math.inf


def test_grants_only_free_slots_in_order() -> None:
    keys = [admission_key(n, explicit=False, rows=r) for n, r in (("a", 3), ("b", 1), ("c", 2))]
    assert [k.alias for k in grants(keys, running=1, slots=3)] == ["b", "c"]
    assert grants(keys, running=3, slots=3) == []
    assert grants(keys, running=5, slots=3) == []


async def test_at_most_slots_at_once_in_row_count_order() -> None:
    admission = BackfillAdmission(2, explicit=frozenset({"explicit"}))
    counts = {"t5": 5, "t1": 1, "t3": 3, "t4": 4, "explicit": 100}
    order: list[str] = []
    holding = 0
    peak = 0
    gates = {name: asyncio.Event() for name in (*counts, "b1", "b2")}

    async def table(name: str) -> None:
        nonlocal holding, peak

        async def rows() -> int:
            return counts.get(name, 0)

        async with admission.slot(name, rows, lambda: None):
            order.append(name)
            holding += 1
            peak = max(peak, holding)
            await gates[name].wait()
            holding -= 1

    # Two tables hold the slots (they found them free): everything after them queues.
    tasks = [asyncio.create_task(table(name)) for name in ("b1", "b2")]
    await poll_until(lambda: len(order) == 2)
    tasks += [asyncio.create_task(table(name)) for name in counts]
    await poll_until(lambda: all(admission.position(name) for name in counts))
    assert admission.position("explicit") == 1
    assert admission.position("t1") == 2
    assert admission.position("t5") == 5
    for name in ("b1", "b2", "explicit", "t1", "t3", "t4", "t5"):
        gates[name].set()
        await asyncio.sleep(0.01)
    await asyncio.gather(*tasks)
    assert order == ["b1", "b2", "explicit", "t1", "t3", "t4", "t5"]
    assert peak == 2 == admission.peak
    assert admission.running == frozenset()


async def test_release_early_and_cancel_while_queued() -> None:
    admission = BackfillAdmission(1)

    async def none() -> int | None:
        return None

    async with admission.slot("a", none, lambda: None) as release:
        queued = asyncio.create_task(_hold(admission, "b"))
        await asyncio.sleep(0.4)
        assert admission.position("b") == 1
        queued.cancel()
        await asyncio.sleep(0)
        assert admission.position("b") is None
        release()  # caught up: the slot is free before the block ends
        assert admission.running == frozenset()
        late = asyncio.create_task(_hold(admission, "c"))
        await asyncio.wait_for(late, 5)
    assert admission.running == frozenset()


async def _hold(admission: BackfillAdmission, name: str) -> None:
    async def none() -> int | None:
        return None

    async with admission.slot(name, none, lambda: None):
        pass


async def test_a_table_with_a_free_slot_starts_without_a_count() -> None:
    admission = BackfillAdmission(1, explicit=frozenset({"mine"}))
    asked: list[str] = []

    async def rows() -> int | None:
        asked.append("count")
        return 1

    queued: list[str] = []
    async with admission.slot("mine", rows, lambda: queued.append("mine")):
        assert admission.running == frozenset({"mine"})
        # The slot is taken: the next table is counted and queued.
        waiting = asyncio.create_task(_hold(admission, "found"))
        await poll_until(lambda: admission.position("found") == 1)
    await asyncio.wait_for(waiting, 5)
    assert asked == []  # _hold's own count function, not this one, was asked for "found"
    assert queued == []
    async with admission.slot("alone", rows, lambda: queued.append("alone")):
        pass
    assert asked == []
    assert queued == []
