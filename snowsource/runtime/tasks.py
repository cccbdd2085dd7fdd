"""A set of long-lived tasks owned by one resource: the daemon's generations (SPEC §1).

``asyncio.TaskGroup`` cancels everything the moment one child fails, which is right for the
tables of one generation and wrong for the daemon: a generation that crashes (a bug) must let
the others drain their acks and write their final offsets in an orderly shutdown. A
:class:`TaskSet` keeps the structure (every task it starts is owned, named, awaited or cancelled
when the set closes; none outlives it) and hands a child's failure to the owner at once
instead of losing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

OnFailure = Callable[[BaseException], None]


class TaskSet(AsyncResource):
    """Tasks started with :meth:`spawn`; a failure goes to ``on_failure``, and closing cancels
    and awaits whatever still runs."""

    def __init__(self, on_failure: OnFailure) -> None:
        self._on_failure = on_failure
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Run ``work`` as a task of this set."""
        if self._closed:
            work.close()
            raise RuntimeError(f"the task set is closed; {name} was not started")
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self._on_failure(error)

    async def close(self, deadline: Deadline | None = None) -> None:
        """Cancel what still runs and wait for it to unwind (idempotent)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=None if deadline is None else deadline.remaining())
