"""What a poller needs from the outside world, as small protocols.

The real implementations are ``adapters.servicenow.ServiceNowClient``, ``adapters.sink.RecordSink``
and ``adapters.offset_store.OffsetStore``; tests of the poller's own logic pass in-memory fakes
(integration tests keep running the real ones against a real broker).

Errors: a ServiceNow port raises ``core.errors`` classes; a Kafka port raises its client's own
errors and says which of them a retry may cure (:class:`KafkaErrors`), so the engine never
imports the adapter that knows the Kafka client's error tree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from snowsource.core.grants import Priority
from snowsource.core.offsets_codec import SourcePartition, StoredEntry
from snowsource.core.outbound import Headers, PageAck, PageRecordLike
from snowsource.core.tableapi import Page
from snowsource.core.value_schema import Registered
from snowsource.runtime.deadline import Deadline


class PageSource(Protocol):
    """Reads Table API pages (one attempt per call; errors are ``core.errors`` classes)."""

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page: ...


@runtime_checkable
class DocumentSource(Protocol):
    """A page source that also answers JSON documents (the Aggregate API)."""

    async def get_json(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        requester: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Any: ...


@runtime_checkable
class SharedSource(Protocol):
    """A page source shared by several readers (the session pool): whether it has room."""

    def saturated(self) -> bool: ...


class Sink(Protocol):
    """Hands pages of records to Kafka; the future resolves to the page's acknowledged prefix."""

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]: ...


class TopicLookup(Protocol):
    """Which topics the cluster no longer has (``adapters.topic_lookup.TopicLookup``)."""

    async def start(self) -> None: ...

    async def close(self, deadline: Deadline | None = None) -> None: ...

    async def deleted(self, topics: Collection[str]) -> dict[str, bool]: ...


class KafkaErrors(Protocol):
    """A Kafka port's own error rule: whether a retry may cure ``error``, one of its calls'.

    The adapter answers (``adapters.kafka.is_retriable``: aiokafka's ``retriable`` flag, plus
    its client-side timeout), so the rule lives once, beside the client that raises the errors.
    """

    def retriable(self, error: BaseException) -> bool: ...


class OffsetsStore(KafkaErrors, Protocol):
    """The offsets topic as the poller sees it: read what was loaded, write and delete."""

    def get(self, partition: SourcePartition) -> bytes | None: ...

    def foreign_spelling(self, partition: SourcePartition) -> StoredEntry | None: ...

    def written_at(self, partition: SourcePartition) -> int | None: ...

    def moved_back(self, partition: SourcePartition) -> bool: ...

    async def write(
        self, partition: SourcePartition | Mapping[str, object], value: bytes | None
    ) -> None: ...

    async def write_raw(self, key: bytes, value: bytes | None) -> None: ...


class SchemaRegistry(Protocol):
    """A Confluent-compatible Schema Registry (``adapters.schema_registry.RegistryClient``)."""

    async def register(self, subject: str, schema: str, schema_type: str) -> Registered: ...

    async def lookup(self, subject: str, schema: str, schema_type: str) -> Registered: ...

    async def latest(self, subject: str) -> Registered: ...


class InstanceClient(Protocol):
    """The process's ServiceNow client as discovery and backfill admission use it
    (``adapters.servicenow.ServiceNowClient``): pages and JSON documents, one attempt each."""

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        requester: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page: ...

    async def get_json(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        requester: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Any: ...
