"""A table's key sweep (``deletes: reconcile``, SPEC §14.3): tombstones for keys the instance lost.

Every ``reconcile.interval.seconds`` the sweep reads the keys live in the table's topic once
(``adapters.topic_keys``), pages the table's sys_ids in sys_id order and compares page by page
(``core.reconcile``). A key live in Kafka and absent from the instance is asked for again, in
batches of ``sys_idIN`` requests, before anything is sent, so a row that reappeared meanwhile is
never deleted; with ``deletes: [audit, reconcile]`` a key whose deletion ``sys_audit_delete``
recorded is left to the delete stream, so one deletion gives one tombstone.

A tombstone must never be followed by an older version of its row. The table's own stream may
hold a page read before the re-check and not yet produced, so the tombstones of a re-check wait
until the table completed a sweep whose high-water mark is later than the re-check's ``Date``.

Progress is the sweep's own source partition (``<alias>.reconcile``), written after each page
whose tombstones Kafka acknowledged: a restart resumes the sweep after the last reconciled key.
The sweep is a :class:`~snowsource.engine.poller.Poller` so that status, REST, metrics, the
offsets script and shutdown treat it like every stream; it replaces only ``run``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import structlog
from aiokafka.errors import KafkaError

from snowsource.core.cursor import Position
from snowsource.core.deletes import AUDIT_TABLE, DELETE, OPERATION_HEADER
from snowsource.core.dictionary import raw
from snowsource.core.errors import (
    AuthError,
    KafkaSinkError,
    OffsetError,
    TableError,
    TableFailedError,
)
from snowsource.core.grants import Priority
from snowsource.core.offsets_codec import encode_value
from snowsource.core.reconcile import (
    KEY_PAGE_SIZE,
    RECHECK_BATCH,
    RECHECK_PAGES,
    SOURCE_HEADER,
    SOURCE_RECONCILE,
    LiveKeys,
    SweepProgress,
    audited_query,
    batches,
    compare_page,
    fresh_sweep,
    key_query,
    missing_others,
    pack,
    recheck_query,
)
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState, TableStatus
from snowsource.core.tableapi import Page, scope_params
from snowsource.core.timestamps import format_ts
from snowsource.engine.committer import OffsetWriter
from snowsource.engine.failures import FailureSource, FailureTracker
from snowsource.engine.poller import Poller
from snowsource.engine.ports import KafkaErrors, OffsetsStore, Sink
from snowsource.engine.resume import load_offset
from snowsource.engine.snow_requests import SnowRequests
from snowsource.engine.streams import ReconcileHooks, SweepMark
from snowsource.observability import metrics
from snowsource.runtime.aio import done_before, sleep_or_stop
from snowsource.runtime.deadline import StopSignal
from snowsource.runtime.retrying import Attempt, DeadlineExceededError, StoppedError, retrying

_FATAL = (TableFailedError, OffsetError, TableError, AuthError, KafkaSinkError)


class LiveKeySource(KafkaErrors, Protocol):
    """Reads the keys live in a table's topic (``adapters.topic_keys.TopicKeys``); says which
    of its errors a retry may cure."""

    async def live_keys(self, topic: str, *, instance: str, table: str) -> LiveKeys: ...


class _ProduceFailedError(Exception):
    """A tombstone was not acknowledged: the sweep restarts from its stored progress."""


@dataclass
class SweepSummary:
    """What the last sweep found, for its log line and the metrics."""

    live_in_kafka: int = 0
    instance_keys: int = 0
    missing_in_kafka: int = 0
    tombstones: int = 0
    reappeared: int = 0
    left_to_audit: int = 0
    requests: int = 0


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ReconcilePoller(Poller):
    """A poller whose ``run`` is a :class:`KeySweep`: status, REST, metrics, the offsets script
    and shutdown see it like every stream."""

    def __init__(
        self,
        spec: TableSpec,
        *,
        keys: LiveKeySource,
        page_size: int = KEY_PAGE_SIZE,
        now: Callable[[], datetime] = _utcnow,
        **poller: Any,
    ) -> None:
        super().__init__(spec, **poller)
        hooks = self._hooks
        assert isinstance(hooks, ReconcileHooks), "a key sweep needs its table's sweep mark"
        self.sweep = KeySweep(
            spec,
            requests=self._requests,
            sink=poller["sink"],
            store=poller["store"],
            retry=poller["retry"],
            stop=poller["stop"],
            mark=hooks.mark,
            keys=keys,
            status=self.status,
            page_size=page_size,
            now=now,
            failures=self._failures,
        )

    async def run(self) -> None:
        """Sweep every interval until stopped; FAILED with a diagnostic like any stream."""
        try:
            await self.sweep.run()
        except _FATAL as exc:
            self.fail(f"{self.spec.describe}: {exc}")
            return
        except KafkaError as exc:
            self.fail(f"{self.spec.describe}: Kafka refused the key sweep: {exc!r}")
            return
        except Exception as exc:
            self.sweep.log.exception("unexpected error")
            self.fail(f"unexpected error: {exc!r}")
            return
        self.status.state = TableState.STOPPED
        metrics.set_state(self.spec.alias, TableState.STOPPED.value)


class KeySweep:
    """One table's key sweeps, run by its :class:`ReconcilePoller`."""

    def __init__(
        self,
        spec: TableSpec,
        *,
        requests: SnowRequests,
        sink: Sink,
        store: OffsetsStore,
        retry: RetryPolicy,
        stop: StopSignal,
        mark: SweepMark,
        keys: LiveKeySource,
        status: TableStatus,
        page_size: int = KEY_PAGE_SIZE,
        now: Callable[[], datetime] = _utcnow,
        failures: FailureTracker | None = None,
    ) -> None:
        assert spec.base is not None, "a key sweep's spec names its table"
        # Retried errors count into the status (and health) like any stream's.
        self._failures = failures
        self.spec = spec
        self._base = spec.base
        self._requests = requests
        self._sink = sink
        self._store = store
        self._retry = retry
        self._stop = stop
        self._mark = mark
        self._keys = keys
        self.status = status
        self._page_size = page_size
        self._now = now
        self.log = structlog.get_logger("snowsource.engine.reconcile").bind(
            table=spec.alias, snow_table=spec.name
        )
        self._offsets = OffsetWriter(store, retry, table=spec.alias, failures=failures)
        self._instance = spec.partition.instance
        self._headers = [
            ("snow.instance", self._instance.encode()),
            ("snow.table", self._base.name.encode()),
            (OPERATION_HEADER, DELETE),
        ]
        self.last_sweep = SweepSummary()

    async def run(self) -> None:
        """Sweep every interval until stopped (returns); fatal errors are raised."""
        attempt = 0
        while not self._stop.is_set():
            try:
                await self._cycle()
                attempt = 0
            except _ProduceFailedError as exc:
                delay = self._retry.next_delay(attempt)
                attempt += 1
                self.log.warning("tombstones not acknowledged; sweeping again", error=str(exc))
                if await sleep_or_stop(self._stop.event, delay):
                    return
            except (StoppedError, DeadlineExceededError):
                return

    async def _cycle(self) -> None:
        """Wait until a sweep is due (and the table has swept once), then run it."""
        stop = self._stop.event
        committed = await load_offset(
            self.spec, self._store, self._offsets, stop=stop, log=self.log
        )
        self.status.committed = committed
        progress = SweepProgress.from_offset(committed) if committed else None
        self._show(progress)
        if not await self._mark.wait_past(None, stop):
            raise StoppedError("stop requested")
        if progress is not None and progress.ended:
            due = progress.due(self.spec.reconcile_interval_seconds)
            if await sleep_or_stop(stop, (due - self._now()).total_seconds()):
                raise StoppedError("stop requested")
            progress = None
        await self.sweep(progress or fresh_sweep(self._now()))

    def _show(self, progress: SweepProgress | None) -> None:
        status = self.status
        status.phase = "stream" if progress is None or progress.ended else "backfill"
        status.caught_up = progress is not None and progress.ended
        if progress is not None:
            status.cursor = Position(format_ts(progress.started), progress.after)
        metrics.set_phase(self.spec.alias, status.phase)
        status.state = TableState.RUNNING
        metrics.set_state(self.spec.alias, TableState.RUNNING.value)

    async def sweep(self, progress: SweepProgress) -> SweepSummary:
        """One sweep from ``progress``: compare every key page, tombstone what the instance
        lost, store the progress as it settles. Returns what it found."""
        summary = SweepSummary()
        await self._save(progress)
        self._show(progress)
        live = await self._live_keys()
        summary.live_in_kafka = len(live)
        after, others, lost, unsettled = progress.after, list[str](), list[str](), 0
        while True:
            keys = await self._key_page(after, summary)
            last_page = len(keys) < self._page_size
            sys_ids = [key for key in keys if pack(key) is not None]
            others.extend(key for key in keys if pack(key) is None)
            diff = compare_page(live, after, sys_ids, last_page=last_page)
            summary.instance_keys += len(keys)
            summary.missing_in_kafka += len(diff.missing_in_kafka)
            lost += diff.missing_in_instance
            if last_page:
                lost += missing_others(live, others)
            after = max(sys_ids[-1] if sys_ids else after, after)
            unsettled += 1
            self.status.pages += 1
            metrics.PAGES.labels(table=self.spec.alias).inc()
            # Lost keys of several pages share a re-check; the progress moves past a page only
            # once every key it lost is settled, so a restart re-reads the unsettled ones.
            if last_page or len(lost) >= RECHECK_BATCH or unsettled >= RECHECK_PAGES:
                await self._tombstone(lost, summary)
                lost, unsettled = [], 0
            if last_page:
                break
            if not lost:
                progress = replace(progress, after=after)
                await self._save(progress)
                self._show(progress)
        await self._save(replace(progress, ended=True))
        self._ended(replace(progress, ended=True), summary)
        return summary

    def _ended(self, progress: SweepProgress, summary: SweepSummary) -> None:
        self.last_sweep = summary
        self.status.sweeps += 1
        self._show(progress)
        alias = self.spec.alias
        metrics.RECONCILE_MISSING.labels(table=alias, side="instance").set(summary.tombstones)
        metrics.RECONCILE_MISSING.labels(table=alias, side="kafka").set(summary.missing_in_kafka)
        self.log.info(
            "key sweep done",
            live_in_kafka=summary.live_in_kafka,
            instance_keys=summary.instance_keys,
            missing_in_kafka=summary.missing_in_kafka,
            tombstones=summary.tombstones,
            reappeared=summary.reappeared,
            left_to_audit=summary.left_to_audit,
            requests=summary.requests,
        )

    async def _save(self, progress: SweepProgress) -> None:
        offset = progress.to_offset(self.spec.partition.query_fingerprint)
        await self._offsets.write(self.spec.partition, encode_value(offset), stop=self._stop.event)
        self.status.committed = offset
        metrics.OFFSETS_COMMITTED.labels(table=self.spec.alias).inc()

    async def _live_keys(self) -> LiveKeys:
        async for attempt in retrying(
            self._retry,
            self._stop.event,
            retry_if=self._keys.retriable,
            on_retry=self._keys_retrying,
        ):
            with attempt:
                live = await self._unless_stopped(
                    self._keys.live_keys(
                        self.spec.topic, instance=self._instance, table=self._base.name
                    )
                )
                if self._failures is not None:
                    self._failures.succeeded(FailureSource.KAFKA)
                return live
        raise StoppedError("stop requested")  # pragma: no cover - retrying raises first

    async def _unless_stopped(self, reading: Coroutine[Any, Any, LiveKeys]) -> LiveKeys:
        # Reading a large topic takes seconds: a stop must not wait for it (nothing to drain).
        task = asyncio.ensure_future(reading)
        if not await done_before(task, self._stop.event):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise StoppedError("stop requested")
        return task.result()

    # ---------------------------------------------------------------- ServiceNow requests

    async def _key_page(self, after: str, summary: SweepSummary) -> list[str]:
        spec = self.spec
        params = {
            "sysparm_query": key_query(spec.normalised_query, after),
            "sysparm_fields": "sys_id",
            "sysparm_limit": str(self._page_size),
            "sysparm_no_count": "true",
            "sysparm_suppress_pagination_header": "true",
            **scope_params(spec.query_domain, spec.query_category),
        }
        page = await self._get(spec.name, params, summary, "a key page")
        keys = [raw(row, "sys_id") for row in page.rows]
        if any(not key for key in keys) or keys != sorted(keys) or (keys and keys[0] <= after):
            raise TableFailedError(
                f"the key page after {after or 'the first key'} is not in sys_id order or "
                "lacks sys_ids: the instance did not apply ORDERBYsys_id"
            )
        return keys

    async def _get(
        self, table: str, params: Mapping[str, str], summary: SweepSummary, asking: str
    ) -> Page:
        """Every request of the sweep, retried like a table's pages, at low priority in the
        session pool: a sweep never delays a table's own pages (SPEC §14.3)."""
        summary.requests += 1
        return await self._requests.get(table, params, priority=Priority.LOW, asking=asking)

    def _keys_retrying(self, attempt: Attempt, delay: float) -> None:
        metrics.RETRIES.labels(table=self.spec.alias).inc()
        if self._failures is not None:
            self._failures.failed(FailureSource.KAFKA, str(attempt.error))
        self.log.warning(
            "reading the topic's live keys failed; retrying",
            error=str(attempt.error),
            attempt=attempt.number + 1,
            retry_in=round(delay, 2),
        )

    async def _recheck(self, keys: Sequence[str], summary: SweepSummary) -> tuple[list[str], str]:
        """Those of ``keys`` the instance does not hold now, and the instance time it said so."""
        spec = self.spec
        params = {
            "sysparm_query": recheck_query(spec.normalised_query, keys),
            "sysparm_fields": "sys_id",
            "sysparm_limit": str(len(keys)),
            "sysparm_no_count": "true",
            "sysparm_suppress_pagination_header": "true",
            **scope_params(spec.query_domain, spec.query_category),
        }
        page = await self._get(spec.name, params, summary, "whether lost keys exist")
        present = {raw(row, "sys_id") for row in page.rows}
        summary.reappeared += len(present)
        seen_at = _instance_time(page.date) or format_ts(self._now())
        return [key for key in keys if key not in present], seen_at

    async def _audited(self, keys: Sequence[str], summary: SweepSummary) -> set[str]:
        """Those of ``keys`` whose deletion ``sys_audit_delete`` recorded (the delete stream
        sends their tombstones); none when the table has no delete stream or may not read it."""
        if not self._base.deletes or not keys:
            return set()
        params = {
            "sysparm_query": audited_query(self._base.name, keys),
            "sysparm_fields": "documentkey",
            "sysparm_limit": str(len(keys) * 2),
            "sysparm_no_count": "true",
            "sysparm_suppress_pagination_header": "true",
            **scope_params(self.spec.query_domain, self.spec.query_category),
        }
        try:
            page = await self._get(AUDIT_TABLE, params, summary, "which deletions were audited")
        except TableError as exc:
            # The delete stream FAILs on the same refusal and says why; the sweep covers for it.
            self.log.warning(
                "sys_audit_delete unreadable; the sweep sends the tombstones", error=str(exc)
            )
            return set()
        return {raw(row, "documentkey") for row in page.rows}

    # ---------------------------------------------------------------- tombstones

    async def _tombstone(self, lost: Sequence[str], summary: SweepSummary) -> None:
        for batch in batches(lost):
            gone, seen_at = await self._recheck(batch, summary)
            audited = await self._audited(gone, summary)
            summary.left_to_audit += len(audited)
            doomed = [key for key in gone if key not in audited]
            if not doomed:
                continue
            # The table's stream may still hold a page read before the re-check.
            if not await self._mark.wait_past(seen_at, self._stop.event):
                raise StoppedError("stop requested")
            await self._send(doomed, seen_at)
            summary.tombstones += len(doomed)

    async def _send(self, keys: Sequence[str], seen_at: str) -> None:
        stamp = [("snow.timestamp", seen_at.encode()), (SOURCE_HEADER, SOURCE_RECONCILE)]
        records = [(key.encode(), None, stamp) for key in keys]
        pending = await self._sink.send_page(self.spec.topic, records, headers=self._headers)
        if not await self._stop.finish(pending):
            raise StoppedError("stopped before the tombstones were acknowledged")
        ack = pending.result()
        if not ack.complete:
            metrics.PRODUCE_ERRORS.labels(table=self.spec.alias).inc(ack.records - ack.acked)
            raise _ProduceFailedError(str(ack.failure))
        self.status.rows_emitted += len(keys)
        metrics.ROWS_EMITTED.labels(table=self.spec.alias).inc(len(keys))


def _instance_time(date: str | None) -> str:
    """The instance's ``Date`` header as a timestamp ("" when it sent none or a bad one)."""
    if not date:
        return ""
    try:
        return format_ts(parsedate_to_datetime(date))
    except (TypeError, ValueError):
        return ""
