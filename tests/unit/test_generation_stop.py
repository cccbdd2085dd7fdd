"""Stopping a generation ends within the shutdown deadline, the cancel included (SPEC §1).

The drain gets the deadline minus a small cancel reserve; what is still running then is
cancelled and awaited only until the deadline itself. These tests time ``stop_generation``
with a monotonic clock around it, against pollers that never finish draining on their own, so
a fixed wait added after the deadline (a "cancel grace") makes them fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.core.clock import InstanceClock
from snowsource.core.outbound import Headers, PageAck, PageRecordLike
from snowsource.core.retry import RetryPolicy
from snowsource.core.table_status import TableState
from snowsource.emulator import Emulator, serve
from snowsource.engine.generation import (
    CANCEL_RESERVE_MAX_SECONDS,
    Generation,
    cancel_reserve,
    stop_generation,
)
from snowsource.engine.poller import Poller
from snowsource.engine.ports import Sink
from snowsource.runtime.deadline import Deadline, StopSignal
from tests.fakes import FakeSink, FakeStore, make_spec
from tests.polling import poll_until

T0 = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)
DEADLINE = 1.5  # shutdown.timeout.seconds of these tests
#: How late after the deadline ``stop_generation`` may return: event-loop scheduling on a
#: loaded machine, far below the 1 s a fixed grace after the deadline would add.
TOLERANCE = 0.3


class StuckSink(FakeSink):
    """A producer whose send never returns (its buffer full while no broker answers) and that,
    once cancelled, unwinds only when the test says so (a library slow to honour a cancel)."""

    def __init__(self) -> None:
        super().__init__()
        self.sending = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.unwind = asyncio.Event()

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        self.pages += 1
        self.sending.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            await self.unwind.wait()
            raise
        raise AssertionError("unreachable: the wait above never ends by itself")


@pytest.fixture
async def snow() -> AsyncIterator[tuple[str, ServiceNowClient]]:
    """The emulator's URL and a client of it, with 30 incidents."""
    emu = Emulator(seed=5, now=T0)
    emu.clock.follow_wall_clock(True)
    emu.seed(tables=("incident",), rows=30)
    async with (
        serve(emu) as url,
        ServiceNowClient(url, BasicAuth("admin", SecretStr("admin"))) as client,
    ):
        yield url, client


def _generation(snow: tuple[str, ServiceNowClient], sink: Sink) -> Generation:
    url, client = snow
    stop = StopSignal()
    poller = Poller(
        make_spec("incident", snow_url=url, batch_size=10),
        client=client,
        sink=sink,
        store=FakeStore(),
        clock=InstanceClock(),
        retry=RetryPolicy(0.01, 0.05),
        stop=stop,
    )
    task = asyncio.create_task(poller.run(), name="poller:incident")
    return Generation(stop=stop, pollers={"incident": poller}, task=task)


async def _timed_stop(generation: Generation) -> tuple[float, list[str]]:
    began = time.monotonic()
    problems = await stop_generation(generation, Deadline.after(DEADLINE))
    return time.monotonic() - began, problems


def test_the_cancel_reserve_is_a_tenth_of_the_deadline_at_most_a_second() -> None:
    assert 0.19 <= cancel_reserve(Deadline.after(2.0)) <= 0.2
    assert cancel_reserve(Deadline.after(60.0)) == CANCEL_RESERVE_MAX_SECONDS == 1.0
    assert cancel_reserve(Deadline.after(0)) == 0.0


async def test_acks_that_never_come_end_the_stop_within_the_deadline(
    snow: tuple[str, ServiceNowClient],
) -> None:
    sink = FakeSink(auto_ack=False)
    generation = _generation(snow, sink)
    await poll_until(lambda: bool(sink.unacked))
    elapsed, problems = await _timed_stop(generation)
    assert elapsed <= DEADLINE + TOLERANCE
    # The drain waited for the acks until its own part of the deadline, not less.
    assert elapsed >= DEADLINE * 0.9 - TOLERANCE
    assert generation.task.done(), problems
    assert generation.pollers["incident"].status.state == TableState.STOPPED
    assert len(problems) == 1
    assert "10 record(s) unacknowledged" in problems[0]


async def test_a_poller_slow_to_unwind_from_its_cancel_is_abandoned_at_the_deadline(
    snow: tuple[str, ServiceNowClient],
) -> None:
    sink = StuckSink()
    generation = _generation(snow, sink)
    await sink.sending.wait()
    elapsed, problems = await _timed_stop(generation)
    try:
        assert sink.cancelled.is_set()
        assert elapsed <= DEADLINE + TOLERANCE
        assert elapsed >= DEADLINE - TOLERANCE  # awaited until the deadline itself
        assert not generation.task.done()
        describe = generation.pollers["incident"].spec.describe
        assert problems == [
            f"{describe}: cancelled at the shutdown deadline before its final offset was written"
        ]
    finally:
        sink.unwind.set()
        await asyncio.gather(generation.task, return_exceptions=True)
