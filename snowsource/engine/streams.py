"""What makes one stream differ from another: the poller's hooks (SPEC §13.6, §13.7).

A poller reads keyset pages and commits offsets the same way for every stream; how a stream's
rows become records, how far a sweep may read and how a failure is explained are its
:class:`StreamHooks`:

- :class:`TableHooks`: a table's own rows as upserts, in the shape of ``display.value``,
  ``value.format`` and ``value.schema``. With ``value.format: typed`` the table's columns are
  read from the dictionary when a generation starts and again when a page has a column the
  dictionary did not list.
- :class:`DeleteHooks`: a table's delete stream over ``sys_audit_delete``, one tombstone per audit
  row, never reading past the high-water mark of its table's last completed sweep.
- :class:`JournalHooks`: a table's journal stream over ``sys_journal_field`` (SPEC §14.3), each
  row with ``snow.parent_sys_id`` and ``snow.element`` headers.
- :class:`ReconcileHooks`: what a table's key sweep (``engine.reconcile``) needs of its table.

The two streams of one table share a :class:`SweepMark`, the only thing they know of each
other. ``engine.stream_hooks`` gives, per stream of a generation, how to build its hooks around
the stream's request path (``engine.snow_requests``), which its poller owns: every request a
hook makes is retried and reported there, like the stream's pages.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from snowsource.core.cursor import Position
from snowsource.core.deletes import (
    ACCESS_HINT,
    AUDIT_ID_HEADER,
    AUDIT_TABLE,
    OPERATION_HEADER,
    Rechecks,
    cap_high_water,
    superseded,
    tombstone,
)
from snowsource.core.dictionary import raw
from snowsource.core.errors import ServiceNowError
from snowsource.core.grants import Priority
from snowsource.core.journal import ELEMENT_HEADER, JOURNAL_TYPES, PARENT_HEADER, govern_entries
from snowsource.core.outbound import Headers, source_headers
from snowsource.core.page import Emit
from snowsource.core.records import RecordShaper, RegisteredShaper, TombstoneShaper, TypedShaper
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import current_rows_params, page_params
from snowsource.engine.columns import TableColumns
from snowsource.engine.delivery import DeliveryFactory, PageDelivery, TableDelivery
from snowsource.engine.ports import Sink
from snowsource.engine.schemas import TableSchemas
from snowsource.engine.snow_requests import SnowRequests
from snowsource.observability import metrics
from snowsource.runtime.aio import done_before
from snowsource.runtime.deadline import StopSignal

UPSERT = (OPERATION_HEADER, b"upsert")
# Ids per "which of these rows exist" request: a short URL however large the page.
_IDS_PER_REQUEST = 100
DELETE = (OPERATION_HEADER, b"delete")


class SweepMark:
    """The high-water mark of a table's last completed sweep, for its derived streams.

    In memory only: after a restart the delete stream and the key sweep wait for the table's
    first sweep again, because a sweep of the previous process says nothing about what this one
    emitted since.
    """

    def __init__(self) -> None:
        self.completed_hi: str | None = None
        self._advanced = asyncio.Event()

    def completed(self, hi: str) -> None:
        if self.completed_hi is None or hi > self.completed_hi:
            self.completed_hi = hi
            self._advanced.set()

    async def wait_past(self, ts: str | None, stop: asyncio.Event) -> bool:
        """Wait until a sweep completed whose HI is after ``ts`` (None: any sweep); False when
        ``stop`` was set first."""
        while not stop.is_set():
            hi = self.completed_hi
            if hi is not None and (ts is None or hi > ts):
                return True
            self._advanced.clear()
            advanced = asyncio.ensure_future(self._advanced.wait())
            if not await done_before(advanced, stop):
                advanced.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await advanced
        return False


class StreamHooks:
    """The default stream: a table's rows as they are, uncapped. Subclasses change the parts."""

    def __init__(self, spec: TableSpec, shaper: RecordShaper) -> None:
        self.spec = spec
        self.shaper = shaper
        # The partition is the one place that says which instance and table a record is from.
        self.headers: Headers = [*source_headers(spec.partition), UPSERT]
        # A record's own headers after ``snow.timestamp`` and ``snow.phase``; None: none.
        self.record_headers: Callable[[Emit], Headers] | None = None

    async def start(self) -> None:
        """Called when a generation starts, before its first sweep."""

    async def prepare(self, rows: Sequence[dict[str, Any]]) -> frozenset[str]:
        """Called for every non-empty page before its rows are shaped; the ids of rows not to
        emit (their cursor still moves past them)."""
        del rows
        return frozenset()

    def cap(self, hi: str) -> str | None:
        """The high-water mark a sweep may read up to; None: do not sweep yet."""
        return hi

    def completed(self, hi: str) -> None:
        """A sweep up to ``hi`` ended caught up, every record of it acknowledged."""

    def evict_older_than(self, ts: str) -> None:
        """The next sweep starts at ``ts``: what the stream remembers of older rows can go."""

    def key_value(self, emit: Emit) -> tuple[bytes, bytes | None]:
        """Key and value of the record for ``emit`` (``headers`` and the per-record
        ``snow.timestamp``/``snow.phase`` headers are added by the page delivery)."""
        return emit.key, emit.value

    def delivery(
        self, sink: Sink, stop: StopSignal, make: DeliveryFactory = PageDelivery
    ) -> TableDelivery:
        """The page delivery of this stream (``make``: at least once, or exactly once), its
        records shaped and headed as above."""
        return make(
            self.spec,
            sink,
            stop,
            headers=self.headers,
            key_value=self.key_value,
            record_headers=self.record_headers,
        )

    def explain(self, error: BaseException) -> str:
        """The diagnostic of an error that fails the stream."""
        return str(error)


def _shaper(spec: TableSpec, schemas: TableSchemas | None = None) -> RecordShaper:
    common: dict[str, Any] = {
        "display_value": spec.display_value,
        "exclude_reference_link": spec.exclude_reference_link,
        "timestamp_field": spec.timestamp_field,
        "id_field": spec.id_field,
    }
    if schemas is not None:
        return RegisteredShaper(**common, slot=schemas.slot)
    if spec.value_format == "typed" or spec.value_schema == "connect":
        return TypedShaper(
            **common,
            typed=spec.value_format == "typed",
            connect_envelope=spec.value_schema == "connect",
            schema_name=f"servicenow.{spec.name}",
        )
    return RecordShaper(**common)


class TableHooks(StreamHooks):
    """A table's own stream; it tells its delete stream (``mark``) where each sweep ended."""

    def __init__(
        self,
        spec: TableSpec,
        *,
        requests: SnowRequests,
        mark: SweepMark | None = None,
        schemas: TableSchemas | None = None,
    ) -> None:
        super().__init__(spec, _shaper(spec, schemas))
        self._schemas = schemas
        self._mark = mark
        self._deletes_hi: str | None = None
        self.columns = TableColumns(spec, self._typed, requests=requests)

    @property
    def _typed(self) -> TypedShaper | None:
        shaper = self.shaper
        return shaper if isinstance(shaper, TypedShaper) and shaper.typed else None

    async def start(self) -> None:
        await self.columns.start()
        typed = self._typed
        if self._schemas is not None and typed is not None:
            # Registered before the first record: a registry that is down holds the table here.
            # The typed columns are governed ones: excluded absent, hashed and masked strings.
            columns = self._schemas.initial_columns(typed.columns)
            await self._schemas.ensure(columns, typed.columns)

    async def prepare(self, rows: Sequence[dict[str, Any]]) -> frozenset[str]:
        # Governed in place before the page's values are used for anything (SPEC §15.2).
        seen = await self.columns.govern(rows)
        typed = self._typed
        if self._schemas is not None and typed is not None:
            # A new column makes a new schema version, registered before the page is shaped.
            if seen is None:
                seen = set().union(*rows)  # the union runs in C: wide pages are cheap
            await self._schemas.ensure(seen, typed.columns)
        return frozenset()

    def cap(self, hi: str) -> str | None:
        # Timestamps have whole seconds: with a safety lag under one second, a row deleted in
        # the very second of HI may have been read by this sweep just before it was deleted,
        # and its upsert sent after the tombstone. The delete stream is told one second less.
        lag = self.spec.safety_lag_seconds
        self._deletes_hi = hi if lag >= 1 else Position(hi, "").minus(1).ts
        return hi

    def completed(self, hi: str) -> None:
        if self._mark is not None and self._deletes_hi is not None:
            self._mark.completed(self._deletes_hi)

    def key_value(self, emit: Emit) -> tuple[bytes, bytes | None]:
        typed = self._typed
        if typed is not None:
            unparsed = typed.take_unparsed(emit.id)
            if unparsed:
                metrics.VALUES_UNPARSED.labels(table=self.spec.alias).inc(len(unparsed))
        return emit.key, emit.value


class DeleteHooks(StreamHooks):
    """A table's delete stream: tombstones on the table's topic, behind the table's sweeps."""

    def __init__(
        self,
        spec: TableSpec,
        *,
        mark: SweepMark,
        requests: SnowRequests,
    ) -> None:
        base = spec.base
        assert base is not None, "a delete stream's spec names its table"
        shaper = TombstoneShaper(
            display_value="false",
            exclude_reference_link=True,
            timestamp_field=spec.timestamp_field,
            id_field=spec.id_field,
            table=base.name,
        )
        super().__init__(spec, shaper)
        self._mark = mark
        self._base = base
        self._requests = requests
        self._log = structlog.get_logger("snowsource.engine.streams").bind(
            table=spec.alias, snow_table=AUDIT_TABLE
        )
        self.headers = [*source_headers(spec.partition, table=base.name), DELETE]
        self.record_headers = _audit_headers
        self._rechecks = Rechecks()

    async def start(self) -> None:
        self._rechecks.clear()
        # The stream reads nothing until its table completed a sweep, which may take hours: a
        # missing read ACL on sys_audit_delete is asked about now, so it FAILs the stream now.
        spec = self.spec
        # A page of the stream's own shape, for the very first second it could read: the
        # refusal is the same, and the instance reads (almost) nothing.
        # One attempt: the stream's own pages retry; only a refusal is worth failing early.
        start = Position(spec.start_timestamp, "")
        params = page_params(spec, start, spec.start_timestamp, 1)
        await self._requests.once(spec.name, params, priority=Priority.DERIVED)

    def cap(self, hi: str) -> str | None:
        return cap_high_water(hi, self._mark.completed_hi)

    async def prepare(self, rows: Sequence[dict[str, Any]]) -> frozenset[str]:
        """The audit rows whose deleted row exists again (``core.deletes.superseded``); each
        audit row is asked about once, not on every sweep that re-reads it (``Rechecks``)."""
        stones = [tombstone(row, self._base.name) for row in rows]
        unasked = self._rechecks.unasked(stones)
        keys = sorted({stone.key for stone in unasked})
        current: set[str] = set()
        for start in range(0, len(keys), _IDS_PER_REQUEST):
            current |= await self._existing(keys[start : start + _IDS_PER_REQUEST])
        skip = superseded(unasked, current)
        self._rechecks.answered(unasked, skip)
        if skip:
            self._log.info(
                "deleted rows exist again (re-created with the same id): their tombstones are "
                "left out, so the re-created row's upsert stays their last record",
                documentkeys=sorted({s.key for s in unasked if s.audit_id in skip}),
            )
        return self._rechecks.superseded(stones)

    def evict_older_than(self, ts: str) -> None:
        self._rechecks.evict_older_than(ts)

    async def _existing(self, keys: list[str]) -> set[str]:
        base = self._base
        page = await self._requests.get(
            base.name,
            current_rows_params(base, keys),
            priority=Priority.DERIVED,
            asking="whether deleted rows exist again",
        )
        return {raw(row, base.id_field) for row in page.rows}

    def key_value(self, emit: Emit) -> tuple[bytes, bytes | None]:
        # TombstoneShaper.value_bytes is the deleted row's key; the record's value is null.
        return emit.value, None

    def explain(self, error: BaseException) -> str:
        if isinstance(error, ServiceNowError) and error.status == 403:
            return f"{error}; {ACCESS_HINT}"
        return str(error)


def _audit_headers(emit: Emit) -> Headers:
    # The delete stream's row id is the audit row's sys_id: a restart's dedup rebuild reads it
    # back from here, since the record's key is the deleted row's documentkey.
    return [(AUDIT_ID_HEADER, emit.id.encode())]


class JournalHooks(StreamHooks):
    """A table's journal stream: each ``sys_journal_field`` row as it is, on ``<topic>.journal``,
    with the record it belongs to and the field it was written in as headers."""

    def __init__(self, spec: TableSpec, schemas: TableSchemas | None = None) -> None:
        super().__init__(spec, _shaper(spec, schemas))
        self._schemas = schemas
        self._parents: dict[str, Headers] = {}
        self.record_headers = self._journal_headers

    async def start(self) -> None:
        if self._schemas is not None:
            # A fixed schema (SPEC §15.1), registered under the journal topic's subject.
            await self._schemas.ensure((), JOURNAL_TYPES)

    async def prepare(self, rows: Sequence[dict[str, Any]]) -> frozenset[str]:
        # Shaped values are bytes; the page's rows are where element_id and element are read.
        self._parents = {
            raw(row, "sys_id"): [
                (PARENT_HEADER, raw(row, "element_id").encode()),
                (ELEMENT_HEADER, raw(row, "element").encode()),
            ]
            for row in rows
        }
        # The table's governance holds for its comments and work notes too.
        base = self.spec.base
        if base is None:
            return frozenset()
        return govern_entries(rows, base.governance)

    def key_value(self, emit: Emit) -> tuple[bytes, bytes | None]:
        shaper = self.shaper
        if isinstance(shaper, RegisteredShaper):
            # Taken, so the shaper's per-row entries never pile up; counted like the table's.
            unparsed = shaper.take_unparsed(emit.id)
            if unparsed:
                metrics.VALUES_UNPARSED.labels(table=self.spec.alias).inc(len(unparsed))
        return emit.key, emit.value

    def _journal_headers(self, emit: Emit) -> Headers:
        return self._parents.get(emit.id, [])


class ReconcileHooks(StreamHooks):
    """What a table's key sweep shares with its table: the mark of the table's sweeps."""

    def __init__(self, spec: TableSpec, *, mark: SweepMark) -> None:
        super().__init__(
            spec,
            RecordShaper(
                display_value="false",
                exclude_reference_link=True,
                timestamp_field=spec.timestamp_field,
                id_field=spec.id_field,
            ),
        )
        self.mark = mark
