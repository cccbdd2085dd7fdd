"""``snowsource run`` whose start looks for lost offsets late: ``python -m
tests.integration.late_replay_look run --config PATH``.

A member of a group started at the same moment as others can be slow between looking at the
offsets topic and looking at the output topics (a loaded node, a slow broker answer): the others
then create the offsets topic and produce their first records in between. This process waits in
that look until another member's records are there (up to 60 s), so the race of SPEC §15.4
happens on every start instead of now and then. Injected through the daemon's ``Adapters``,
never read by product code from the environment.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence

from snowsource.adapters.offset_store import OffsetStore
from snowsource.cli.main import cmd_run
from snowsource.engine.wiring import Adapters

WAIT_SECONDS = 60.0


class LateLookStore(OffsetStore):
    """The real store; its look at the output topics waits until they hold records."""

    async def output_topics_with_records(self, topics: list[str]) -> list[str]:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            found = await super().output_topics_with_records(topics)
            if found or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.1)


class LateLookAdapters(Adapters):
    """The daemon's adapters, its offsets store a :class:`LateLookStore`."""

    def offset_store(self, output_topics: list[str], *, allow_full_replay: bool) -> OffsetStore:
        s = self.settings
        return LateLookStore(
            self.conn,
            topic=s.offset_storage_topic,
            connector=s.name,
            partitions=s.offset_storage_partitions,
            replication_factor=s.offset_storage_replication_factor,
            output_topics=output_topics,
            allow_full_replay=allow_full_replay,
        )


def main(argv: Sequence[str]) -> int:
    command, *rest = argv
    if command != "run" or len(rest) != 2 or rest[0] != "--config":
        raise SystemExit("usage: python -m tests.integration.late_replay_look run --config PATH")
    return cmd_run(rest[1], adapters=LateLookAdapters)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
