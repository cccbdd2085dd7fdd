"""Output topics deleted while running: one WARN per table, FAILED after a grace period.

A deleted topic does not fail a produce call: aiokafka waits for the topic to reappear in its
metadata, retries, and logs every metadata refresh. Left to that, a table stays RUNNING for good
and its log floods. The watch looks at the owned output topics every few seconds; a table whose
topic stays missing for ``MISSING_TOPIC_FAIL_AFTER_SECONDS`` is cancelled and put in FAILED,
naming the topic. Nothing unacknowledged is committed on the way: the table's offset stays at
the last row Kafka acknowledged before the deletion.

A topic that comes back within the grace period (re-created by an operator) lets the table
carry on. The daemon never re-creates a topic that disappeared while running, not even with
``topic.creation.enable: true``: the topic would hold only the rows after the committed offset,
so its consumers would silently miss the history. A restart of the table (POST restart, or a
process restart) creates it as at any start.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass, field

import structlog
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import UnknownTopicOrPartitionError

from snowsource.adapters.kafka import KafkaConnection, LiveNodeAdmin, close_fully
from snowsource.engine.poller import Poller
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

log = structlog.get_logger("snowsource.engine.topic_watch")

# Module constants, read when used, so tests can shorten them.
MISSING_TOPIC_FAIL_AFTER_SECONDS = 60.0
CHECK_INTERVAL_SECONDS = 5.0


@dataclass
class _TopicState:
    missing_since: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def set_missing(self, missing: bool) -> None:
        if missing == (self.missing_since is not None):
            return
        self.missing_since = time.monotonic() if missing else None
        # Wake whoever waits on this state, and give the next waiters a fresh event.
        self.changed.set()
        self.changed = asyncio.Event()


class TopicWatch(AsyncResource):
    """Tells, per output topic, since when it has been missing from the cluster."""

    def __init__(self, conn: KafkaConnection, topics: Collection[str]) -> None:
        self._conn = conn
        self._states = {topic: _TopicState() for topic in sorted(set(topics))}
        self._admin: AIOKafkaAdminClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        """Start looking (the topics existed when the tables started: they were checked)."""
        if not self._states:
            return
        # Kept before start(): a start that fails half-way has a connection close() must stop.
        self._admin = LiveNodeAdmin(**self._conn.client_kwargs())
        await self._admin.start()
        self._task = asyncio.create_task(self._loop(), name="topic-watch")

    async def close(self, deadline: Deadline | None = None) -> None:
        """Stop looking within ``deadline``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._admin is not None:
            seconds = (deadline or Deadline.never()).remaining(5.0)
            if not await close_fully(self._admin, within=seconds):
                log.warning("the topic watch's admin client did not close in time; abandoning it")

    def missing(self) -> set[str]:
        """The watched topics missing at the last look."""
        return {t for t, s in self._states.items() if s.missing_since is not None}

    async def refresh(self) -> None:
        """Look at the cluster now (after a restart re-created topics, for instance)."""
        if self._admin is None:
            return
        # Only "unknown topic" means deleted: an authorization or leadership error is another
        # problem, reported by the produce path, and must not fail the table as a deletion.
        errors = {
            entry["topic"]: entry["error_code"]
            for entry in await self._admin.describe_topics(list(self._states))
        }
        for topic, state in self._states.items():
            if topic in errors:
                state.set_missing(errors[topic] == UnknownTopicOrPartitionError.errno)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_SECONDS)
            try:
                await self.refresh()
            except Exception as exc:  # noqa: BLE001 - an outage is not a deleted topic
                log.debug("could not look at the output topics", error=repr(exc))

    async def gone_too_long(self, alias: str, topic: str) -> str:
        """Return a diagnostic once ``topic`` has been missing for the grace period; WARN
        once per disappearance (for ``alias``), INFO when it comes back."""
        state = self._states.get(topic)
        if state is None:
            await asyncio.Event().wait()  # not watched: never fails
        assert state is not None
        warned = False
        while True:
            changed = state.changed
            if state.missing_since is None:
                if warned:
                    log.info(
                        "output topic exists again; the table carries on", table=alias, topic=topic
                    )
                    warned = False
                await changed.wait()
                continue
            grace = MISSING_TOPIC_FAIL_AFTER_SECONDS
            left = grace - (time.monotonic() - state.missing_since)
            if not warned:
                warned = True
                log.warning(
                    "output topic does not exist any more; nothing past the last acknowledged "
                    "row is committed, and the table FAILs unless the topic is back in time",
                    table=alias,
                    topic=topic,
                    fails_in_s=round(max(left, 0.0)),
                )
            if left <= 0:
                return (
                    f"table {alias!r}: output topic {topic!r} does not exist any more (deleted "
                    f"while running; missing for {grace:g}s). Its offset stays at the last row "
                    f"Kafka acknowledged. Re-create the topic (or set topic.creation.enable: "
                    f"true), then restart the table (POST /connectors/<name>/restart, or "
                    f"restart snowsource)"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), left)


async def run_watched(alias: str, poller: Poller, watch: TopicWatch | None) -> None:
    """Run ``poller``; FAIL it if its output topic stays deleted for the grace period."""
    if watch is None:
        await poller.run()
        return
    running = asyncio.create_task(poller.run(), name=f"poll:{alias}")
    failing = asyncio.create_task(watch.gone_too_long(alias, poller.spec.topic))
    try:
        await asyncio.wait({running, failing}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        running.cancel()
        failing.cancel()
        raise
    if running.done():
        failing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await failing
        running.result()
        return
    message = failing.result()
    # A drain would wait for acknowledgements that cannot come (the producer retries records
    # for the missing topic until its request timeout): cancel until the poller has unwound.
    while not running.done():
        running.cancel()
        await asyncio.wait({running}, timeout=1.0)
    with contextlib.suppress(asyncio.CancelledError):
        running.result()
    poller.fail(message)
