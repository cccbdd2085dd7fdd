"""``snowsource run`` over a slow link to Kafka: ``python -m tests.integration.slow_handover MS
run --config PATH``.

Every page reaches the producer MS milliseconds after the table handed it over, so the kill -9
test of the commit rule (``test_page_commit_rule.py``) can kill the process while a page is
verifiably unacknowledged. The delay is injected through the daemon's ``Adapters`` (its sink),
never read by product code from the environment.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from snowsource.adapters.sink import RecordSink
from snowsource.cli.main import cmd_run
from snowsource.config.models import Settings
from snowsource.core.outbound import Headers, PageAck, PageRecordLike
from snowsource.engine.wiring import Adapters


class SlowHandoverSink(RecordSink):
    """The real producer; each page is handed to it ``delay`` seconds late."""

    delay = 0.0

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        return asyncio.ensure_future(self._later(topic, list(records), headers))

    async def _later(
        self, topic: str, records: list[PageRecordLike], headers: Headers | None
    ) -> PageAck:
        await asyncio.sleep(self.delay)
        return await (await super().send_page(topic, records, headers=headers))


class SlowHandoverAdapters(Adapters):
    """The daemon's adapters, its sink a :class:`SlowHandoverSink`."""

    def __init__(self, settings: Settings, delay: float) -> None:
        super().__init__(settings)
        self._delay = delay

    def record_sink(self) -> RecordSink:
        k = self.settings.kafka
        sink = SlowHandoverSink(
            self.conn,
            linger_ms=k.linger_ms,
            max_request_size=k.max_request_size,
            compression_type=str(k.compression_type),
        )
        sink.delay = self._delay
        return sink


def main(argv: Sequence[str]) -> int:
    delay_ms, command, *rest = argv
    if command != "run" or len(rest) != 2 or rest[0] != "--config":
        raise SystemExit("usage: python -m tests.integration.slow_handover MS run --config PATH")
    delay = int(delay_ms) / 1000
    return cmd_run(rest[1], adapters=lambda settings: SlowHandoverAdapters(settings, delay))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
