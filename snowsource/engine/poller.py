"""One table's poller: keyset sweeps from ServiceNow into Kafka, offsets after acks (SPEC §5-§7).

A poller owns everything about one table: where it stands (cursor, committed offset), its dedup
cache, its page size, and its state. It never lets one table's failure touch another: problems
that retrying cannot cure put the table in FAILED with a diagnostic and the coroutine returns.

Life of a poller ("incarnation"): read the committed offset, then sweep. A sweep fixes a
high-water mark ``HI`` and reads pages back to back until a short page; each page's rows go to
the producer at once and the next page is fetched while they are being acknowledged. Every
record carries the offset "cursor after emitting it"; a per-table committer writes the offset of
the contiguous acknowledged prefix to the offsets topic as acks arrive. A produce failure ends the
incarnation: what was acknowledged is committed, the dedup cache is emptied, and after a backoff
the table starts again from its committed offset minus the overlap, exactly like a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import structlog
from aiokafka.errors import KafkaError

from snowsource.adapters.offset_store import OffsetStore
from snowsource.adapters.servicenow import Page, ServiceNowClient
from snowsource.adapters.sink import RecordSink, is_fatal_produce_error
from snowsource.core.clock import InstanceClock
from snowsource.core.commit import CommitTracker
from snowsource.core.cursor import (
    Position,
    first_sweep_start,
    high_water_mark,
    in_window,
    is_valid_ts,
    next_sweep_start,
    page_query,
    parse_ts,
)
from snowsource.core.dedup import DedupCache, digest
from snowsource.core.errors import (
    AuthError,
    ExecutionTimeExceededError,
    KafkaSinkError,
    OffsetError,
    RateLimitedError,
    RetriableError,
    TableError,
    TableFailedError,
)
from snowsource.core.offsets_codec import (
    SourceOffset,
    cursor_id_problem,
    decode_value,
    encode_value,
    validate_offset,
)
from snowsource.core.records import RecordShaper
from snowsource.core.retry import PageSizer, RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.observability import metrics
from snowsource.runtime.aio import done_before, sleep_or_stop


class TableState(StrEnum):
    """Per-table state, as shown by ``status`` and the ``snowsource_table_state`` metric."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


@dataclass
class TableStatus:
    """What the outside world may read about a poller at any time."""

    state: TableState = TableState.STARTING
    phase: str | None = None
    cursor: Position | None = None
    committed: SourceOffset | None = None
    lag_seconds: float | None = None
    last_error: str | None = None
    rows_emitted: int = 0
    rows_suppressed: int = 0
    rows_late: int = 0
    pages: int = 0
    sweeps: int = 0
    caught_up: bool = False
    window_start: str | None = None  # where this incarnation started reading, for progress bars
    hi: str | None = None  # high-water mark of the current sweep


class _ProduceFailedError(Exception):
    """A record was not acknowledged; the table restarts internally from its committed offset."""


class _StoppingError(Exception):
    """Stop was requested while waiting: abandon the current request, drain and exit."""


@dataclass
class _SweepResult:
    last_read: Position | None
    caught_up: bool = False
    emitted: int = 0
    suppressed: int = 0
    late: int = 0
    pages: int = 0


class Poller:
    """Streams one table. ``run`` returns when stopped or FAILED; it raises only on cancel."""

    def __init__(
        self,
        spec: TableSpec,
        *,
        connector: str,
        instance: str,
        client: ServiceNowClient,
        sink: RecordSink,
        store: OffsetStore,
        clock: InstanceClock,
        retry: RetryPolicy,
        stop: asyncio.Event,
    ) -> None:
        self.spec = spec
        self._connector = connector
        self._instance = instance
        self._client = client
        self._sink = sink
        self._store = store
        self._clock = clock
        self._retry = retry
        self._stop = stop
        self._sizer = PageSizer(spec.batch_size)
        self._shaper = RecordShaper(
            display_value=spec.display_value,
            exclude_reference_link=spec.exclude_reference_link,
            timestamp_field=spec.timestamp_field,
            id_field=spec.id_field,
        )
        self._headers_base = [
            ("snow.instance", instance.encode()),
            ("snow.table", spec.name.encode()),
        ]
        self.status = TableStatus()
        self._log = structlog.get_logger("snowsource.engine.poller").bind(
            table=spec.alias, snow_table=spec.name
        )
        self._fields_param = self._fields()
        # Per-incarnation state, reset by _incarnation.
        self._tracker: CommitTracker[SourceOffset] = CommitTracker()
        self._dedup = DedupCache(spec.dedup_max_entries)
        self._wake = asyncio.Event()
        self._closing = False
        self._produce_error: BaseException | None = None
        self._inflight: list[asyncio.Future[Any]] = []
        self._committer: asyncio.Task[None] | None = None
        self._cursor = Position(spec.start_timestamp, "")
        self._late_floor = self._cursor
        self._last_submitted: SourceOffset | None = None
        self._set_state(TableState.STARTING)

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Stream until stopped; FAILED tables return with ``status.last_error`` set."""
        attempt = 0
        log = self._log
        while not self._stop.is_set():
            emitted_before = self.status.rows_emitted
            try:
                await self._incarnation()
            except _ProduceFailedError as exc:
                if self.status.rows_emitted > emitted_before:
                    attempt = 0
                delay = self._retry.next_delay(attempt)
                attempt += 1
                log.warning(
                    "produce failed; restarting the table from its committed offset",
                    error=str(exc),
                    retry_in=round(delay, 2),
                    committed=self._committed_text(),
                )
                self.status.last_error = str(exc)
                if await sleep_or_stop(self._stop, delay):
                    break
                continue
            except (TableFailedError, OffsetError, TableError, AuthError, KafkaSinkError) as exc:
                message = str(exc)
                if self.spec.describe not in message:
                    message = f"{self.spec.describe}: {message}"
                self.fail(message)
                return
            except Exception as exc:  # a bug must fail this table, never the whole process
                log.exception("unexpected error")
                self.fail(f"unexpected error: {exc!r}")
                return
            break
        self._set_state(TableState.STOPPED)
        log.info("table stopped", committed=self._committed_text())

    def fail(self, message: str) -> None:
        """Put the table in FAILED with ``message`` as its diagnostic."""
        self.status.last_error = message
        self._set_state(TableState.FAILED)
        self._log.error("table FAILED", error=message, committed=self._committed_text())

    def _set_state(self, state: TableState) -> None:
        self.status.state = state
        metrics.set_state(self.spec.alias, state.value)

    def _committed_text(self) -> str | None:
        c = self.status.committed
        return f"{c.timestamp}/{c.sys_id or '-'}/{c.phase}" if c else None

    async def _incarnation(self) -> None:
        committed = await self._load_offset()
        self.status.committed = committed
        committed_pos = Position(committed.timestamp, committed.sys_id) if committed else None
        start = first_sweep_start(
            committed_pos, self.spec.overlap_seconds, self.spec.start_timestamp
        )
        self._cursor = committed_pos or Position(self.spec.start_timestamp, "")
        # Rows below this may have been emitted before the restart (the dedup cache is empty
        # now), so only rows between it and the cursor can be told apart as late commits.
        self._late_floor = self._cursor
        self._tracker = CommitTracker()
        self._dedup = DedupCache(self.spec.dedup_max_entries)
        self._produce_error = None
        self._closing = False
        self._wake = asyncio.Event()
        self._last_submitted = None
        self._inflight = []
        self.status.cursor = self._cursor
        self.status.window_start = start.ts
        self.status.phase = committed.phase if committed else "backfill"
        metrics.set_phase(self.spec.alias, self.status.phase)
        committer = asyncio.create_task(self._commit_loop(), name=f"committer:{self.spec.alias}")
        self._committer = committer
        try:
            await self._sweeps(start)
        except _StoppingError:
            pass
        finally:
            await self._drain(committer)
        if self._produce_error is not None:
            raise _ProduceFailedError(repr(self._produce_error))

    async def _drain(self, committer: asyncio.Task[None]) -> None:
        """Wait for this table's outstanding acks, let the committer write the final offset."""
        try:
            pending = [f for f in self._inflight if not f.done()]
            if pending:
                await asyncio.wait(pending)
        finally:
            self._closing = True
            self._wake.set()
            try:
                await committer
            except asyncio.CancelledError:
                committer.cancel()
                raise

    # ------------------------------------------------------------------ offsets

    async def _load_offset(self) -> SourceOffset | None:
        spec, store, log = self.spec, self._store, self._log
        raw = store.get(spec.partition)
        if raw is None:
            foreign = store.foreign_spelling(spec.partition)
            if foreign is not None:
                # A refused offset is left exactly where it is: validate before moving it.
                self._validated(foreign.value)
                log.warning(
                    "offset stored under a non-canonical key spelling; rewriting it canonically",
                    old_key=foreign.key.decode("utf-8", "replace"),
                )
                await store.write(spec.partition, foreign.value)
                await store.write_raw(foreign.key, None)
                raw = foreign.value
        if raw is None and spec.legacy_partition != spec.partition:
            raw = await self._adopt_legacy()
        if raw is None:
            log.info("no stored offset; starting from start.timestamp", start=spec.start_timestamp)
            return None
        offset = self._validated(raw)
        log.info("resuming from stored offset", timestamp=offset.timestamp, sys_id=offset.sys_id)
        return offset

    def _validated(self, raw: bytes) -> SourceOffset:
        """The stored offset, or ``OffsetError`` naming the partition and how to reset it."""
        spec = self.spec
        try:
            value = decode_value(raw)
        except OffsetError as exc:
            # decode_value knows nothing of the partition; the table's diagnostic must name it.
            raise OffsetError(
                f"unusable offset for {spec.describe}: {exc}. snowsource never guesses at or "
                f"reuses such an offset; reset it with `snowsource offsets delete {spec.alias}` "
                f"(the table replays from its start.timestamp) or `snowsource offsets set "
                f"{spec.alias} --timestamp 'YYYY-MM-DD HH:MM:SS' --sys-id SYS_ID`"
            ) from exc
        return validate_offset(
            value, spec.partition, id_field=spec.id_field, describe=spec.describe, alias=spec.alias
        )

    async def _adopt_legacy(self) -> bytes | None:
        spec = self.spec
        legacy_raw = self._store.get(spec.legacy_partition)
        if legacy_raw is None:
            return None
        try:
            legacy = validate_offset(
                decode_value(legacy_raw),
                spec.legacy_partition,
                id_field=spec.id_field,
                describe=spec.describe,
            )
        except OffsetError as exc:
            self._log.warning("legacy offset found but not usable; ignoring it", reason=str(exc))
            return None
        adopted = replace(legacy, fingerprint=spec.partition.query_fingerprint)
        value = encode_value(adopted)
        assert value is not None
        await self._store.write(spec.partition, value)
        self._log.info(
            "adopted the Java connector's offset (legacy fingerprint) under the new partition",
            legacy_fingerprint=spec.legacy_partition.query_fingerprint,
            timestamp=adopted.timestamp,
            sys_id=adopted.sys_id,
        )
        return value

    def _on_done(
        self, tracker: CommitTracker[SourceOffset], ticket: int, future: asyncio.Future[Any]
    ) -> None:
        if tracker is not self._tracker:
            return  # an ack from before an internal restart: that incarnation is gone
        if future.cancelled():
            self._produce_error = self._produce_error or RuntimeError("produce cancelled")
        elif (exc := future.exception()) is not None:
            metrics.PRODUCE_ERRORS.labels(table=self.spec.alias).inc()
            self._produce_error = self._produce_error or exc
        else:
            tracker.ack(ticket)
        self._wake.set()

    async def _commit_loop(self) -> None:
        """Write the contiguous acknowledged prefix's offset as soon as acks arrive."""
        while True:
            offset = self._tracker.committable()
            if offset is not None:
                await self._write_offset(offset)
                continue
            if self._closing:
                return
            await self._wake.wait()
            self._wake.clear()

    async def _write_offset(self, offset: SourceOffset) -> None:
        value = encode_value(offset)
        attempt = 0
        while True:
            try:
                await self._store.write(self.spec.partition, value)
                break
            except KafkaError as exc:
                delay = self._retry.next_delay(attempt)
                attempt += 1
                self._log.warning(
                    "offset write failed; retrying", error=repr(exc), retry_in=round(delay, 2)
                )
                await asyncio.sleep(delay)
        self.status.committed = offset
        metrics.OFFSETS_COMMITTED.labels(table=self.spec.alias).inc()

    # ------------------------------------------------------------------ sweeps

    async def _sweeps(self, start: Position) -> None:
        spec, log = self.spec, self._log
        await self._ensure_clock()
        self._set_state(TableState.RUNNING)
        sweep_start = start
        while not self._stop.is_set():
            hi = high_water_mark(self._clock.now(), spec.safety_lag_seconds)
            began = time.monotonic()
            self.status.hi = hi
            result = await self._sweep(sweep_start, hi)
            self.status.sweeps += 1
            if not result.caught_up:
                return
            self.status.caught_up = True
            self._mark_stream()
            lag = max((self._clock.now() - parse_ts(hi)).total_seconds(), 0.0)
            self.status.lag_seconds = lag
            metrics.LAG_SECONDS.labels(table=spec.alias).set(lag)
            log.info(
                "sweep",
                rows_emitted=result.emitted,
                rows_suppressed=result.suppressed,
                rows_late=result.late,
                pages=result.pages,
                duration_s=round(time.monotonic() - began, 3),
                lag_s=round(lag, 1),
                phase=self.status.phase,
                cursor=f"{self._cursor.ts}/{self._cursor.id or '-'}",
                hi=hi,
            )
            sweep_start = next_sweep_start(sweep_start, result.last_read, hi, spec.overlap_seconds)
            # Entries older than the re-read window can never suppress a row again.
            self._dedup.evict_older_than(sweep_start.ts)
            if await sleep_or_stop(self._stop, spec.poll_interval):
                return

    def _mark_stream(self) -> None:
        """Caught up: make the committed offset say ``stream`` through the ordered commit path."""
        self.status.phase = "stream"
        metrics.set_phase(self.spec.alias, "stream")
        last = self._last_submitted
        if last is None:
            committed = self.status.committed
            if committed is None or committed.phase == "stream":
                return
            last = committed
        elif last.phase == "stream":
            return
        streamed = replace(last, phase="stream")
        self._last_submitted = streamed
        ticket = self._tracker.submit(streamed)
        self._tracker.ack(ticket)
        self._wake.set()

    async def _sweep(self, start: Position, hi: str) -> _SweepResult:
        result = _SweepResult(last_read=None)
        after = start
        previous: Position | None = None
        fetch: asyncio.Task[tuple[Page, int]] | None = asyncio.create_task(
            self._fetch(after, hi), name=f"fetch:{self.spec.alias}"
        )
        previous_full = False
        rewound_floor = Position(hi, "").minus(self.spec.overlap_seconds).ts
        try:
            while fetch is not None:
                page, limit = await self._await_or_stop(fetch)
                fetch = None
                rows = page.rows
                result.pages += 1
                self.status.pages += 1
                metrics.PAGES.labels(table=self.spec.alias).inc()
                if not rows:
                    if previous_full:
                        await self._check_hidden(after, hi)
                    result.caught_up = True
                    break
                positions = self._positions(rows, after, hi, previous)
                full = len(rows) >= limit
                last = positions[-1]
                if full and not self._stop.is_set():
                    # Fetch the next page while this one is produced and acknowledged.
                    fetch = asyncio.create_task(
                        self._fetch(last, hi), name=f"fetch:{self.spec.alias}"
                    )
                phase = "backfill" if full else "stream"
                await self._produce_page(rows, positions, phase, result)
                # Neither this sweep nor the next reads below min(this row, HI - overlap), so
                # older entries can never suppress anything: a long backfill stays small.
                self._dedup.evict_older_than(min(last.ts, rewound_floor))
                result.last_read = last
                previous = last
                after = last
                previous_full = full
                if not full:
                    result.caught_up = True
                else:
                    self.status.caught_up = False
                    self.status.phase = "backfill"
                    metrics.set_phase(self.spec.alias, "backfill")
                    lag = max((self._clock.now() - parse_ts(self._cursor.ts)).total_seconds(), 0)
                    self.status.lag_seconds = lag
                    metrics.LAG_SECONDS.labels(table=self.spec.alias).set(lag)
        finally:
            if fetch is not None and not fetch.done():
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await fetch
        return result

    async def _await_or_stop(self, task: asyncio.Task[tuple[Page, int]]) -> tuple[Page, int]:
        """A request in flight is abandoned at once when stop is requested."""
        if not await done_before(task, self._stop):
            raise _StoppingError
        return task.result()

    def _positions(
        self,
        rows: list[dict[str, Any]],
        after: Position,
        hi: str,
        previous: Position | None,
    ) -> list[Position]:
        """Cursor positions of a page's rows, enforcing the ordering guard (SPEC §5)."""
        spec, raw = self.spec, self._shaper.raw
        positions: list[Position] = []
        for row in rows:
            ident = raw(row, spec.id_field)
            stamp = raw(row, spec.timestamp_field)
            if not ident:
                raise TableFailedError(
                    f"{spec.describe}: a row has no {spec.id_field!r} value "
                    f"(row sys_id={raw(row, 'sys_id')!r}, "
                    f"{spec.id_field}={row.get(spec.id_field)!r}); "
                    f"check fields / ACLs of the integration user"
                )
            if stamp is None or not is_valid_ts(stamp):
                raise TableFailedError(
                    f"{spec.describe}: row {spec.id_field}={ident} has field "
                    f"{spec.timestamp_field!r} = {row.get(spec.timestamp_field)!r}, not a "
                    f"YYYY-MM-DD HH:MM:SS timestamp"
                )
            if problem := cursor_id_problem(ident, spec.id_field):
                # Emitting it would commit an offset that no restart could load (SPEC §13.1).
                raise TableFailedError(f"{spec.describe}: a row's {spec.id_field}: {problem}")
            pos = Position(stamp, ident)
            if (previous is not None and pos <= previous) or not in_window(pos, after, hi):
                raise TableFailedError(
                    f"{spec.describe}: rows out of cursor order: the instance did not honour "
                    f"ORDERBY, or the query was rewritten (row {ident} at {stamp} after "
                    f"{previous.ts + '/' + previous.id if previous else '-'}, window after "
                    f"{after.ts}/{after.id or '-'} up to {hi})"
                )
            positions.append(pos)
            previous = pos
        return positions

    async def _produce_page(
        self,
        rows: list[dict[str, Any]],
        positions: list[Position],
        phase: str,
        result: _SweepResult,
    ) -> None:
        spec, dedup, tracker = self.spec, self._dedup, self._tracker
        alias = spec.alias
        futures: list[asyncio.Future[Any]] = []
        self._inflight = futures
        fingerprint = spec.partition.query_fingerprint
        cursor = self._cursor
        caps_before = dedup.evictions_by_cap
        for row, pos in zip(rows, positions, strict=True):
            value = self._shaper.value_bytes(row)
            value_digest = digest(value)
            if not dedup.should_emit(pos.id, pos.ts, value_digest):
                result.suppressed += 1
                continue
            if self._late_floor <= pos < cursor and not dedup.contains(pos.id):
                result.late += 1
            dedup.remember(pos.id, pos.ts, value_digest)
            cursor = max(cursor, pos)
            offset = SourceOffset(
                timestamp=cursor.ts, sys_id=cursor.id, phase=phase, fingerprint=fingerprint
            )
            ticket = tracker.submit(offset)
            self._last_submitted = offset
            headers = [
                *self._headers_base,
                ("snow.timestamp", pos.ts.encode()),
                ("snow.phase", phase.encode()),
            ]
            try:
                future = await self._sink.send(spec.topic, pos.id.encode(), value, headers)
            except KafkaSinkError as exc:
                raise KafkaSinkError(f"{spec.describe}: row {pos.id}: {exc}") from exc
            except KafkaError as exc:
                if is_fatal_produce_error(exc):
                    raise KafkaSinkError(f"{spec.describe}: row {pos.id}: {exc!r}") from exc
                self._produce_error = exc
                break
            future.add_done_callback(functools.partial(self._on_done, tracker, ticket))
            futures.append(future)
            result.emitted += 1
        self._cursor = cursor
        self.status.cursor = cursor
        evicted = dedup.evictions_by_cap - caps_before
        if evicted:
            metrics.DEDUP_EVICTIONS.labels(table=alias).inc(evicted)
            self._log.warning(
                "dedup cache full: oldest entries evicted; overlap rows may be re-emitted "
                "(raise dedup.max.entries above the rows changed per overlap window)",
                evicted=evicted,
                max_entries=dedup.max_entries,
            )
        if futures:
            await asyncio.wait(futures)
        if self._committer is not None and self._committer.done():
            # The committer only ends on its own when it failed: never keep producing then.
            self._committer.result()
            raise RuntimeError("offset committer stopped unexpectedly")
        emitted = len(futures)
        self.status.rows_emitted += emitted
        self.status.rows_suppressed += result.suppressed
        self.status.rows_late += result.late
        metrics.ROWS_EMITTED.labels(table=alias).inc(emitted)
        if result.suppressed:
            metrics.ROWS_SUPPRESSED.labels(table=alias).inc(result.suppressed)
        if result.late:
            metrics.ROWS_LATE.labels(table=alias).inc(result.late)
        failure = self._produce_error
        if failure is not None:
            if is_fatal_produce_error(failure):
                raise KafkaSinkError(f"{spec.describe}: Kafka refused a record: {failure!r}")
            raise _ProduceFailedError(repr(failure))

    # ------------------------------------------------------------------ requests

    def _fields(self) -> str | None:
        spec = self.spec
        if not spec.fields:
            return None
        wanted = [*spec.fields, spec.timestamp_field, spec.id_field, "sys_mod_count"]
        return ",".join(dict.fromkeys(wanted))

    def _params(self, after: Position, hi: str, limit: int) -> dict[str, str]:
        spec = self.spec
        params = {
            "sysparm_query": page_query(
                spec.normalised_query, spec.timestamp_field, spec.id_field, after, hi
            ),
            "sysparm_limit": str(limit),
            "sysparm_display_value": self._shaper.request_display_value,
            "sysparm_exclude_reference_link": "true" if spec.exclude_reference_link else "false",
            "sysparm_no_count": "true",
            "sysparm_suppress_pagination_header": "true",
        }
        if self._fields_param:
            params["sysparm_fields"] = self._fields_param
        if spec.query_category:
            params["sysparm_query_category"] = spec.query_category
        if not spec.query_domain:
            params["sysparm_query_no_domain"] = "true"
        return params

    async def _fetch(self, after: Position, hi: str) -> tuple[Page, int]:
        limit_box: list[int] = []

        def params() -> dict[str, str]:
            limit = self._sizer.size
            limit_box.append(limit)
            return self._params(after, hi, limit)

        page = await self._request(params, sizing=True)
        return page, limit_box[-1]

    async def _ensure_clock(self) -> None:
        """HI is never computed from the local clock alone: see one ``Date`` header first."""
        if self._clock.has_observation:
            return
        spec = self.spec
        probe = {
            "sysparm_limit": "1",
            "sysparm_fields": f"{spec.timestamp_field},{spec.id_field}",
            "sysparm_no_count": "true",
            "sysparm_suppress_pagination_header": "true",
        }
        if not spec.query_domain:
            probe["sysparm_query_no_domain"] = "true"
        await self._request(lambda: probe, sizing=False)

    async def _check_hidden(self, after: Position, hi: str) -> None:
        """An empty page after a full one: are rows there that the user may not read?"""
        params = self._params(after, hi, 1)
        params["sysparm_no_count"] = "false"
        page = await self._request(lambda: params, sizing=False)
        if page.total_count and not page.rows:
            raise TableFailedError(
                f"{self.spec.describe}: {page.total_count} row(s) after "
                f"{after.ts}/{after.id or '-'} match the query but none is readable by the "
                f"integration user (row-level ACLs are applied after sysparm_limit); grant read "
                f"access to these rows or narrow the table's query"
            )

    async def _request(self, params: Callable[[], Mapping[str, str]], *, sizing: bool) -> Page:
        """One logical request with the retry policy of SPEC §9 (forever, until stop)."""
        alias, log = self.spec.alias, self._log
        attempt = 0
        while True:
            if self._stop.is_set():
                raise _StoppingError
            try:
                page = await self._client.get_page(self.spec.name, params(), label=alias)
            except ExecutionTimeExceededError as exc:
                if sizing and self._sizer.shrink():
                    log.warning(
                        "page too expensive for the instance; halving the page size",
                        page_size=self._sizer.size,
                        error=str(exc),
                    )
                    metrics.RETRIES.labels(table=alias).inc()
                    continue
                delay = self._retry.next_delay(attempt)
                error: Exception = exc
            except RateLimitedError as exc:
                delay = self._retry.next_delay(attempt, exc.retry_after)
                metrics.THROTTLED_SECONDS.labels(table=alias).inc(delay)
                error = exc
            except RetriableError as exc:
                delay = self._retry.next_delay(attempt)
                error = exc
            else:
                if sizing:
                    self._sizer.success()
                return page
            attempt += 1
            metrics.RETRIES.labels(table=alias).inc()
            log.warning(
                "ServiceNow request failed; retrying",
                error=str(error),
                status=getattr(error, "status", None),
                attempt=attempt,
                retry_in=round(delay, 2),
            )
            if await sleep_or_stop(self._stop, delay):
                raise _StoppingError
