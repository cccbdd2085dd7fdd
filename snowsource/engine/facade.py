"""The engine as the REST API sees it: one facade of plain data (SPEC §8).

The API reads connector state, table statuses, stored offsets and where the group runs each
table, and asks the engine to stop or start its tables. It never holds a poller, an adapter or
the group owner: what crosses is core values (``TableSpec``, ``TableStatus``, offset bytes) and
the small protocols below. ``engine.supervisor.Daemon`` is the implementation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from snowsource.core.errors import SnowsourceError
from snowsource.core.offsets_codec import SourcePartition, StoredEntry
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableStatus
from snowsource.runtime.deadline import Deadline

__all__ = [
    "ApiOptions",
    "ConnectorState",
    "EngineFacade",
    "OffsetsAdmin",
    "Placement",
    "ShuttingDownError",
]


class ConnectorState(StrEnum):
    """Connector-level state as Kafka Connect names it."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class ShuttingDownError(SnowsourceError):
    """Shutdown began: no poller starts any more."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the group runs a table: its owner's worker id (None while withheld) and its state
    as the group reports it (RUNNING, STOPPED while its owner is stopped, UNASSIGNED)."""

    worker_id: str | None
    state: str


@dataclass(frozen=True)
class ApiOptions:
    """What the REST API needs of the configuration, as plain values: the API never reads the
    configuration itself (``engine.wiring.api_options`` builds this)."""

    name: str  # the connector's name
    task_id: int
    tasks_max: int
    host: str  # rest.host
    port: int  # rest.port (0: any free port)
    console: bool  # rest.console
    shutdown_timeout_seconds: float
    health_unready_after_seconds: float
    # The effective configuration, YAML keys, every secret already masked (GET connector).
    config: Mapping[str, object] = field(repr=False)
    # Every configured stream and the task that owns it: PATCH must recognise (and refuse)
    # partitions another task owns.
    all_specs: tuple[TableSpec, ...] = field(repr=False)
    owners: Mapping[str, int] = field(repr=False)
    token: str | None = field(default=None, repr=False)  # rest.auth.token
    topic_prefix: str = ""  # a discovered table's topic is {topic.prefix}{name}


class OffsetsAdmin(Protocol):
    """The offsets topic as an operator changes it (REST offsets, SPEC §8)."""

    @property
    def loaded(self) -> asyncio.Event: ...

    async def load(self) -> None: ...

    def entries(self) -> list[StoredEntry]: ...

    def get(self, partition: SourcePartition) -> bytes | None: ...

    def deleted_since_load(self) -> frozenset[bytes]:
        """Key bytes this process tombstoned since its last load (GET lists them as null)."""
        ...

    async def write(
        self, partition: SourcePartition | Mapping[str, object], value: bytes | None
    ) -> None: ...

    async def write_raw(self, key: bytes, value: bytes | None) -> None: ...


class EngineFacade(Protocol):
    """What the REST API may ask of the engine."""

    @property
    def specs(self) -> Sequence[TableSpec]:
        """The tables this task owns (in group mode every configured table)."""
        ...

    @property
    def state(self) -> ConnectorState:
        """The connector state as Connect names it."""
        ...

    @property
    def ready(self) -> asyncio.Event:
        """Set once the first generation started."""
        ...

    @property
    def closing(self) -> bool:
        """True once shutdown began."""
        ...

    @property
    def group_mode(self) -> bool:
        """True with ``tasks.assignment: group``: tables run where the group puts them."""
        ...

    @property
    def offsets(self) -> OffsetsAdmin | None:
        """The daemon's offsets store, once open."""
        ...

    def statuses(self) -> dict[str, TableStatus]:
        """The status of every table running here, by alias (empty while STOPPED/PAUSED)."""
        ...

    def placement(self, alias: str) -> Placement:
        """Where the group runs ``alias`` (group mode; in static mode: here, or not at all)."""
        ...

    def busy_workers(self) -> list[str]:
        """Worker ids of the other group members that still run tables (group mode)."""
        ...

    def servicenow_pool(self) -> dict[str, float] | None:
        """The ServiceNow session pool (concurrency limit, sessions, requests in flight, SPEC
        §14.1) and ``paused_seconds`` (a 429's ``Retry-After``, §15.3), None before the client
        opened."""
        ...

    def rate_budget(self) -> dict[str, float | int | None] | None:
        """The ServiceNow rate budget (SPEC §15.3: per hour, used in the window, waited), None
        when no budget applies."""
        ...

    async def kafka_reachable(self) -> bool:
        """True when Kafka answered at start and a broker answers the producer now."""
        ...

    async def kafka_cluster_id(self) -> str | None:
        """The Kafka cluster id, or None when Kafka does not say."""
        ...

    async def read_offsets(self) -> list[StoredEntry]:
        """The connector's records in the offsets topic, read from it now by a reader of its
        own (not the daemon's store, which running pollers write to)."""
        ...

    async def stop_pollers(self, deadline: Deadline, *, target: ConnectorState) -> list[str]:
        """Stop every poller within ``deadline``; the tables whose final offset is unwritten."""
        ...

    async def start_pollers(self, *, reload: bool) -> None:
        """Start every poller from the stored offsets; ``ShuttingDownError`` once closing."""
        ...
