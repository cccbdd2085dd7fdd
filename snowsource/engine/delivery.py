"""Delivering one page of a table to Kafka: the seam between deciding rows and committing them.

The poller decides a page (``core.page``), hands it here, and commits the offset of the last
record of the acknowledged prefix that :meth:`PageDelivery.deliver_page` reports. Everything
about how a page reaches Kafka lives behind that one call, so a transactional delivery can wrap
it (begin, send the page, add the offset, commit) without touching the poller's rules.

Both delivery guarantees sit behind :class:`TableDelivery`: :class:`PageDelivery` (at least
once, the shared producer) and ``engine.txn_delivery.TransactionalDelivery`` (exactly once), so
the poller never asks which one it has.

The whole page goes through ``Sink.send_page`` as per-partition batches: one future per page,
never one per record, and the constant headers and the phase header are built once per table
and page, not per row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from snowsource.core.outbound import (
    Headers,
    PageAck,
    PageRecordLike,
    phase_header,
    source_headers,
    timestamp_header,
)
from snowsource.core.page import Emit, PagePlan
from snowsource.core.table import TableSpec
from snowsource.engine.committer import OffsetCommits, OffsetWriter
from snowsource.engine.ports import Sink
from snowsource.runtime.deadline import StopSignal

KeyValue = Callable[[Emit], tuple[bytes, bytes | None]]
RecordHeaders = Callable[[Emit], Headers]


class TableDelivery(Protocol):
    """How one stream's pages and offsets reach Kafka, as the poller sees it."""

    #: True when a restart must rebuild the dedup cache (a failed rebuild fails the table).
    exactly_once: bool

    @property
    def unacknowledged(self) -> int: ...

    @property
    def in_flight(self) -> list[asyncio.Future[PageAck]]: ...

    def forget(self) -> None: ...

    async def begin_generation(self) -> None:
        """Before a generation reads its offset (exactly-once: fence older producers)."""

    def offsets(self, writer: OffsetWriter) -> OffsetCommits:
        """What the generation's committer writes its offsets through."""

    def records(self, plan: PagePlan) -> list[PageRecordLike]:
        """The page's records as they are sent: key, value and their own headers."""

    async def deliver_page(self, plan: PagePlan) -> PageAck | None: ...


class DeliveryFactory(Protocol):
    """Builds a stream's delivery; :class:`PageDelivery` itself is the at-least-once one."""

    def __call__(
        self,
        spec: TableSpec,
        sink: Sink,
        stop: StopSignal,
        *,
        headers: Headers | None = None,
        key_value: KeyValue | None = None,
        record_headers: RecordHeaders | None = None,
    ) -> TableDelivery: ...


class PageDelivery:
    """Sends one table's pages, at most one unacknowledged at a time (at least once)."""

    exactly_once = False

    def __init__(
        self,
        spec: TableSpec,
        sink: Sink,
        stop: StopSignal,
        *,
        headers: Headers | None = None,
        key_value: KeyValue | None = None,
        record_headers: RecordHeaders | None = None,
    ) -> None:
        """``headers`` (every record's, first), ``key_value`` (a record's key and value,
        ``None`` for a tombstone) and ``record_headers`` (a record's own headers, last) come
        from the stream's hooks; by default a row's id and value with the partition's
        instance and table."""
        self._topic = spec.topic
        self._sink = sink
        self._stop = stop
        self._headers: Headers = headers or source_headers(spec.partition)
        self._key_value = key_value
        self._record_headers = record_headers
        self._pending: asyncio.Future[PageAck] | None = None
        self._pending_records = 0

    @property
    def unacknowledged(self) -> int:
        """Records of the page in flight that Kafka has not answered yet."""
        pending = self._pending
        return self._pending_records if pending is not None and not pending.done() else 0

    @property
    def in_flight(self) -> list[asyncio.Future[PageAck]]:
        """The page's acknowledgement, while one is outstanding (for the drain to wait on)."""
        pending = self._pending
        return [pending] if pending is not None and not pending.done() else []

    def forget(self) -> None:
        """A new generation starts: an ack from the previous one means nothing to it."""
        self._pending = None
        self._pending_records = 0

    async def begin_generation(self) -> None:
        """Nothing to prepare: the shared producer is the daemon's."""

    def offsets(self, writer: OffsetWriter) -> OffsetCommits:
        """Offsets go to the offsets topic after the page's acks."""
        return writer

    def records(self, plan: PagePlan) -> list[PageRecordLike]:
        """The page's records: key, value and the headers that differ per record."""
        phase = phase_header(plan.phase)
        key_value = self._key_value
        if key_value is None:
            # Plain tuples: a NamedTuple per row costs a constructor call for nothing.
            return [
                (emit.id.encode(), emit.value, [timestamp_header(emit.ts), phase])
                for emit in plan.emits
            ]
        own = self._record_headers
        if own is None:
            return [(*key_value(emit), [timestamp_header(emit.ts), phase]) for emit in plan.emits]
        return [
            (*key_value(emit), [timestamp_header(emit.ts), phase, *own(emit)])
            for emit in plan.emits
        ]

    async def deliver_page(self, plan: PagePlan) -> PageAck | None:
        """Send the page and wait for its acks; ``None`` when stop's deadline passed first.

        Never raises for a Kafka error: the :class:`PageAck` says how long the acknowledged
        prefix is and why the record after it was not acknowledged.
        """
        if self._stop.revoked():
            return None  # another member may own the table now: this page is stale
        records = self.records(plan)
        self._pending_records = len(records)
        pending = await self._sink.send_page(self._topic, records, headers=self._headers)
        self._pending = pending
        if not await self._stop.finish(pending):
            return None
        return pending.result()
