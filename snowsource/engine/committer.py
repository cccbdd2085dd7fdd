"""Offsets after acks (SPEC §6): one table's committer and the one offset writer.

``OffsetWriter`` is the only path by which the engine writes the offsets topic: every write
(commits, the ``stream`` rewrite, moving a foreign key spelling, adopting a legacy offset) is
retried on transient Kafka errors, as the store tells them (``ports.KafkaErrors``: aiokafka's
``retriable`` flag), and never past the deadline it is given.

``Committer`` runs beside a poller generation: records are submitted in cursor order, acks arrive
in any order, and as soon as the contiguous acknowledged prefix grows its last offset is written.
It ends only when closed (after a drain) or by failing; the poller's task group turns a failure,
or a cancellation nobody asked for, into the table's failure at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol

import structlog

from snowsource.core.commit import CommitTracker
from snowsource.core.offsets_codec import SourceOffset, SourcePartition, encode_value
from snowsource.core.retry import RetryPolicy
from snowsource.engine.failures import FailureSource, FailureTracker
from snowsource.engine.ports import OffsetsStore
from snowsource.runtime.deadline import Deadline, StopSignal
from snowsource.runtime.retrying import Attempt, retrying


class OffsetCommits(Protocol):
    """Where a committer's offsets go: the offsets topic through :class:`OffsetWriter`, or with
    exactly-once the table's transactions (``engine.txn_delivery``), where a page's offset is
    already committed with the page."""

    async def commit(
        self, partition: SourcePartition, offset: SourceOffset, *, deadline: Deadline | None
    ) -> None: ...


class OffsetWriter:
    """Writes one table's offsets, retrying transient Kafka errors within a deadline."""

    def __init__(
        self,
        store: OffsetsStore,
        policy: RetryPolicy,
        *,
        table: str,
        failures: FailureTracker | None = None,
    ) -> None:
        self._store = store
        self._policy = policy
        self._failures = failures
        self._log = structlog.get_logger("snowsource.engine.committer").bind(table=table)

    async def write(
        self,
        partition: SourcePartition | Mapping[str, object],
        value: bytes | None,
        *,
        stop: asyncio.Event | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        """Write (``None``: delete) ``partition``'s offset; returns once Kafka acknowledged it.

        Raises ``StoppedError`` when ``stop`` is set, ``DeadlineExceededError`` past
        ``deadline``, and a non-retriable Kafka error at once.
        """
        limit = deadline or Deadline.never()
        async for attempt in retrying(
            self._policy, stop, limit, retry_if=self._store.retriable, on_retry=self._warn
        ):
            with attempt:
                async with limit.limit():
                    await self._store.write(partition, value)
        self._written()

    async def commit(
        self, partition: SourcePartition, offset: SourceOffset, *, deadline: Deadline | None
    ) -> None:
        """Write a committed offset (:class:`OffsetCommits`)."""
        await self.write(partition, encode_value(offset), deadline=deadline)

    async def delete_raw(
        self, key: bytes, *, stop: asyncio.Event | None = None, deadline: Deadline | None = None
    ) -> None:
        """Tombstone exact key bytes (a foreign spelling), retried like :meth:`write`."""
        limit = deadline or Deadline.never()
        async for attempt in retrying(
            self._policy, stop, limit, retry_if=self._store.retriable, on_retry=self._warn
        ):
            with attempt:
                async with limit.limit():
                    await self._store.write_raw(key, None)
        self._written()

    def _written(self) -> None:
        if self._failures is not None:
            self._failures.succeeded(FailureSource.OFFSETS)

    def _warn(self, attempt: Attempt, delay: float) -> None:
        if self._failures is not None:
            self._failures.failed(
                FailureSource.OFFSETS,
                f"writing the table's offset to the offsets topic failed; retrying: "
                f"{attempt.error!r}",
            )
        self._log.warning(
            "offset write failed; retrying",
            error=repr(attempt.error),
            attempt=attempt.number + 1,
            retry_in=round(delay, 2),
        )


class Committer:
    """Writes the contiguous acknowledged prefix's offset of one table generation."""

    def __init__(
        self,
        writer: OffsetCommits,
        partition: SourcePartition,
        stop: StopSignal,
        on_committed: Callable[[SourceOffset], None],
    ) -> None:
        self._writer = writer
        self._partition = partition
        self._stop = stop
        self._on_committed = on_committed
        self._tracker: CommitTracker[SourceOffset] = CommitTracker()
        self._wake = asyncio.Event()
        self._closing = False

    def submit(self, offset: SourceOffset) -> int:
        """Register a record handed to the producer, in cursor order; returns its ticket."""
        return self._tracker.submit(offset)

    def ack(self, ticket: int) -> None:
        """Kafka acknowledged the record of ``ticket``."""
        self._tracker.ack(ticket)
        self._wake.set()

    def commit_now(self, offset: SourceOffset) -> None:
        """Queue ``offset`` behind every record submitted before it (the ``stream`` rewrite)."""
        self.ack(self.submit(offset))

    def close(self) -> None:
        """Write what is committable, then end :meth:`run`."""
        self._closing = True
        self._wake.set()

    @property
    def settled(self) -> bool:
        """True when every submitted record was acknowledged and its offset written."""
        return self._tracker.in_flight == 0

    async def run(self) -> None:
        """Until closed: write each new committable offset as soon as acks make one."""
        while True:
            offset = self._tracker.committable()
            if offset is not None:
                # At shutdown the write gets what is left of the stop's deadline, no more.
                await self._writer.commit(self._partition, offset, deadline=self._stop.deadline)
                self._on_committed(offset)
                continue
            if self._closing:
                return
            await self._wake.wait()
            self._wake.clear()
