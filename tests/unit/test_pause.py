"""``runtime.pause.Pause``: the gate a 429's Retry-After shuts for the whole client."""

from __future__ import annotations

import asyncio

from snowsource.runtime.pause import Pause


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_pause_runs_until_the_latest_moment_named() -> None:
    clock = FakeClock()
    pause = Pause(clock)
    assert pause.remaining() == 0
    assert pause.hold_for(2)
    clock.now += 0.5
    assert pause.remaining() == 1.5
    # A shorter pause named later does not shorten it; a longer one extends it.
    assert not pause.hold_for(1)
    assert pause.remaining() == 1.5
    assert pause.hold_for(3)
    assert pause.remaining() == 3
    clock.now += 3
    assert pause.remaining() == 0


def test_a_negative_wait_is_no_pause() -> None:
    pause = Pause(FakeClock())
    assert not pause.hold_for(-5)
    assert pause.remaining() == 0


async def test_wait_returns_at_once_when_open_and_after_the_pause_otherwise() -> None:
    pause = Pause()
    assert await pause.wait() == 0
    pause.hold_for(0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    waited = await pause.wait()
    assert waited > 0
    assert loop.time() - started >= 0.05 - 0.005  # loop timers may fire a hair early
    assert pause.remaining() == 0


async def test_a_pause_extended_while_waiting_is_waited_for_too() -> None:
    pause = Pause()
    pause.hold_for(0.02)
    waiter = asyncio.create_task(pause.wait())
    await asyncio.sleep(0)
    pause.hold_for(0.1)
    await waiter
    assert pause.remaining() == 0
