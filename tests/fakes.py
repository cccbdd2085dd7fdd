"""In-memory stand-ins for the project's own ports (``snowsource.engine.ports``).

They replace snowsource's sink and offsets store in tests of the poller's own logic; tests of
Kafka behaviour use the real ones against the real broker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from snowsource.adapters.kafka import is_retriable
from snowsource.adapters.sink import is_fatal_produce_error
from snowsource.core.offsets_codec import (
    SourcePartition,
    StoredEntry,
    encode_key,
    legacy_partition_for,
    parse_key,
    partition_for,
)
from snowsource.core.outbound import Headers, PageAck, PageRecordLike, RecordFailure
from snowsource.core.query import normalise_query
from snowsource.core.table import TableSpec

CONNECTOR = "fake-connector"


def make_spec(alias: str = "incident", **overrides: Any) -> TableSpec:
    """A resolved table the way ``engine.wiring.table_spec`` builds one."""
    name = overrides.pop("name", alias)
    snow_url = overrides.pop("snow_url", "https://acme.service-now.com")
    query = overrides.pop("query", "")
    common: dict[str, Any] = {
        "snow_url": snow_url,
        "table": name,
        "query": query,
        "query_domain": overrides.get("query_domain", False),
        "timestamp_field": overrides.get("timestamp_field", "sys_updated_on"),
    }
    values: dict[str, Any] = {
        "alias": alias,
        "name": name,
        "topic": f"snow.{alias}",
        "normalised_query": normalise_query(query),
        "query_domain": False,
        "query_category": None,
        "timestamp_field": "sys_updated_on",
        "id_field": "sys_id",
        "fields": (),
        "display_value": "false",
        "exclude_reference_link": True,
        "start_timestamp": "1970-01-01 00:00:00",
        "batch_size": 100,
        "poll_interval": 0.05,
        "overlap_seconds": 0,
        "safety_lag_seconds": 0,
        "dedup_max_entries": 10000,
        "partition": partition_for(**common),
        "legacy_partition": legacy_partition_for(**common),
    }
    values.update(overrides)
    return TableSpec(**values)


@dataclass
class SentRecord:
    topic: str
    key: bytes
    value: bytes
    headers: dict[str, bytes]
    future: asyncio.Future[Any]


@dataclass
class FakeSink:
    """Records every record of every page; acknowledges at once unless ``auto_ack`` is off (then
    the test acks, record by record or all at once). ``refuse`` fails every later page from its
    first record, the way the real sink reports a hand-off error."""

    auto_ack: bool = True
    sent: list[SentRecord] = field(default_factory=list)
    max_unacked: int = 0
    pages: int = 0
    refuse: BaseException | None = None

    @property
    def unacked(self) -> list[SentRecord]:
        return [r for r in self.sent if not r.future.done()]

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        loop = asyncio.get_running_loop()
        self.pages += 1
        if self.refuse is not None:
            failure = RecordFailure(0, self.refuse, is_fatal_produce_error(self.refuse))
            done: asyncio.Future[PageAck] = loop.create_future()
            done.set_result(PageAck(records=len(records), acked=0, failure=failure))
            return done
        futures: list[asyncio.Future[Any]] = []
        for key, value, own in records:
            future: asyncio.Future[Any] = loop.create_future()
            all_headers = dict(headers or ())
            all_headers.update(own)
            self.sent.append(SentRecord(topic, key, value or b"", all_headers, future))
            if self.auto_ack:
                future.set_result(None)
            futures.append(future)
        self.max_unacked = max(self.max_unacked, len(self.unacked))
        return asyncio.ensure_future(_page_ack(futures))

    def ack_all(self) -> None:
        for record in self.unacked:
            record.future.set_result(None)


async def _page_ack(futures: list[asyncio.Future[Any]]) -> PageAck:
    """The real sink's rule: the acknowledged prefix ends at the first failed record."""
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, BaseException):
            failure = RecordFailure(index, outcome, is_fatal_produce_error(outcome))
            return PageAck(records=len(futures), acked=index, failure=failure)
    return PageAck(records=len(futures), acked=len(futures), failure=None)


WriteHook = Callable[[bytes, bytes | None], None]


@dataclass
class FakeStore:
    """The offsets topic as a dict of key bytes; ``on_write`` may raise to inject failures."""

    connector: str = CONNECTOR
    data: dict[bytes, bytes] = field(default_factory=dict)
    writes: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    on_write: WriteHook | None = None
    hang: asyncio.Event | None = None  # while set, writes never return

    def retriable(self, error: BaseException) -> bool:
        return is_retriable(error)  # the adapter's own rule

    def get(self, partition: SourcePartition) -> bytes | None:
        return self.data.get(encode_key(self.connector, partition))

    def foreign_spelling(self, partition: SourcePartition) -> StoredEntry | None:
        canonical = encode_key(self.connector, partition)
        for key, value in self.data.items():
            parsed = parse_key(key)
            if key != canonical and parsed and parsed[1] == partition.as_dict():
                return StoredEntry(key=key, partition=parsed[1], value=value)
        return None

    async def write(
        self, partition: SourcePartition | Mapping[str, object], value: bytes | None
    ) -> None:
        await self.write_raw(encode_key(self.connector, partition), value)

    async def write_raw(self, key: bytes, value: bytes | None) -> None:
        await asyncio.sleep(0)
        if self.hang is not None and self.hang.is_set():
            await asyncio.Event().wait()
        if self.on_write is not None:
            self.on_write(key, value)
        self.writes.append((key, value))
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value

    def offset_of(self, partition: SourcePartition) -> bytes | None:
        return self.get(partition)

    def written_at(self, partition: SourcePartition) -> int | None:
        # Every value counts as written now: nothing in a fake topic predates it.
        return int(time.time() * 1000) if self.get(partition) is not None else None

    def moved_back(self, partition: SourcePartition) -> bool:
        return False
