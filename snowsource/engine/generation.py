"""A generation: pollers sharing one stop signal, run by one task (SPEC §1).

The supervisor runs all its tables as one generation in ``static`` mode; in ``group`` mode
every table the group gives this member is a generation of its own, so one can be released
while the others keep running. Stopping is the same either way, so it lives here once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from snowsource.core.table_status import TableState
from snowsource.engine.poller import Poller
from snowsource.runtime.deadline import Deadline, StopSignal

__all__ = ["Generation", "stop_generation"]

log = structlog.get_logger("snowsource.engine.generation")

#: The share of the shutdown deadline the pollers' drain leaves unused, and its cap. Half of it
#: lets a poller whose drain ran to its end return; then what still runs is cancelled and has
#: the other half to unwind (cancellation is prompt unless a library swallows it): the
#: cancelled pollers are awaited until the deadline itself, never after it.
CANCEL_RESERVE_SHARE = 0.1
CANCEL_RESERVE_MAX_SECONDS = 1.0


def cancel_reserve(deadline: Deadline) -> float:
    """The seconds of ``deadline`` the drain leaves for the pollers to return or be cancelled."""
    return min(deadline.remaining() * CANCEL_RESERVE_SHARE, CANCEL_RESERVE_MAX_SECONDS)


@dataclass
class Generation:
    """One set of running pollers sharing a stop signal, run by one task group."""

    stop: StopSignal
    pollers: dict[str, Poller]
    task: asyncio.Task[None]


async def stop_generation(generation: Generation, deadline: Deadline) -> list[str]:
    """Stop ``generation`` within ``deadline`` (drain acks, write final offsets, cancel what
    is left when the drain's part of it passed); one problem per table whose final offset is
    unwritten. Returns by ``deadline`` at the latest, even when a cancelled poller is slow to
    unwind (it is then reported as abandoned)."""
    reserve = cancel_reserve(deadline)
    generation.stop.request(deadline.earlier(reserve))
    task = generation.task
    await asyncio.wait({task}, timeout=_seconds(deadline.earlier(reserve / 2)))
    if not task.done():
        log.warning("the drain ran out of its time; cancelling the pollers still draining")
        task.cancel()
        await asyncio.wait({task}, timeout=_seconds(deadline))
    problems: list[str] = []
    for alias, poller in generation.pollers.items():
        status = poller.status
        if status.unfinished:
            problems.append(status.unfinished)
        elif status.state not in (TableState.STOPPED, TableState.FAILED):
            problems.append(
                f"{poller.spec.describe}: cancelled at the shutdown deadline before its "
                f"final offset was written"
            )
            log.warning("poller abandoned at the deadline", table=alias)
    return problems


def _seconds(deadline: Deadline) -> float | None:
    """A timeout for ``asyncio.wait``: what is left of ``deadline``, None when unbounded."""
    return deadline.remaining() if deadline.bounded else None
