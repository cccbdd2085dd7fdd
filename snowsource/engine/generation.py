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

# Once the deadline passed and the pollers were cancelled, how long we still wait for them to
# unwind before abandoning them (cancellation is prompt unless a library swallows it).
CANCEL_GRACE_SECONDS = 1.0


@dataclass
class Generation:
    """One set of running pollers sharing a stop signal, run by one task group."""

    stop: StopSignal
    pollers: dict[str, Poller]
    task: asyncio.Task[None]


async def stop_generation(generation: Generation, deadline: Deadline) -> list[str]:
    """Stop ``generation`` within ``deadline`` (drain acks, write final offsets, cancel what
    is left at the deadline); one problem per table whose final offset is unwritten."""
    generation.stop.request(deadline)
    task = generation.task
    await asyncio.wait({task}, timeout=deadline.remaining())
    if not task.done():
        log.warning("shutdown deadline passed; cancelling the pollers still draining")
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)
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
