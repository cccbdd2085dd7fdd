"""Which output topics the cluster no longer has, through an admin client of its own.

The engine's topic watch (``engine.topic_watch``) asks this every few seconds while the tables
run; only "unknown topic" means deleted: an authorization or leadership error is another
problem, reported by the produce path, and must not fail a table as a deletion.
"""

from __future__ import annotations

from collections.abc import Collection

import structlog
from aiokafka.errors import UnknownTopicOrPartitionError

from snowsource.adapters.kafka import KafkaConnection, LiveNodeAdmin, close_fully
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

__all__ = ["TopicLookup"]

log = structlog.get_logger("snowsource.adapters.topic_lookup")

# Closing the admin client never holds the shutdown longer than this.
_CLOSE_SECONDS = 5.0


class TopicLookup(AsyncResource):
    """Answers, for a set of topics, which of them the cluster says do not exist."""

    def __init__(self, conn: KafkaConnection) -> None:
        self._conn = conn
        self._admin: LiveNodeAdmin | None = None

    async def start(self) -> None:
        """Connect the admin client."""
        # Kept before start(): a start that fails half-way has a connection close() must stop.
        # Any live broker answers (one of a cluster may be down: SPEC §15.4).
        self._admin = LiveNodeAdmin(**self._conn.client_kwargs())
        await self._admin.start()

    async def close(self, deadline: Deadline | None = None) -> None:
        """Close the admin client within ``deadline``. Idempotent."""
        admin, self._admin = self._admin, None
        if admin is None:
            return
        seconds = (deadline or Deadline.never()).remaining(_CLOSE_SECONDS)
        if not await close_fully(admin, within=seconds):
            log.warning("the topic watch's admin client did not close in time; abandoning it")

    async def deleted(self, topics: Collection[str]) -> dict[str, bool]:
        """``topic -> missing`` for each of ``topics`` the cluster answered about (nothing
        before ``start``)."""
        if self._admin is None:
            return {}
        return {
            entry["topic"]: entry["error_code"] == UnknownTopicOrPartitionError.errno
            for entry in await self._admin.describe_topics(list(topics))
        }
