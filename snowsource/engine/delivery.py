"""Delivering one page of a table to Kafka: the seam between deciding rows and committing them.

The poller decides a page (``core.page``), hands it here, and commits the offset of the last
record of the acknowledged prefix that :meth:`PageDelivery.deliver_page` reports. Everything
about how a page reaches Kafka lives behind that one call, so a transactional delivery can wrap
it (begin, send the page, add the offset, commit) without touching the poller's rules.

The whole page goes through ``Sink.send_page`` as per-partition batches: one future per page,
never one per record, and the constant headers and the phase header are built once per table
and page, not per row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from snowsource.adapters.sink import Headers, PageAck, PageRecordLike
from snowsource.core.page import Emit, PagePlan
from snowsource.core.table import TableSpec
from snowsource.engine.ports import Sink
from snowsource.runtime.deadline import StopSignal

_PHASE_HEADERS = {phase: ("snow.phase", phase.encode()) for phase in ("backfill", "stream")}


class PageDelivery:
    """Sends one table's pages, at most one unacknowledged at a time."""

    def __init__(
        self,
        spec: TableSpec,
        sink: Sink,
        stop: StopSignal,
        *,
        headers: Headers | None = None,
        key_value: Callable[[Emit], tuple[bytes, bytes | None]] | None = None,
        record_headers: Callable[[Emit], Headers] | None = None,
    ) -> None:
        """``headers`` (every record's, first), ``key_value`` (a record's key and value,
        ``None`` for a tombstone) and ``record_headers`` (a record's own headers, last) come
        from the stream's hooks; by default a row's id and value with the partition's
        instance and table."""
        self._topic = spec.topic
        self._sink = sink
        self._stop = stop
        # The partition is the one place that says which instance and table a record is from.
        self._headers: Headers = headers or [
            ("snow.instance", spec.partition.instance.encode()),
            ("snow.table", spec.partition.table.encode()),
        ]
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

    def records(self, plan: PagePlan) -> list[PageRecordLike]:
        """The page's records: key, value and the headers that differ per record."""
        phase = _PHASE_HEADERS.get(plan.phase) or ("snow.phase", plan.phase.encode())
        key_value = self._key_value
        if key_value is None:
            # Plain tuples: a NamedTuple per row costs a constructor call for nothing.
            return [
                (emit.id.encode(), emit.value, [("snow.timestamp", emit.ts.encode()), phase])
                for emit in plan.emits
            ]
        own = self._record_headers
        if own is None:
            return [
                (*key_value(emit), [("snow.timestamp", emit.ts.encode()), phase])
                for emit in plan.emits
            ]
        return [
            (*key_value(emit), [("snow.timestamp", emit.ts.encode()), phase, *own(emit)])
            for emit in plan.emits
        ]

    async def deliver_page(self, plan: PagePlan) -> PageAck | None:
        """Send the page and wait for its acks; ``None`` when stop's deadline passed first.

        Never raises for a Kafka error: the :class:`PageAck` says how long the acknowledged
        prefix is and why the record after it was not acknowledged.
        """
        records = self.records(plan)
        self._pending_records = len(records)
        pending = await self._sink.send_page(self._topic, records, headers=self._headers)
        self._pending = pending
        if not await self._stop.finish(pending):
            return None
        return pending.result()
