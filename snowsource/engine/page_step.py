"""The step every pager ends a page with: deliver it, then record what Kafka said (SPEC §6-§7).

The table's single pager (``engine.poller``) and a sliced backfill's slices (``engine.slices``)
deliver a page the same way: its records go out through the stream's delivery, with a warning
while Kafka is overdue with its acks, and stop's deadline ends the wait. What Kafka said is then
recorded the same way, and a record it refused FAILs or restarts the table. Only what moves the
offset in between differs: one pager commits the last record of the page's acknowledged prefix,
the slices their backfill's contiguous acknowledged prefix (``engine.slice_prefix``).
"""

from __future__ import annotations

from snowsource.core.cursor import Position
from snowsource.core.outbound import PageAck
from snowsource.core.page import Emit, PagePlan
from snowsource.core.table import TableSpec
from snowsource.engine import failures
from snowsource.engine.delivery import TableDelivery
from snowsource.engine.failures import FailureSource, FailureTracker
from snowsource.engine.recorder import SweepCounts, TableRecorder
from snowsource.runtime.retrying import StoppedError

__all__ = ["PageStep", "last_acked"]


class PageStep:
    """Delivers and records one table's pages, whoever read them."""

    def __init__(self, spec: TableSpec, recorder: TableRecorder, tracker: FailureTracker) -> None:
        self._spec = spec
        self._recorder = recorder
        self._failures = tracker

    async def deliver(self, delivery: TableDelivery, plan: PagePlan) -> PageAck | None:
        """Produce the page and wait for its acks; ``None`` when it has no record to send.

        Raises ``StoppedError`` when stop's deadline passed with records unacknowledged (the
        generation's drain says so)."""
        if not plan.emits:
            return None
        with self._failures.acks_overdue(self._spec, len(plan.emits)):
            ack = await delivery.deliver_page(plan)
        if ack is None:
            raise StoppedError("stop requested while records were unacknowledged")
        return ack

    def recorded(
        self, counts: SweepCounts, cursor: Position, plan: PagePlan, ack: PageAck | None
    ) -> None:
        """Once the offset took the page's acks in: its counts and the table's cursor in the
        status; a record Kafka refused FAILs the table or restarts it from its offset."""
        self._recorder.page_delivered(counts, cursor, plan, ack)
        failures.refused(self._spec, plan, ack)
        self.acknowledged()

    def acknowledged(self) -> None:
        """Everything delivered so far was acknowledged: Kafka is healthy for this table."""
        self._failures.succeeded(FailureSource.KAFKA)


def last_acked(plan: PagePlan, ack: PageAck | None) -> Emit | None:
    """The last record of the page's acknowledged prefix (``None`` when none was)."""
    emitted = ack.acked if ack is not None else 0
    return plan.emits[emitted - 1] if emitted else None
