"""What the REST API needs from the supervisor, as a protocol the API owns.

The engine does not know the API: ``engine.supervisor.Daemon`` satisfies ``ConnectorControl``
structurally and ``snowsource.cli.run`` composes the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol

from snowsource.adapters.offset_store import OffsetStore
from snowsource.adapters.sink import RecordSink
from snowsource.core.table import TableSpec
from snowsource.engine.group_owner import GroupOwner
from snowsource.engine.poller import Poller
from snowsource.engine.supervisor import ConnectorState
from snowsource.runtime.deadline import Deadline

__all__ = ["ConnectorControl", "SessionPoolSource"]


class _PoolFigures(Protocol):
    def as_dict(self) -> dict[str, int]: ...


class SessionPoolSource(Protocol):
    """What ``/status`` reads from the ServiceNow client: its session pool's figures."""

    def pool_status(self) -> _PoolFigures | None:
        """None before the client started and after it closed."""
        ...


class ConnectorControl(Protocol):
    """What the REST API needs from the supervisor (``engine.supervisor.Daemon``)."""

    @property
    def specs(self) -> Sequence[TableSpec]:
        """The tables this task owns (in group mode every configured table)."""
        ...

    @property
    def group(self) -> GroupOwner | None:
        """With ``tasks.assignment: group``: who runs which table in the connector."""
        ...

    @property
    def pollers(self) -> Mapping[str, Poller]:
        """The running generation's pollers (empty while STOPPED or PAUSED)."""
        ...

    @property
    def state(self) -> ConnectorState:
        """The connector state as Connect names it."""
        ...

    @property
    def store(self) -> OffsetStore | None:
        """The daemon's offsets store, once open."""
        ...

    @property
    def client(self) -> SessionPoolSource | None:
        """The daemon's ServiceNow client, once open (``/status`` shows its session pool)."""
        ...

    @property
    def sink(self) -> RecordSink | None:
        """The daemon's producer, once open (readiness asks it whether Kafka is reachable)."""
        ...

    @property
    def ready(self) -> asyncio.Event:
        """Set once the first generation started."""
        ...

    @property
    def kafka_ready(self) -> bool:
        """True once Kafka answered at start."""
        ...

    @property
    def closing(self) -> bool:
        """True once shutdown began."""
        ...

    async def stop_pollers(self, deadline: Deadline, *, target: ConnectorState) -> list[str]:
        """Stop every poller within ``deadline``; the tables whose final offset is unwritten."""
        ...

    async def start_pollers(self, *, reload: bool) -> None:
        """Start every poller from the stored offsets; ``ShuttingDownError`` once closing."""
        ...
