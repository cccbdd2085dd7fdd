"""A table's retried errors, made visible in its status until what failed works again.

ServiceNow requests, produce and offset writes are retried for ever (SPEC §9), so without this
a table whose instance is unreachable would show no error at all. Each *source* of failures keeps
its own run: a successful request ends the ServiceNow run, an acknowledged page the Kafka run, a
written offset the offsets run. So a page read while produce keeps failing does not hide the
produce failure, and a request that works again is not counted against the table any longer.
Records Kafka keeps unacknowledged count too (``overdue``): aiokafka retries them for ever while
their partition's leader does not answer, which no error would otherwise show.

The status shows the runs together: ``last_error`` is the newest error of a run still going,
``consecutive_failures`` the failed attempts of every run still going, and ``failing_since`` when
the oldest of them began (UTC). A FAILED table keeps all three as they were when it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from aiokafka.errors import KafkaError

from snowsource.core.errors import (
    AuthError,
    KafkaSinkError,
    OffsetError,
    TableError,
    TableFailedError,
)
from snowsource.core.outbound import PageAck
from snowsource.core.page import PagePlan
from snowsource.core.table import TableSpec
from snowsource.observability import metrics
from snowsource.observability.redact import redact

__all__ = [
    "ACKS_OVERDUE_SECONDS",
    "FailureSource",
    "FailureTracker",
    "FailureView",
    "ProduceFailedError",
    "diagnostic",
    "failing_seconds",
    "is_fatal",
    "refused",
    "unacked",
]

#: Records unacknowledged for this long count as a failed attempt (and again every as long):
#: while no broker answers, aiokafka keeps records waiting instead of failing them, and a table
#: whose partition leader is gone would otherwise look well. Kafka itself gives up on a request
#: after 40 s (``request_timeout_ms``), so a healthy cluster never gets here.
ACKS_OVERDUE_SECONDS: float = 30.0


class FailureSource(StrEnum):
    """Where a retried error came from; a success of the same source ends its run."""

    SERVICENOW = "servicenow"
    KAFKA = "kafka"
    OFFSETS = "offsets"


class FailureView(Protocol):
    """The fields of a table's status the tracker keeps up to date (``TableStatus``)."""

    last_error: str | None
    consecutive_failures: int
    failing_since: datetime | None


@dataclass
class _Run:
    count: int
    since: datetime
    error: str
    order: int  # which run failed last, for last_error


def _utcnow() -> datetime:
    return datetime.now(UTC)


class FailureTracker:
    """Counts one table's retried errors into its status and the failures gauge."""

    def __init__(
        self, status: FailureView, alias: str, *, now: Callable[[], datetime] = _utcnow
    ) -> None:
        self._status = status
        self._alias = alias
        self._now = now
        self._runs: dict[FailureSource, _Run] = {}
        self._order = itertools.count()
        self._final = False
        # The series exists from the start, so "no failures" is a 0 rather than a gap.
        metrics.CONSECUTIVE_FAILURES.labels(table=alias).set(0)

    def failed(self, source: FailureSource, error: str) -> None:
        """One more failed attempt of ``source``; ``error`` is shown, redacted."""
        if self._final:
            return
        run = self._runs.get(source)
        text = redact(error)
        if run is None:
            self._runs[source] = _Run(1, self._now(), text, next(self._order))
        else:
            run.count += 1
            run.error = text
            run.order = next(self._order)
        self._publish()

    def succeeded(self, source: FailureSource) -> None:
        """``source`` worked: its run ends (nothing happens when it had none)."""
        if self._final or self._runs.pop(source, None) is None:
            return
        self._publish()

    def fatal(self, message: str) -> None:
        """The table FAILED with ``message``: counted as one more failure, then frozen."""
        if self._final:
            return
        status = self._status
        status.last_error = redact(message)
        status.consecutive_failures = sum(r.count for r in self._runs.values()) + 1
        status.failing_since = (
            min((r.since for r in self._runs.values()), default=None) or self._now()
        )
        self._final = True
        metrics.CONSECUTIVE_FAILURES.labels(table=self._alias).set(status.consecutive_failures)

    @contextlib.contextmanager
    def overdue(
        self, source: FailureSource, after: float, message: Callable[[], str]
    ) -> Iterator[None]:
        """While the block runs longer than ``after`` s, count a failure every ``after`` s."""
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            nonlocal handle
            self.failed(source, message())
            handle = loop.call_later(after, fire)

        handle = loop.call_later(after, fire)
        try:
            yield
        finally:
            if handle is not None:
                handle.cancel()

    def acks_overdue(
        self, spec: TableSpec, records: int
    ) -> contextlib.AbstractContextManager[None]:
        """``overdue`` for a page of ``records`` Kafka has yet to acknowledge."""
        message = functools.partial(unacked, spec, records)
        return self.overdue(FailureSource.KAFKA, ACKS_OVERDUE_SECONDS, message)

    def _publish(self) -> None:
        status, runs = self._status, self._runs.values()
        newest = max(runs, key=lambda r: r.order, default=None)
        status.last_error = newest.error if newest is not None else None
        status.consecutive_failures = sum(r.count for r in runs)
        status.failing_since = min((r.since for r in runs), default=None)
        metrics.CONSECUTIVE_FAILURES.labels(table=self._alias).set(status.consecutive_failures)


def failing_seconds(status: FailureView, now: datetime | None = None) -> float | None:
    """How long the table has been failing, or None when it is not."""
    since = status.failing_since
    if since is None:
        return None
    return max(((now or _utcnow()) - since).total_seconds(), 0.0)


class ProduceFailedError(Exception):
    """A record was not acknowledged; the table restarts internally from its committed offset."""


def refused(spec: TableSpec, plan: PagePlan, ack: PageAck | None) -> None:
    """Raise what a record Kafka refused in ``ack`` means: a record Kafka can never take FAILs
    the table, any other refusal restarts it from its committed offset."""
    if ack is None or (failure := ack.failure) is None:
        return
    row = plan.emits[failure.index].id
    if failure.fatal:
        raise KafkaSinkError(
            f"{spec.describe}: row {row}: Kafka refused the record: {failure.error}"
        )
    raise ProduceFailedError(f"row {row}: {failure.error!r}")


class CommitterStoppedError(Exception):
    """The committer ended without being closed (cancelled, or a bug): nothing would commit."""


# Errors that retrying cannot cure: the table goes to FAILED with their message.
_FATAL = (
    TableFailedError,
    OffsetError,
    TableError,
    AuthError,
    KafkaSinkError,
    CommitterStoppedError,
)


def is_fatal(error: BaseException) -> bool:
    """True for the errors a table FAILs with by design (anything else is a bug)."""
    return isinstance(error, (*_FATAL, KafkaError))


def diagnostic(describe: str, explain: Callable[[BaseException], str], error: Exception) -> str:
    """The FAILED diagnostic of a table (``describe``) that ``error`` ended; ``explain`` is the
    stream's own wording of its errors."""
    if isinstance(error, _FATAL):
        message = explain(error)
        return message if describe in message else f"{describe}: {message}"
    if isinstance(error, KafkaError):
        return (
            f"{describe}: writing its offset failed and retrying cannot help: {error!r}; "
            f"check the ACLs and configuration of the offsets topic"
        )
    return f"unexpected error: {error!r}"


def unacked(spec: TableSpec, records: int) -> str:
    """The retried error of a page Kafka keeps unacknowledged (``FailureTracker.overdue``)."""
    return (
        f"{spec.describe}: Kafka has not acknowledged a page of {records} record(s) for topic "
        f"{spec.topic} within {ACKS_OVERDUE_SECONDS:g} s; still waiting (is the "
        f"partition's leader broker reachable?)"
    )
