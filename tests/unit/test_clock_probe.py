"""One instance-clock probe for the whole process: tables that start together share it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from snowsource.core.clock import InstanceClock
from snowsource.engine.clock_probe import observed
from snowsource.runtime.retrying import StoppedError

DATE = format_datetime(datetime(2026, 9, 29, 7, 30, tzinfo=UTC), usegmt=True)


class Instance:
    """Answers probes after ``release`` is set; each answer carries a Date header, or fails."""

    def __init__(self, clock: InstanceClock) -> None:
        self.clock = clock
        self.sent = 0
        self.release = asyncio.Event()
        self.fail_next = False

    async def probe(self) -> None:
        self.sent += 1
        await self.release.wait()
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("instance unreachable")
        self.clock.observe_date_header(DATE)


async def test_tables_starting_together_send_one_probe() -> None:
    clock = InstanceClock()
    instance = Instance(clock)
    stop = asyncio.Event()
    tables = [asyncio.create_task(observed(clock, instance.probe, stop=stop)) for _ in range(10)]
    await asyncio.sleep(0)
    assert instance.sent == 1
    instance.release.set()
    await asyncio.gather(*tables)
    assert instance.sent == 1
    assert clock.has_observation
    # Once the clock is known, nobody probes again.
    await observed(clock, instance.probe, stop=stop)
    assert instance.sent == 1


async def test_a_failed_probe_is_the_senders_error_and_the_next_table_sends_its_own() -> None:
    clock = InstanceClock()
    instance = Instance(clock)
    instance.fail_next = True
    stop = asyncio.Event()
    first = asyncio.create_task(observed(clock, instance.probe, stop=stop))
    await asyncio.sleep(0)
    second = asyncio.create_task(observed(clock, instance.probe, stop=stop))
    await asyncio.sleep(0)
    assert instance.sent == 1
    instance.release.set()
    with pytest.raises(ConnectionError):
        await first
    await second
    assert instance.sent == 2
    assert clock.has_observation


async def test_a_waiter_that_is_stopped_leaves_without_cancelling_the_probe() -> None:
    clock = InstanceClock()
    instance = Instance(clock)
    sender = asyncio.create_task(observed(clock, instance.probe, stop=asyncio.Event()))
    await asyncio.sleep(0)
    stop = asyncio.Event()
    waiter = asyncio.create_task(observed(clock, instance.probe, stop=stop))
    await asyncio.sleep(0)
    stop.set()
    with pytest.raises(StoppedError):
        await waiter
    assert not sender.done()
    instance.release.set()
    await sender
    assert clock.has_observation
    assert instance.sent == 1


async def test_a_probe_without_a_date_header_does_not_loop() -> None:
    clock = InstanceClock()
    sent = 0

    async def no_date() -> None:
        nonlocal sent
        sent += 1

    await observed(clock, no_date, stop=asyncio.Event())
    assert sent == 1
    assert not clock.has_observation
