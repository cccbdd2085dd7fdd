"""One incarnation of a table: where it stands and its offset committer, built fresh each time.

A table runs as a sequence of generations (start, an internal restart after a produce failure,
REST resume). Everything a generation knows (cursor, late floor, dedup cache, the committer and
its last submitted offset) is built here when it begins, exactly like a process restart, and is
dropped with it: nothing of the last generation leaks into the next (Quix Streams makes a fresh
``Checkpoint`` per interval for the same reason).

The committer runs beside the generation's page loop; :meth:`TableGeneration.drain` waits, within
the stop's deadline, for the outstanding acks and the final offset write, and says what is left
when the deadline passes first.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from snowsource.core.cursor import Position, first_sweep_start
from snowsource.core.dedup import DedupCache
from snowsource.core.offsets_codec import SourceOffset
from snowsource.core.table import TableSpec
from snowsource.engine.committer import Committer, OffsetCommits
from snowsource.engine.delivery import TableDelivery
from snowsource.engine.failures import CommitterStoppedError
from snowsource.engine.recorder import TableRecorder
from snowsource.runtime.deadline import StopSignal
from snowsource.runtime.retrying import DeadlineExceededError


class TableGeneration:
    """The state of one generation of one table, and its commit lifecycle."""

    def __init__(
        self,
        spec: TableSpec,
        committed: SourceOffset | None,
        *,
        offsets: OffsetCommits,
        stop: StopSignal,
        recorder: TableRecorder,
    ) -> None:
        self.spec = spec
        committed_pos = Position(committed.timestamp, committed.sys_id) if committed else None
        #: Where this generation's first sweep reads from: the committed offset minus the overlap.
        self.start = first_sweep_start(committed_pos, spec.overlap_seconds, spec.start_timestamp)
        self.cursor = committed_pos or Position(spec.start_timestamp, "")
        # Rows below this may have been emitted before the restart (the dedup cache is empty
        # now), so only rows between it and the cursor can be told apart as late commits.
        self.late_floor = self.cursor
        # A backfill reads its first sweep with several range pagers (SPEC §14.2); a table that
        # was caught up resumes with one: slicing its overlap window gains nothing.
        self.sliced = spec.backfill_slices > 1 and (
            committed is None or committed.phase == "backfill"
        )
        self.dedup = DedupCache(spec.dedup_max_entries)
        self.committer = Committer(offsets, spec.partition, stop, self._written)
        #: Set once the table has a committed offset: loaded, or written by this generation
        #: (a sliced backfill produces ahead of its prefix only then).
        self.has_offset = asyncio.Event()
        if committed is not None:
            self.has_offset.set()
        self._committed = committed
        self._recorder = recorder
        self._stop = stop
        self._last_submitted: SourceOffset | None = None
        self._ending = False
        self._commit_failure: BaseException | None = None
        recorder.generation_began(committed, self.cursor, self.start)

    def _written(self, offset: SourceOffset) -> None:
        self._recorder.committed(offset)
        self.has_offset.set()

    def commit(self, offset: SourceOffset) -> None:
        """Queue ``offset``, the last of a page's acknowledged prefix, behind earlier ones."""
        self._last_submitted = offset
        self.committer.commit_now(offset)

    @property
    def backfilling(self) -> bool:
        """Whether the table has not yet caught up once (its offset says ``backfill``)."""
        last = self._last_submitted or self._committed
        return last is None or last.phase == "backfill"

    def mark_stream(self) -> None:
        """Caught up: make the committed offset say ``stream`` through the ordered commit path."""
        last = self._last_submitted or self._committed
        if last is None or last.phase == "stream":
            return
        self.commit(replace(last, phase="stream"))

    def sweep_read(self, last_read: Position | None, *, phase: str) -> None:
        """A sweep read its range to the end with every record of it acknowledged: the offset
        reaches the last row it read, emitted or not (SPEC §15.4), and says ``phase``.

        Rows after the last emitted one were left out on purpose (superseded by their
        re-creation, or already in Kafka after a crash): like a Debezium heartbeat, the offset
        moves past them so that a restart does not read them again and ``offsets list`` shows
        where the stream is. Queued behind every record submitted before it, as every commit
        (with exactly-once, a transaction of its own). Nothing is written when neither the
        position nor the phase moved: a quiet sweep that re-read its overlap writes nothing.
        """
        if self._stop.revoked():
            return  # group mode: another member may own the table now; its offset is not ours
        if last_read is None or last_read <= self.cursor:
            if phase == "stream":
                self.mark_stream()
            return
        # The cursor moves too: a late row emitted after this carries an offset not below it
        # (the offset never moves back; a restart would take a lower one for a rewind).
        self.cursor = last_read
        self.commit(
            SourceOffset(
                timestamp=last_read.ts,
                sys_id=last_read.id,
                phase=phase,
                fingerprint=self.spec.partition.query_fingerprint,
            )
        )

    async def commit_loop(self) -> None:
        """The committer's task: it may end only because the drain closed it."""
        try:
            await self.committer.run()
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

    async def drain(self, delivery: TableDelivery, committing: asyncio.Task[None]) -> None:
        """Wait for the outstanding acks and the final offset write, within the stop deadline."""
        self._ending = True
        committer = self.committer
        if not committing.done():  # else the committer failed and the task group says why
            await self._stop.finish(*delivery.in_flight)
            committer.close()
            if not await self._stop.finish(committing):
                committing.cancel()
        unacked = delivery.unacknowledged
        failed = self._commit_failure or (
            committing.done() and not committing.cancelled() and committing.exception()
        )
        complete = committing.done() and not committing.cancelled() and not failed
        if not self._stop.is_set() or (complete and unacked == 0 and committer.settled):
            return
        if failed:
            why = f"offset write failed: {failed}"
        elif not complete:
            why = "offsets topic write still pending"
        else:
            why = "acknowledged records without a written offset"
        resumes = self._recorder.status.committed_text() or "its start.timestamp"
        self._recorder.unfinished(
            f"{self.spec.describe}: the final offset was not written within the shutdown "
            f"deadline ({unacked} record(s) unacknowledged; {why}); the table resumes from "
            f"{resumes}"
        )
