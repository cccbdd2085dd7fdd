"""One table's poller: keyset sweeps from ServiceNow into Kafka, offsets after acks (SPEC §5-§7).

A poller owns everything about one table: where it stands (cursor, committed offset), its dedup
cache, its page size, and its state. It never lets one table's failure touch another: problems
that retrying cannot cure put the table in FAILED with a diagnostic and ``run`` returns.

Life of a poller, top to bottom in this module:

1. ``run`` repeats *generations* until stopped. A generation reads the committed offset (moving
   a foreign key spelling or a legacy offset first), then sweeps, with its committer beside it in
   one ``asyncio.TaskGroup``: a committer that fails or is cancelled ends the generation at once.
2. A sweep fixes a high-water mark ``HI`` and reads pages back to back until a short page. The
   next page is fetched while the current one is acknowledged: at most one page of records per
   table is unacknowledged. What to emit is decided by ``core.page``; every record carries the
   offset "cursor after emitting it", and the committer writes the contiguous acknowledged
   prefix's offset as acks arrive.
3. Stop (or a produce failure) drains: wait for the outstanding acks and the final offset write,
   within the stop's deadline. A produce failure then restarts the table from its committed
   offset minus the overlap after a backoff, exactly like a process restart.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

import structlog
from aiokafka.errors import KafkaError

from snowsource.adapters.servicenow import Page
from snowsource.adapters.sink import PageAck
from snowsource.core.clock import InstanceClock
from snowsource.core.cursor import (
    Position,
    first_sweep_start,
    high_water_mark,
    next_sweep_start,
    parse_ts,
)
from snowsource.core.dedup import DedupCache
from snowsource.core.errors import (
    AuthError,
    KafkaSinkError,
    OffsetError,
    TableError,
    TableFailedError,
)
from snowsource.core.offsets_codec import SourceOffset
from snowsource.core.page import PagePlan, page_positions, plan_page
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.engine import failures
from snowsource.engine.budget import PageBudget
from snowsource.engine.committer import Committer, CommitterStoppedError, OffsetWriter
from snowsource.engine.delivery import DeliveryFactory, PageDelivery
from snowsource.engine.failures import FailureSource, FailureTracker
from snowsource.engine.ports import OffsetsStore, PageSource, Sink
from snowsource.engine.reader import TableReader
from snowsource.engine.resume import OutputTail, load_offset, rebuild_dedup
from snowsource.engine.slices import SlicedBackfill, SliceTools
from snowsource.engine.streams import StreamHooks, TableHooks
from snowsource.observability import metrics
from snowsource.runtime.aio import done_before, first_error, sleep_or_stop
from snowsource.runtime.deadline import StopSignal
from snowsource.runtime.retrying import DeadlineExceededError, StoppedError


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
    # Retried errors too, until what failed works again (``engine.failures``).
    consecutive_failures: int = 0
    failing_since: datetime | None = None
    rows_emitted: int = 0
    rows_suppressed: int = 0
    rows_late: int = 0
    pages: int = 0
    sweeps: int = 0
    caught_up: bool = False
    window_start: str | None = None  # where this generation started reading, for progress bars
    backfill: SlicedBackfill | None = None  # the sliced backfill running now (SPEC §14.2)
    hi: str | None = None  # high-water mark of the current sweep
    # Set when a drain ended before every acknowledged offset was written (deadline, outage).
    unfinished: str | None = None


class _ProduceFailedError(Exception):
    """A record was not acknowledged; the table restarts internally from its committed offset."""


# Errors that retrying cannot cure: the table goes to FAILED with the message.
_FATAL = (
    TableFailedError,
    OffsetError,
    TableError,
    AuthError,
    KafkaSinkError,
    CommitterStoppedError,
)


@dataclass
class _SweepResult:
    last_read: Position | None = None
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
        client: PageSource,
        sink: Sink,
        store: OffsetsStore,
        clock: InstanceClock,
        retry: RetryPolicy,
        stop: StopSignal,
        hooks: StreamHooks | None = None,
        pages: PageBudget | None = None,
        tail: OutputTail | None = None,
        delivery: DeliveryFactory = PageDelivery,
    ) -> None:
        self.spec = spec
        self._pages = pages
        self._sink = sink
        self._tail = tail
        self._store = store
        self.status = TableStatus()
        self._failures = FailureTracker(self.status, spec.alias)
        self._writer = OffsetWriter(store, retry, table=spec.alias, failures=self._failures)
        self._clock = clock
        self._retry = retry
        self._stop = stop
        # What differs between a table's stream and its delete stream: shaping, HI cap.
        self._hooks = hooks or TableHooks(spec, client=client, retry=retry, stop=stop.event)
        self._shaper = self._hooks.shaper
        self._delivery = self._hooks.delivery(sink, stop, delivery)
        self._deliveries = functools.partial(self._hooks.delivery, sink, stop, delivery)
        self._log = structlog.get_logger("snowsource.engine.poller").bind(
            table=spec.alias, snow_table=spec.name
        )
        self._reader = TableReader(
            spec, client, retry=retry, stop=stop.event, log=self._log, failures=self._failures
        )
        # Per-generation state, set by _begin.
        self._committer: Committer | None = None
        self._dedup = DedupCache(spec.dedup_max_entries)
        self._cursor = Position(spec.start_timestamp, "")
        self._late_floor = self._cursor
        self._last_submitted: SourceOffset | None = None
        self._slice = False  # the generation's first sweep is a sliced backfill
        self._ending = False
        self._commit_failure: BaseException | None = None
        self._set_state(TableState.STARTING)

    # ------------------------------------------------------------------ 1. generations

    async def run(self) -> None:
        """Stream until stopped; FAILED tables return with ``status.last_error`` set."""
        attempt = 0
        while not self._stop.is_set():
            emitted_before = self.status.rows_emitted
            try:
                await self._generation()
            except _ProduceFailedError as exc:
                if self.status.rows_emitted > emitted_before:
                    attempt = 0
                delay = self._retry.next_delay(attempt)
                attempt += 1
                self._log.warning(
                    "produce failed; restarting the table from its committed offset",
                    error=str(exc),
                    retry_in=round(delay, 2),
                    committed=self._committed_text(),
                )
                self._failures.failed(
                    FailureSource.KAFKA,
                    f"{self.spec.describe}: producing to topic {self.spec.topic} failed; "
                    f"restarting from the committed offset: {exc}",
                )
                if await sleep_or_stop(self._stop.event, delay):
                    break
                continue
            except (StoppedError, DeadlineExceededError):
                # Also an offset write that ran out of the stop's deadline: the drain says so.
                break
            except _FATAL as exc:
                self.fail(self._named(self._hooks.explain(exc)))
                return
            except KafkaError as exc:
                self.fail(
                    f"{self.spec.describe}: writing its offset failed and retrying cannot "
                    f"help: {exc!r}; check the ACLs and configuration of the offsets topic"
                )
                return
            except Exception as exc:  # noqa: BLE001 - a bug fails this table, never the process
                self._log.exception("unexpected error")
                self.fail(f"unexpected error: {exc!r}")
                return
            break
        self._set_state(TableState.STOPPED)
        self._log.info("table stopped", committed=self._committed_text())

    def fail(self, message: str) -> None:
        """Put the table in FAILED with ``message`` as its diagnostic."""
        self._failures.fatal(message)
        self._set_state(TableState.FAILED)
        self._log.error("table FAILED", error=message, committed=self._committed_text())

    async def _generation(self) -> None:
        """One incarnation of the table: load the offset, sweep beside a committer, drain."""
        await self._delivery.begin_generation()
        committed = await load_offset(
            self.spec, self._store, self._writer, stop=self._stop.event, log=self._log
        )
        start = self._begin(committed)
        await rebuild_dedup(
            self.spec,
            self._tail,
            committed,
            self._dedup,
            written_ms=self._store.written_at(self.spec.partition),
            moved_back=self._store.moved_back(self.spec.partition),
            stop=self._stop.event,
            retry=self._retry,
            required=self._delivery.exactly_once,
            log=self._log,
        )
        committer = self._committer
        assert committer is not None
        try:
            async with asyncio.TaskGroup() as group:
                committing = group.create_task(
                    self._commit(committer), name=f"committer:{self.spec.alias}"
                )
                try:
                    await self._sweeps(start)
                except StoppedError:
                    pass
                finally:
                    await self._drain(committer, committing)
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None

    def _begin(self, committed: SourceOffset | None) -> Position:
        """Fresh per-generation state, exactly like a process restart; where reading starts."""
        spec, status = self.spec, self.status
        committed_pos = Position(committed.timestamp, committed.sys_id) if committed else None
        start = first_sweep_start(committed_pos, spec.overlap_seconds, spec.start_timestamp)
        self._cursor = committed_pos or Position(spec.start_timestamp, "")
        # Rows below this may have been emitted before the restart (the dedup cache is empty
        # now), so only rows between it and the cursor can be told apart as late commits.
        self._late_floor = self._cursor
        self._dedup = DedupCache(spec.dedup_max_entries)
        offsets = self._delivery.offsets(self._writer)
        self._committer = Committer(offsets, spec.partition, self._stop, self._committed)
        self._last_submitted = None
        # A table caught up before resumes with one pager: slicing its overlap gains nothing.
        self._slice = spec.backfill_slices > 1 and (
            committed is None or committed.phase == "backfill"
        )
        self._delivery.forget()
        self._ending = False
        self._commit_failure = None
        status.committed = committed
        status.cursor = self._cursor
        status.window_start = start.ts
        status.phase = committed.phase if committed else "backfill"
        status.caught_up = False
        status.lag_seconds = None
        status.hi = None
        status.unfinished = None
        metrics.set_phase(spec.alias, status.phase)
        return start

    async def _commit(self, committer: Committer) -> None:
        """The committer's task: it may end only because the drain closed it."""
        try:
            await committer.run()
        except asyncio.CancelledError:
            if self._ending:
                raise
            raise CommitterStoppedError(
                "the offset committer was cancelled; nothing would be committed any more"
            ) from None
        except DeadlineExceededError as exc:
            if not self._stop.is_set():
                raise
            # Stopping, and the offsets topic could not be written in time: not a failure of
            # the table, but the drain must report the missing final offset.
            self._commit_failure = exc
            return
        if not self._ending:
            raise CommitterStoppedError("the offset committer ended unexpectedly")

    async def _drain(self, committer: Committer, committing: asyncio.Task[None]) -> None:
        """Wait for the outstanding acks and the final offset write, within the stop deadline."""
        self._ending = True
        if not committing.done():  # else the committer failed and the group reports why
            await self._stop.finish(*self._delivery.in_flight)
            committer.close()
            if not await self._stop.finish(committing):
                committing.cancel()
        unacked = self._delivery.unacknowledged
        failed = self._commit_failure or (
            committing.done() and not committing.cancelled() and committing.exception()
        )
        complete = committing.done() and not committing.cancelled() and not failed
        if self._stop.is_set() and not (complete and unacked == 0 and committer.settled):
            if failed:
                why = f"offset write failed: {failed}"
            elif not complete:
                why = "offsets topic write still pending"
            else:
                why = "acknowledged records without a written offset"
            self.status.unfinished = (
                f"{self.spec.describe}: the final offset was not written within the shutdown "
                f"deadline ({unacked} record(s) unacknowledged; {why}); the table resumes from "
                f"{self._committed_text() or 'its start.timestamp'}"
            )
            self._log.warning("drain incomplete", reason=self.status.unfinished)

    def _committed(self, offset: SourceOffset) -> None:
        self.status.committed = offset
        metrics.OFFSETS_COMMITTED.labels(table=self.spec.alias).inc()

    # ------------------------------------------------------------------ 2. sweeps

    async def _sweeps(self, start: Position) -> None:
        spec = self.spec
        await self._reader.ensure_clock(self._clock)
        await self._hooks.start()
        self._set_state(TableState.RUNNING)
        sweep_start = start
        while not self._stop.is_set():
            hi = self._hooks.cap(high_water_mark(self._clock.now(), spec.safety_lag_seconds))
            if hi is None:  # a delete stream whose table has not completed a sweep yet
                if await sleep_or_stop(self._stop.event, spec.poll_interval):
                    return
                continue
            began = time.monotonic()
            self.status.hi = hi
            if self._slice:
                sweep_start = await self._sliced(sweep_start, hi)
                continue
            result = await self._sweep(sweep_start, hi)
            self._failures.succeeded(FailureSource.KAFKA)  # everything read was acknowledged
            self.status.sweeps += 1
            if not result.caught_up:
                return
            self.status.caught_up = True
            self._hooks.completed(hi)
            self._mark_stream()
            lag = max((self._clock.now() - parse_ts(hi)).total_seconds(), 0.0)
            self._set_lag(lag)
            self._log.info(
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
            if await sleep_or_stop(self._stop.event, spec.poll_interval):
                return

    async def _sweep(self, start: Position, hi: str) -> _SweepResult:
        """Pages back to back from ``start`` up to ``hi`` until a short page."""
        spec = self.spec
        result = _SweepResult()
        after, previous, previous_full = start, None, False
        rewound_floor = Position(hi, "").minus(spec.overlap_seconds).ts
        fetch: asyncio.Task[tuple[Page, int]] | None = self._prefetch(after, hi)
        holding = False  # this page's slot of the page budget, given back once it is produced
        try:
            while fetch is not None:
                if holding:
                    self._release_page()
                    holding = False
                page, limit = await self._page_of(fetch)
                fetch = None
                holding = True
                result.pages += 1
                self.status.pages += 1
                metrics.PAGES.labels(table=spec.alias).inc()
                rows = page.rows
                if not rows:
                    if previous_full:
                        await self._reader.check_hidden(after, hi)
                    result.caught_up = True
                    break
                await self._hooks.prepare(rows)
                positions = page_positions(
                    spec, self._shaper, rows, after=after, hi=hi, previous=previous
                )
                full = len(rows) >= limit
                last = positions[-1]
                if full and not self._stop.is_set():
                    fetch = self._prefetch(Position(*last), hi)
                phase = "backfill" if full else "stream"
                # Neither this sweep nor the next reads below min(this row, HI - overlap), so
                # rows older than that need no dedup entry: a long backfill stays small.
                keep_from = min(last[0], rewound_floor)
                plan = plan_page(
                    spec,
                    self._shaper,
                    rows,
                    positions,
                    phase=phase,
                    cursor=self._cursor,
                    late_floor=self._late_floor,
                    dedup=self._dedup,
                    keep_from=keep_from,
                )
                del page, rows, positions  # acks take a while: meanwhile hold only the values
                await self._produce(plan, result)
                self._failures.succeeded(FailureSource.KAFKA)
                self._dedup.evict_older_than(keep_from)
                assert plan.last is not None
                result.last_read = previous = after = plan.last
                previous_full = full
                if not full:
                    result.caught_up = True
                else:
                    self.status.caught_up = False
                    self.status.phase = "backfill"
                    metrics.set_phase(spec.alias, "backfill")
                    lag = (self._clock.now() - parse_ts(self._cursor.ts)).total_seconds()
                    self._set_lag(max(lag, 0.0))
                del plan  # not held while this table waits for its next page (and a slot)
        finally:
            if holding:
                self._release_page()
            if fetch is not None:
                fetch.cancel()
                await asyncio.gather(fetch, return_exceptions=True)
                if not fetch.cancelled() and fetch.exception() is None:
                    self._release_page()  # it arrived before the cancel: nobody reads it
        return result

    async def _sliced(self, start: Position, hi: str) -> Position:
        """The backfill read by several slices (``engine.slices``); where the next sweep starts.

        No wait and no ``stream`` mark after it: the sweep that follows, one pager as in
        release 2, reads what changed meanwhile and says whether the table is caught up.
        """
        self._slice = False
        committed = self.status.committed
        tools = SliceTools(
            self.spec,
            reader=self._reader,
            hooks=self._hooks,
            dedup=self._dedup,
            committer=self._committer,  # type: ignore[arg-type]  # set by _begin
            delivery=lambda: self._delivery if self._delivery.exactly_once else self._deliveries(),
            account=lambda plan, ack: self._account(plan, ack, _SweepResult()),
            anchored=lambda: self.status.committed is not None,
            on_prefix=self._prefix_moved,
            stop=self._stop,
            pages=self._pages,
        )
        at = Position(committed.timestamp, committed.sys_id) if committed else None
        self.status.backfill = SlicedBackfill(tools, start=start, hi=hi, committed=at)
        try:
            last = await self.status.backfill.run()
        finally:
            self.status.backfill = None
        self.status.sweeps += 1
        return next_sweep_start(start, last, hi, self.spec.overlap_seconds)

    def _prefix_moved(self, offset: SourceOffset) -> None:
        self._last_submitted = offset
        self._cursor = self.status.cursor = Position(offset.timestamp, offset.sys_id)
        self._set_lag(max((self._clock.now() - parse_ts(offset.timestamp)).total_seconds(), 0.0))

    def _prefetch(self, after: Position, hi: str) -> asyncio.Task[tuple[Page, int]]:
        """Fetch the next page while the current one is produced and acknowledged."""
        return asyncio.create_task(self._fetch(after, hi), name=f"fetch:{self.spec.alias}")

    async def _fetch(self, after: Position, hi: str) -> tuple[Page, int]:
        """A page, once the page budget has room for it; the slot goes with the page."""
        if self._pages is None:
            return await self._reader.page(after, hi)
        await self._pages.acquire()
        try:
            return await self._reader.page(after, hi)
        except BaseException:
            self._pages.release()
            raise

    def _release_page(self) -> None:
        if self._pages is not None:
            self._pages.release()

    async def _page_of(self, fetch: asyncio.Task[tuple[Page, int]]) -> tuple[Page, int]:
        """A request in flight is abandoned at once when stop is requested."""
        if not await done_before(fetch, self._stop.event):
            raise StoppedError("stop requested")
        return fetch.result()

    async def _produce(self, plan: PagePlan, result: _SweepResult) -> None:
        """Deliver a page, then commit its acknowledged prefix with one offset write.

        The page is acknowledged before the next one is sent: at most one page of records per
        table is unacknowledged, and the offset is queued as soon as the acks allow it.
        """
        spec, committer = self.spec, self._committer
        assert committer is not None
        caps_before = self._dedup.evictions_by_cap
        ack: PageAck | None = None
        if plan.emits:
            with self._failures.overdue(
                FailureSource.KAFKA,
                failures.ACKS_OVERDUE_SECONDS,
                functools.partial(_unacked, spec, len(plan.emits)),
            ):
                ack = await self._delivery.deliver_page(plan)
            if ack is None:
                # Stopping, the deadline passed with records unacknowledged: the drain says so.
                raise StoppedError("stop requested while records were unacknowledged")
        assert plan.cursor is not None
        self._cursor = plan.cursor
        self.status.cursor = plan.cursor
        self._count_evictions(self._dedup.evictions_by_cap - caps_before)
        emitted = ack.acked if ack is not None else 0
        if emitted:
            # Only the contiguous acknowledged prefix: an unacknowledged record holds back
            # every later offset of the table.
            offset = plan.emits[emitted - 1].offset
            self._last_submitted = offset
            committer.commit_now(offset)
        self._account(plan, ack, result)

    def _account(self, plan: PagePlan, ack: PageAck | None, result: _SweepResult) -> int:
        """Count a delivered page; raise what a failed record means. The records acked."""
        spec = self.spec
        emitted = ack.acked if ack is not None else 0
        result.emitted += emitted
        result.suppressed += plan.suppressed
        result.late += plan.late
        self.status.rows_emitted += emitted
        self.status.rows_suppressed += plan.suppressed
        self.status.rows_late += plan.late
        metrics.ROWS_EMITTED.labels(table=spec.alias).inc(emitted)
        if plan.suppressed:
            metrics.ROWS_SUPPRESSED.labels(table=spec.alias).inc(plan.suppressed)
        if plan.late:
            metrics.ROWS_LATE.labels(table=spec.alias).inc(plan.late)
        if ack is not None and (failure := ack.failure) is not None:
            metrics.PRODUCE_ERRORS.labels(table=spec.alias).inc(ack.records - ack.acked)
            row = plan.emits[failure.index].id
            if failure.fatal:
                raise KafkaSinkError(
                    f"{spec.describe}: row {row}: Kafka refused the record: {failure.error}"
                )
            raise _ProduceFailedError(f"row {row}: {failure.error!r}")
        return emitted

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
        assert self._committer is not None
        self._committer.commit_now(streamed)

    # ------------------------------------------------------------------ status

    def _set_state(self, state: TableState) -> None:
        self.status.state = state
        metrics.set_state(self.spec.alias, state.value)

    def _set_lag(self, lag: float) -> None:
        self.status.lag_seconds = lag
        metrics.LAG_SECONDS.labels(table=self.spec.alias).set(lag)

    def _count_evictions(self, evicted: int) -> None:
        if evicted:
            metrics.DEDUP_EVICTIONS.labels(table=self.spec.alias).inc(evicted)
            self._log.warning(
                "dedup cache full: oldest entries evicted; overlap rows may be re-emitted "
                "(raise dedup.max.entries above the rows changed per overlap window)",
                evicted=evicted,
                max_entries=self._dedup.max_entries,
            )

    def _committed_text(self) -> str | None:
        c = self.status.committed
        return f"{c.timestamp}/{c.sys_id or '-'}/{c.phase}" if c else None

    def _named(self, message: str) -> str:
        return message if self.spec.describe in message else f"{self.spec.describe}: {message}"


def _unacked(spec: TableSpec, records: int) -> str:
    return (
        f"{spec.describe}: Kafka has not acknowledged a page of {records} record(s) for topic "
        f"{spec.topic} within {failures.ACKS_OVERDUE_SECONDS:g} s; still waiting (is the "
        f"partition's leader broker reachable?)"
    )
