"""The offsets topic: the only code that reads or writes it (SPEC §4).

Records are Kafka Connect's: key ``["<connector>",{partition}]`` in canonical bytes, value the
offset JSON, ``null`` to delete. The store reads the whole topic once at start (every partition
from the beginning up to the end offsets taken then), keeps the last value per exact key bytes,
and writes with ``acks=all`` through the default murmur2 partitioner, like a Connect worker.

A missing offsets topic is created only when that cannot replay anything silently: on a first
run, when none of the given output topics holds a record. Otherwise the offsets were lost (the
topic deleted, the wrong cluster or name) and starting would re-emit every table from its
``start.timestamp``; the store refuses unless the operator asked for exactly that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Mapping
from typing import Any

import orjson
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from snowsource.adapters.kafka import (
    KafkaConnection,
    TopicConfigError,
    admin_client,
    close_fully,
    committed_reader,
    create_topic,
    describe_topic_configs,
    existing_topics,
    high_watermarks,
    is_retriable,
    start_fully,
    stop_client,
)
from snowsource.core.offsets_codec import SourcePartition, StoredEntry, encode_key, parse_key
from snowsource.core.retry import RetryPolicy
from snowsource.observability import metrics
from snowsource.runtime.aio import together
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource
from snowsource.runtime.retrying import DeadlineExceededError, retrying

log = structlog.get_logger(__name__)

#: How the offsets topic is created. Compacted, as Connect's; and its segments roll every ten
#: minutes, because compaction never touches the active segment: with Kafka's default (1 GiB or
#: 7 days) a topic written a few times a second grew for days before the cleaner could drop a
#: single superseded offset (the soak, docs/performance.md). A rolled segment keeps only each
#: key's latest value, so the topic stays a few segments of ten minutes' commits.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": "600000"}


# A freshly created topic takes a moment to appear in metadata, and its configuration can lag
# its metadata: both are asked again every 100 ms for up to 30 s.
_VISIBLE_RETRY = RetryPolicy(0.1, 0.1)
_VISIBLE_WITHIN = 30.0
#: How long a start that found output records looks again for an offsets topic another process
#: of the connector may have just created (metadata reaches every broker well within it).
_PEER_CREATED_WITHIN = 5.0


#: How long a load waits for another producer's open transaction before it stops in front of
#: it. A live one ends in milliseconds; a killed process's lasts until this process's own
#: generation fences it (each exactly-once generation reloads after that) or the broker times
#: it out after a minute, which a restart must not wait for.
OPEN_TRANSACTION_WAIT_SECONDS = 15.0


class _NotVisibleError(Exception):
    """The topic is not in the metadata yet."""


async def _visible_within(admin: Any, topic: str, seconds: float) -> dict[str, int] | None:
    """The topic's partition count once the metadata shows it, or None after ``seconds``."""
    try:
        async for attempt in retrying(
            _VISIBLE_RETRY,
            None,
            Deadline.after(seconds),
            retry_if=lambda exc: isinstance(exc, _NotVisibleError),
        ):
            with attempt:
                found = await existing_topics(admin, [topic])
                if topic not in found:
                    raise _NotVisibleError(topic)
                return found
    except DeadlineExceededError:
        pass
    return None


async def _wait_for_topic(admin: Any, topic: str) -> dict[str, int]:
    found = await _visible_within(admin, topic, _VISIBLE_WITHIN)
    if found is not None:
        return found
    raise TopicConfigError(f"topic {topic!r} was created but never became visible")


async def _describe_when_visible(admin: Any, topic: str) -> dict[str, str]:
    try:
        async for attempt in retrying(
            _VISIBLE_RETRY,
            None,
            Deadline.after(_VISIBLE_WITHIN),
            retry_if=lambda exc: isinstance(exc, KafkaError),
        ):
            with attempt:
                return await describe_topic_configs(admin, topic)
    except DeadlineExceededError as exc:
        raise TopicConfigError(
            f"could not read the configuration of topic {topic!r} within "
            f"{_VISIBLE_WITHIN:g}s: {exc.__cause__!r}"
        ) from exc
    raise AssertionError("unreachable: retrying ends by returning or raising")


class OffsetsTopicMissingError(TopicConfigError):
    """The offsets topic is gone while output topics hold records: starting would replay."""


async def topics_with_records(conn: KafkaConnection, topics: Collection[str]) -> list[str]:
    """Those of ``topics`` that exist and hold at least one record (sorted)."""
    wanted = sorted(set(topics))
    if not wanted:
        return []
    async with admin_client(conn) as admin:
        found = await existing_topics(admin, wanted)
    if not found:
        return []
    consumer = AIOKafkaConsumer(**conn.client_kwargs(), group_id=None, enable_auto_commit=False)
    try:
        await start_fully(consumer)
        tps = [TopicPartition(t, p) for t, count in found.items() for p in range(count)]
        # Beginning, not zero: a topic whose records all expired holds nothing to replay over.
        first = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
    finally:
        await close_fully(consumer)
    return sorted({tp.topic for tp in tps if end[tp] > first[tp]})


def missing_offsets_topic_message(offsets_topic: str, nonempty: list[str]) -> str:
    """Why a start is refused, and the two ways forward."""
    return (
        f"offsets topic {offsets_topic!r} does not exist, but output topic(s) "
        f"{', '.join(nonempty)} already hold records: the stored offsets are gone (topic deleted, "
        f"another cluster, or offset.storage.topic changed) and starting now would replay every "
        f"table from its start.timestamp. Either restore the offsets from an export with "
        f"'snowsource offsets import FILE', or accept one full replay with "
        f"'snowsource run --allow-full-replay'"
    )


def _cursor_of(value: bytes) -> tuple[str, str] | None:
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    ts, sys_id = parsed.get("timestamp"), parsed.get("sys_id")
    return (ts, sys_id) if isinstance(ts, str) and isinstance(sys_id, str) else None


class _Progress:
    """Which partitions of a load stood still too long (held by an open transaction)."""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer
        self._seen: dict[TopicPartition, tuple[int, float]] = {}

    async def stuck(self, partitions: set[TopicPartition], limit: float) -> set[TopicPartition]:
        now = time.monotonic()
        found: set[TopicPartition] = set()
        for tp in partitions:
            position = await self._consumer.position(tp)
            last = self._seen.get(tp)
            if last is None or last[0] != position:
                self._seen[tp] = (position, now)
            elif now - last[1] > limit:
                found.add(tp)
        if found:
            log.warning(
                "an open transaction held the offsets topic longer than the load waits; "
                "offsets committed after it are read at the next load",
                partitions=sorted(tp.partition for tp in found),
                waited_s=limit,
            )
        return found


class OffsetStore(AsyncResource):
    """Read and write one connector's source offsets in a Connect-compatible offsets topic."""

    def __init__(
        self,
        conn: KafkaConnection,
        *,
        topic: str,
        connector: str,
        partitions: int = 25,
        replication_factor: int = -1,
        create: bool = True,
        output_topics: Collection[str] | None = None,
        allow_full_replay: bool = False,
    ) -> None:
        """``output_topics``: the topics whose records tell a first run from lost offsets when
        the offsets topic is missing (None: create it regardless, as the offsets tool does when
        it writes offsets itself). ``allow_full_replay`` creates it even when they hold records.
        """
        self._conn = conn
        self.topic = topic
        self.connector = connector
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._create = create
        self._output_topics = None if output_topics is None else sorted(set(output_topics))
        self._allow_full_replay = allow_full_replay
        self._data: dict[bytes, bytes] = {}
        # Keys this process wrote while a reload was reading: their in-memory value is newer
        # than what the reload may have seen (in group mode a reload runs beside pollers).
        self._written_during_load: set[bytes] = set()
        # Loads running now: the set above is emptied only when none does, so concurrent loads
        # (every exactly-once generation reloads at its start) never forget each other's writes.
        self._loads_running = 0
        # When each live value was written (its record's Kafka timestamp, in ms): the dedup
        # rebuild tells a crash's leftovers from a rewound range by it.
        self._written_ms: dict[bytes, int] = {}
        # Per key: the highest cursor ever stored, and whether the live value lies below it.
        # The daemon's cursor never moves back, so a live value below an earlier one was put
        # there by an operator (rewind, set, PATCH, import) to have that range emitted again.
        self._peak: dict[bytes, tuple[str, str]] = {}
        self._moved_back: dict[bytes, bool] = {}
        self._warned: set[bytes] = set()  # unparseable keys already reported
        # Keys this process deleted (tombstoned) since it last began reading the topic. A Connect
        # worker keeps listing such a partition, with a null offset, until its own view of the
        # topic catches up with the tombstone: GET offsets right after DELETE shows them so.
        self._deleted_since_load: set[bytes] = set()
        self._producer: AIOKafkaProducer | None = None
        self._num_partitions = 0
        self._closed = False
        self.loaded = asyncio.Event()
        # Set once the start is allowed (the missing-topic rule passed, or the topic exists and
        # is compacted): what a refused start must not do (create output topics, ask
        # ServiceNow anything) waits for it, not for the rest of the store's start.
        self.allowed = asyncio.Event()

    def retriable(self, error: BaseException) -> bool:
        """Whether a retry may cure ``error`` (``engine.ports.KafkaErrors``): the one Kafka
        rule, :func:`~snowsource.adapters.kafka.is_retriable`."""
        return is_retriable(error)

    async def start(self) -> None:
        """Create or verify the topic, start the producer and read the topic to its end."""
        created = await self._ensure_topic()
        self.allowed.set()
        # Kept before start(): a start that fails half-way has connections close() must stop.
        self._producer = AIOKafkaProducer(**self._conn.client_kwargs(), acks="all")
        if created:
            # Created a moment ago, so empty: reading it would only wait for its partition
            # leaders (half a second or more on a fresh topic) to learn that.
            self._loaded({}, {})
            await self._producer.start()
        else:
            await together(self._producer.start(), self.load())

    async def close(self, deadline: Deadline | None = None) -> None:
        """Flush pending writes and close within ``deadline``. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self._producer is not None:
            await stop_client(self._producer, "the offsets producer", deadline)

    async def _ensure_topic(self) -> bool:
        """Create or verify the topic; True when this call created it."""
        created = False
        async with admin_client(self._conn) as admin:
            found = await existing_topics(admin, [self.topic])
            if self.topic not in found:
                if not self._create:
                    raise TopicConfigError(f"offsets topic {self.topic!r} does not exist")
                created_by_peer = await self._guard_replay(admin)
                self.allowed.set()  # the topic is created compacted: nothing left to refuse
                if not created_by_peer:
                    created = await create_topic(
                        admin,
                        self.topic,
                        partitions=self._partitions,
                        replication_factor=self._replication_factor,
                        configs=OFFSETS_TOPIC_CONFIGS,
                    )
                found = await _wait_for_topic(admin, self.topic)
            elif self._allow_full_replay:
                log.warning(
                    "--allow-full-replay has no effect: the offsets topic exists and every "
                    "table resumes from its offset. Remove the flag: left in place it would "
                    "turn the next loss of the offsets topic into a silent full replay",
                    topic=self.topic,
                )
            configs = await _describe_when_visible(admin, self.topic)
        policy = configs.get("cleanup.policy", "")
        if policy != "compact":
            # Same rule as a Connect worker: anything but exactly "compact" can lose offsets.
            raise TopicConfigError(
                f"offsets topic {self.topic!r} has cleanup.policy={policy!r}; it must be exactly "
                f"'compact' (fix it with: kafka-configs --alter --entity-type topics "
                f"--entity-name {self.topic} --add-config cleanup.policy=compact), or point "
                f"offset.storage.topic at another topic"
            )
        self._num_partitions = found[self.topic]
        return created

    async def _guard_replay(self, admin: Any) -> bool:
        """Refuse a start whose offsets were lost; True when another process created the topic.

        Output topics first, the offsets topic after: every process of a connector creates the
        offsets topic before it produces its first record, so output records seen now mean the
        topic existed before this look began, and only a deleted topic is still missing when
        looked at again. Looking in the other order mistook the first records of a group member
        started at the same moment for lost offsets (it created the topic and produced between
        this process's two looks).
        """
        if self._output_topics is None:
            return False
        nonempty = await self.output_topics_with_records(self._output_topics)
        if not nonempty:
            log.info("offsets topic does not exist yet; creating it (first run)", topic=self.topic)
            return False
        # A topic another broker just created may take a moment to reach this one's metadata.
        if await _visible_within(admin, self.topic, _PEER_CREATED_WITHIN) is not None:
            log.info(
                "offsets topic was created by another process of this connector meanwhile",
                topic=self.topic,
            )
            return True
        if self._allow_full_replay:
            log.warning(
                "offsets topic does not exist; --allow-full-replay: creating it, every table "
                "replays from its start.timestamp",
                topic=self.topic,
                nonempty_output_topics=nonempty,
            )
            return False
        raise OffsetsTopicMissingError(missing_offsets_topic_message(self.topic, nonempty))

    async def output_topics_with_records(self, topics: list[str]) -> list[str]:
        """Those of ``topics`` that hold records: the start's look for lost offsets."""
        return await topics_with_records(self._conn, topics)

    async def load(self) -> None:
        """(Re)read every partition from the beginning to the high watermarks taken now.

        Read committed, but up to the high watermark rather than the last stable offset:
        another producer's open transaction (another table's offset record, a killed process's
        until the broker aborts it) must not hide an offset committed after it began, so the
        load waits for it to end, for up to :data:`OPEN_TRANSACTION_WAIT_SECONDS`.
        """
        if self._loads_running == 0:
            self._written_during_load = set()
        self._loads_running += 1
        try:
            data, written = await self._read_all()
        finally:
            self._loads_running -= 1
        for key in self._written_during_load:
            if key in self._data:
                data[key] = self._data[key]
                written[key] = self._written_ms[key]
                self._track(key, self._data[key])
            else:
                data.pop(key, None)
        self._loaded(data, written)

    async def _read_all(self) -> tuple[dict[bytes, bytes], dict[bytes, int]]:
        """Every live value of the topic and when it was written."""
        tps = [TopicPartition(self.topic, p) for p in range(self._num_partitions)]
        end = await high_watermarks(self._conn, tps)
        # Only committed offsets count: an aborted exactly-once transaction never moves a
        # table; an open one is waited for (the position stops at it until it ends).
        consumer = committed_reader(self._conn)
        data: dict[bytes, bytes] = {}
        written: dict[bytes, int] = {}
        try:
            await start_fully(consumer)
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            remaining = {tp for tp in tps if end[tp] > 0}
            waiting = _Progress(consumer)
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=1000, max_records=10000)
                for records in batch.values():
                    for record in records:
                        if record.key is None:
                            continue
                        if record.value is None:
                            data.pop(record.key, None)
                        else:
                            data[record.key] = record.value
                            written[record.key] = record.timestamp
                            self._track(record.key, record.value)
                remaining = {tp for tp in remaining if await consumer.position(tp) < end[tp]}
                remaining -= await waiting.stuck(remaining, OPEN_TRANSACTION_WAIT_SECONDS)
        finally:
            await close_fully(consumer)
        return data, written

    def _loaded(self, data: dict[bytes, bytes], written: dict[bytes, int]) -> None:
        self._data = data
        # A load reads every tombstone written before it began: only those written while it
        # read are still news to this store's view (GET lists them with a null offset).
        self._deleted_since_load &= self._written_during_load
        self._written_ms = written
        for key in data:
            if key not in self._warned and parse_key(key) is None:
                # Connect ignores such records too; they may belong to another tool.
                self._warned.add(key)
                log.warning("ignoring offsets record with unparseable key", key=key[:200])
        self.loaded.set()
        log.info("offsets loaded", topic=self.topic, keys=len(data))

    def entries(self) -> list[StoredEntry]:
        """Live records of this connector whose key parses (others are logged and ignored)."""
        found: list[StoredEntry] = []
        for key, value in self._data.items():
            parsed = parse_key(key)
            if parsed is None:
                continue  # reported once by load()
            name, partition = parsed
            if name == self.connector:
                found.append(StoredEntry(key=key, partition=partition, value=value))
        return found

    def deleted_since_load(self) -> frozenset[bytes]:
        """Key bytes this process tombstoned since its last load and has not written since."""
        return frozenset(self._deleted_since_load)

    def get(self, partition: SourcePartition) -> bytes | None:
        """The stored value under the canonical key, if any."""
        return self._data.get(encode_key(self.connector, partition))

    def written_at(self, partition: SourcePartition) -> int | None:
        """When the canonical key's live value was written (Kafka timestamp, ms), if stored."""
        key = encode_key(self.connector, partition)
        return self._written_ms.get(key) if key in self._data else None

    def moved_back(self, partition: SourcePartition) -> bool:
        """True when the live offset lies below a cursor stored earlier under the same key."""
        return self._moved_back.get(encode_key(self.connector, partition), False)

    def _track(self, key: bytes, value: bytes) -> None:
        cursor = _cursor_of(value)
        if cursor is None:
            return
        peak = self._peak.get(key)
        self._moved_back[key] = peak is not None and cursor < peak
        self._peak[key] = cursor if peak is None else max(peak, cursor)

    def foreign_spelling(self, partition: SourcePartition) -> StoredEntry | None:
        """A record for ``partition`` stored under non-canonical key bytes (key order, escaping)."""
        canonical = encode_key(self.connector, partition)
        wanted = partition.as_dict()
        for entry in self.entries():
            if entry.key != canonical and entry.partition == wanted:
                return entry
        return None

    async def write(
        self, partition: SourcePartition | Mapping[str, object], value: bytes | None
    ) -> None:
        """Write (or with ``None`` delete) one partition's offset; returns once Kafka acked it."""
        await self.write_raw(encode_key(self.connector, partition), value)

    async def write_raw(self, key: bytes, value: bytes | None) -> None:
        """Write exact key bytes (used to tombstone a foreign spelling)."""
        if self._producer is None or self._closed:
            raise RuntimeError("offset store is not started")
        began = time.monotonic()
        metadata = await self._producer.send_and_wait(self.topic, value, key=key)
        metrics.OFFSET_COMMIT_SECONDS.observe(time.monotonic() - began)
        self.written_elsewhere(key, value, metadata.timestamp)

    def written_elsewhere(self, key: bytes, value: bytes | None, stamp_ms: int = -1) -> None:
        """Take note of a write Kafka acknowledged (or a transaction committed) that did not go
        through :meth:`write_raw`: an exactly-once table writes its offsets in its own
        transactions, and a restart of that table reads them from here."""
        self._written_during_load.add(key)
        if value is None:
            self._data.pop(key, None)
            self._deleted_since_load.add(key)
        else:
            self._deleted_since_load.discard(key)
            self._data[key] = value
            self._track(key, value)
            self._written_ms[key] = stamp_ms if stamp_ms >= 0 else int(time.time() * 1000)

    @property
    def num_partitions(self) -> int:
        """Partition count of the offsets topic."""
        return self._num_partitions
