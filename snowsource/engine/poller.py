"""One table's poller: keyset sweeps from ServiceNow into Kafka, offsets after acks (SPEC §5-§7).

A poller owns everything about one table: where it stands, its page size and its state. It never
lets one table's failure touch another: problems that retrying cannot cure put the table in
FAILED with a diagnostic and ``run`` returns. It reads top to bottom:

1. ``run`` repeats *generations* until stopped, through the shared retry loop: a produce failure
   restarts the table from its committed offset minus the overlap after a backoff, exactly like
   a process restart. A generation (``engine.table_generation``) is built fresh from the
   committed offset and sweeps beside its committer in one ``asyncio.TaskGroup``.
2. A sweep fixes a high-water mark ``HI`` and reads up to it (``engine.sweep``: one page
   stream, the next page fetched while the current one is delivered). A backfilling table's
   first sweep is read by several range pagers instead (``engine.slices``, SPEC §14.2). Both
   get the same ``SweepTools`` from here.
3. Each page: the decision (``core.page``), the delivery and its record (``engine.page_step``:
   at most one page per table unacknowledged), and the commit of the acknowledged prefix.
4. Stop (or a produce failure) drains: the outstanding acks and the final offset write, within
   the stop's deadline. Status and metrics are written by one recorder (``engine.recorder``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import structlog

from snowsource.core.clock import InstanceClock
from snowsource.core.cursor import Position, high_water_mark
from snowsource.core.retry import KafkaRetries, RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState, TableStatus
from snowsource.engine import failures
from snowsource.engine.admission import BackfillAdmission, RowCount
from snowsource.engine.budget import PageBudget
from snowsource.engine.committer import OffsetWriter
from snowsource.engine.delivery import DeliveryFactory, PageDelivery
from snowsource.engine.failures import FailureSource, FailureTracker
from snowsource.engine.page_step import PageStep
from snowsource.engine.pager import Pager
from snowsource.engine.ports import OffsetsStore, PageSource, Sink
from snowsource.engine.reader import TableReader
from snowsource.engine.recorder import TableRecorder
from snowsource.engine.resume import OutputTail, load_offset, rebuild_dedup
from snowsource.engine.slices import sliced_sweep
from snowsource.engine.snow_requests import SnowRequests
from snowsource.engine.stream_hooks import HooksFactory, stream_hooks
from snowsource.engine.sweep import SweepTools, paged_sweep
from snowsource.engine.table_generation import TableGeneration
from snowsource.runtime.aio import first_error, sleep_or_stop
from snowsource.runtime.deadline import StopSignal
from snowsource.runtime.retrying import Attempt, DeadlineExceededError, StoppedError, retrying


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
        kafka_retry: KafkaRetries | None = None,
        hooks: HooksFactory | None = None,
        pages: PageBudget | None = None,
        tail: OutputTail | None = None,
        delivery: DeliveryFactory = PageDelivery,
        admission: BackfillAdmission | None = None,
        row_count: RowCount | None = None,
    ) -> None:
        self.spec = spec
        # Backfill slots (SPEC §15.2): only a table's own stream asks for one.
        self._admission = admission if spec.stream == "table" else None
        self._row_count = row_count or _no_count
        self.status = TableStatus()
        self._log = structlog.get_logger("snowsource.engine.poller").bind(
            table=spec.alias, snow_table=spec.name
        )
        self._recorder = TableRecorder(spec.alias, self.status, self._log)
        self._failures = FailureTracker(self.status, spec.alias)
        # ServiceNow requests and restarts retry by ``retry``; Kafka work by its own policies.
        self._kafka_retry = kafka_retry or KafkaRetries(retry, retry, retry)
        self._writer = OffsetWriter(
            store, self._kafka_retry.offsets, table=spec.alias, failures=self._failures
        )
        self._store, self._tail, self._pages = store, tail, pages
        self._clock, self._retry, self._stop = clock, retry, stop
        # Every ServiceNow request of the stream, its hooks' included, retried in one place.
        self._requests = SnowRequests(
            client,
            alias=spec.alias,
            retry=retry,
            stop=stop.event,
            log=self._log,
            failures=self._failures,
        )
        self._hooks = (hooks or stream_hooks([spec])[spec.alias])(self._requests)  # shaping, HI cap
        deliveries = functools.partial(self._hooks.delivery, sink, stop, delivery)
        self._delivery = deliveries()
        self._reader = TableReader(spec, self._requests, stop=stop.event)
        self._tools = SweepTools(
            *(spec, self._reader, self._hooks, self._recorder, stop, self._delivery, deliveries),
            now=clock.now,
            step=PageStep(spec, self._recorder, self._failures),
            pager=Pager(self._reader, pages, key=spec.alias),
        )
        self._recorder.state(TableState.STARTING)

    # ------------------------------------------------------------------ 1. generations

    async def run(self) -> None:
        """Stream until stopped; FAILED tables return with ``status.last_error`` set."""
        try:
            async for attempt in retrying(
                self._retry,
                self._stop.event,
                retry_if=lambda exc: isinstance(exc, failures.ProduceFailedError),
                on_retry=self._restarting,
                progress=lambda: self.status.rows_emitted,
            ):
                with attempt:
                    await self._generation()
        except (StoppedError, DeadlineExceededError):
            pass  # also an offset write that ran out of the stop's deadline: the drain says so
        except Exception as exc:  # noqa: BLE001 - a table fails on its own, never the process
            if not failures.is_fatal(exc):
                self._log.exception("unexpected error")
            self.fail(failures.diagnostic(self.spec.describe, self._hooks.explain, exc))
            return
        self._recorder.state(TableState.STOPPED)
        self._log.info("table stopped", committed=self.status.committed_text())

    def fail(self, message: str) -> None:
        """Put the table in FAILED with ``message`` as its diagnostic."""
        self._failures.fatal(message)
        self._recorder.state(TableState.FAILED)
        self._log.error("table FAILED", error=message, committed=self.status.committed_text())

    def _restarting(self, attempt: Attempt, delay: float) -> None:
        self._log.warning(
            "produce failed; restarting the table from its committed offset",
            error=str(attempt.error),
            retry_in=round(delay, 2),
            committed=self.status.committed_text(),
        )
        self._failures.failed(
            FailureSource.KAFKA,
            f"{self.spec.describe}: producing to topic {self.spec.topic} failed; "
            f"restarting from the committed offset: {attempt.error}",
        )

    async def _generation(self) -> None:
        """One incarnation of the table: load the offset, sweep beside a committer, drain."""
        spec, stop = self.spec, self._stop
        await self._delivery.begin_generation()
        committed = await load_offset(
            spec, self._store, self._writer, stop=stop.event, log=self._log
        )
        self._delivery.forget()  # an ack of the previous generation means nothing to this one
        offsets = self._delivery.offsets(self._writer)
        gen = TableGeneration(spec, committed, offsets=offsets, stop=stop, recorder=self._recorder)
        await rebuild_dedup(
            spec,
            self._tail,
            committed,
            gen.dedup,
            written_ms=self._store.written_at(spec.partition),
            moved_back=self._store.moved_back(spec.partition),
            stop=stop.event,
            retry=self._kafka_retry.tail,
            required=self._delivery.exactly_once,
            log=self._log,
        )
        try:
            async with asyncio.TaskGroup() as group:
                committing = group.create_task(gen.commit_loop(), name=f"committer:{spec.alias}")
                try:
                    await self._sweeps(gen)
                except StoppedError:
                    pass
                finally:
                    await gen.drain(self._delivery, committing)
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None

    # ------------------------------------------------------------------ 2. sweeps

    async def _sweeps(self, gen: TableGeneration) -> None:
        # Neither waits for the other (the clock's Date header, the stream's dictionary and
        # schemas): a table's first page leaves a round trip or more sooner.
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(
                    self._reader.ensure_clock(self._clock), name=f"clock:{self.spec.alias}"
                )
                group.create_task(self._hooks.start(), name=f"hooks:{self.spec.alias}")
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None
        admission = self._admission
        if admission is None or not gen.backfilling:
            self._recorder.state(TableState.RUNNING)
            await self._sweep_loop(gen, None)
            return
        alias = self.spec.alias
        self.status.queue_position = functools.partial(admission.position, alias)
        queued = functools.partial(self._recorder.state, TableState.QUEUED)
        async with admission.slot(alias, self._row_count, queued) as release:
            self._recorder.state(TableState.RUNNING)
            await self._sweep_loop(gen, release)

    async def _sweep_loop(self, gen: TableGeneration, caught_up: Callable[[], None] | None) -> None:
        """Sweeps until stopped; ``caught_up`` is called once the backfill reached its end."""
        spec = self.spec
        start: Position | None = gen.start
        while start is not None and not self._stop.is_set():
            hi = self._hooks.cap(high_water_mark(self._clock.now(), spec.safety_lag_seconds))
            if hi is not None and gen.sliced:
                gen.sliced = False
                start = await sliced_sweep(self._tools, gen, start, hi)
                if start is not None and caught_up is not None:
                    caught_up()
                continue
            # No HI: a delete stream whose table has not completed a sweep yet.
            if hi is not None and (start := await paged_sweep(self._tools, gen, start, hi)) is None:
                return
            if hi is not None and caught_up is not None:
                caught_up()
            if await sleep_or_stop(self._stop.event, spec.poll_interval):
                return


async def _no_count() -> int | None:
    return None
