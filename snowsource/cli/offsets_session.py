"""How an ``offsets`` command touches the offsets topic: its context, the running-process
guard, the store, and planned writes printed before/after and written in order."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Final, TextIO

from aiokafka.errors import KafkaError

from snowsource.adapters.kafka import (
    KafkaConnection,
    admin_client,
    existing_topics,
    wait_for_kafka,
)
from snowsource.adapters.membership import SESSION_TIMEOUT_MS, Member, describe_members
from snowsource.adapters.offset_store import OffsetStore
from snowsource.config.fields import TasksAssignment
from snowsource.config.models import Settings
from snowsource.core.errors import OffsetError, SnowsourceError
from snowsource.core.offsets_codec import SourceOffset, SourcePartition, StoredEntry, encode_key
from snowsource.core.table import TableSpec
from snowsource.engine.discovery import Collected, settings_discoverer
from snowsource.engine.table_specs import connector_specs, stream_specs
from snowsource.engine.wiring import kafka_connection, snow_client, snow_retry

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2

PROG: Final = "snowsource offsets"
#: How long the offsets tool waits for one discovery (``snow.discover``) before going on.
DISCOVERY_TIMEOUT_SECONDS: Final = 30.0
_CLIENT_ID: Final = "snowsource-offsets"


class UsageError(Exception):
    """Bad arguments or input detected before anything was contacted (exit 2)."""


class RefusedError(Exception):
    """The change was not made on purpose (exit 1)."""


@dataclass
class Context:
    settings: Settings
    conn: KafkaConnection
    tables: list[TableSpec]
    out: TextIO
    err: TextIO
    config_path: str | None = None

    def command(self, args: str) -> str:
        """``snowsource offsets ARGS`` as the user should type it: with their ``--config``."""
        config = f" --config {shlex.quote(self.config_path)}" if self.config_path else ""
        return f"`{PROG} {args}{config}`"

    @property
    def connector(self) -> str:
        return self.settings.name

    @property
    def topic(self) -> str:
        return self.settings.offset_storage_topic

    def table(self, alias: str) -> TableSpec:
        for spec in self.tables:
            if spec.alias == alias:
                return spec
        configured = ", ".join(spec.alias for spec in self.tables)
        raise UsageError(
            f"unknown table alias {alias!r}: the configuration has {configured} "
            f"(aliases are the keys under snow.tables)"
        )

    def warn(self, message: str) -> None:
        print(f"warning: {message}", file=self.err)


def make_context(settings: Settings, config_path: str | None = None) -> Context:
    # Every stream of the connector (delete streams as <alias>.deletes), whatever task owns it:
    # offsets belong to the connector.
    tables = connector_specs(settings)
    return Context(
        settings=settings,
        conn=kafka_connection(settings, client_id=_CLIENT_ID),
        tables=tables,
        out=sys.stdout,
        err=sys.stderr,
        config_path=config_path,
    )


async def add_discovered(ctx: Context) -> None:
    """With ``snow.discover``, add the tables one discovery selects (SKIPPED ones included) to
    the connector's tables, so their offsets are not listed as orphaned; a table no longer
    discovered is. Without an answer from ServiceNow, warn and go on with the configured ones."""
    settings = ctx.settings
    discover = settings.snow.discover
    if discover is None:
        return
    target = Collected()
    discoverer = settings_discoverer(
        settings, client=lambda: client, retry=snow_retry(settings), target=target
    )
    try:
        async with snow_client(settings) as client:
            await asyncio.wait_for(discoverer.discover_once(), DISCOVERY_TIMEOUT_SECONDS)
    except (TimeoutError, SnowsourceError) as exc:
        ctx.warn(
            f"snow.discover: could not ask ServiceNow which tables are discovered ({exc!r}); "
            f"offsets of discovered tables are listed as orphaned"
        )
        return
    if discoverer.state.discoveries == 0:
        ctx.warn("snow.discover: sys_db_object could not be read; discovered tables unknown")
        return
    for name in sorted({*target.names, *discoverer.state.skipped}):
        table = settings.discovered_table(name, discoverer.view_cursor(name))
        ctx.tables.extend(stream_specs(settings, name, table))


def timestamp_arg(option: str, value: str, build: Callable[[], SourceOffset]) -> SourceOffset:
    try:
        return build()
    except OffsetError as exc:
        raise UsageError(f"{option} {value!r}: {exc} (give it in UTC, quoted)") from None


# --------------------------------------------------------------------------------------------
# Kafka


async def connect(ctx: Context) -> None:
    await wait_for_kafka(ctx.conn, ctx.settings.kafka.startup_timeout_seconds)


async def guard(ctx: Context, force: bool) -> None:
    """Refuse while any process of the connector runs (it would overwrite the change)."""
    members = await describe_members(ctx.conn, ctx.connector)
    if not members:
        return
    running = "\n".join(f"  {m.describe()}" for m in sorted(members, key=_member_order))
    if force:
        ctx.warn(
            f"--force: writing although {len(members)} snowsource process(es) of connector "
            f"{ctx.connector!r} run; they may overwrite this change with their next commit:\n"
            f"{running}"
        )
        return
    group = ctx.settings.tasks_assignment == TasksAssignment.GROUP
    session = (ctx.settings.group_session_timeout_ms if group else SESSION_TIMEOUT_MS) // 1000
    rest_hint = (
        f"PUT /connectors/{ctx.connector}/stop does not help here: a STOPPED process still "
        f"runs. To change offsets under a STOPPED process use its REST API instead "
        f"(PATCH or DELETE /connectors/{ctx.connector}/offsets)."
    )
    if group:
        rest_hint = (
            f"PUT /connectors/{ctx.connector}/stop does not help here: a STOPPED member still "
            f"runs. To change offsets while the members run, stop every member through its "
            f"REST API, then PATCH or DELETE /connectors/{ctx.connector}/offsets on one of them."
        )
    raise RefusedError(
        f"refused: {len(members)} snowsource process(es) of connector {ctx.connector!r} "
        f"running (members of consumer group snowsource.{ctx.connector}):\n{running}\n"
        f"A running process would overwrite the change with its next offset commit.\n"
        f"Stop the snowsource process(es) (SIGTERM) and retry; after a crash this can take up "
        f"to {session} seconds (the group session timeout), or use --force.\n{rest_hint}"
    )


def _member_order(member: Member) -> tuple[int, int]:
    return member.task_id, member.started_ms


@contextlib.asynccontextmanager
async def open_store(ctx: Context, *, create: bool) -> AsyncIterator[OffsetStore]:
    if not create:
        async with admin_client(ctx.conn) as admin:
            found = await existing_topics(admin, [ctx.topic])
        if ctx.topic not in found:
            raise RefusedError(
                f"offsets topic {ctx.topic!r} does not exist on "
                f"{ctx.settings.kafka.bootstrap_servers}: nothing is stored for connector "
                f"{ctx.connector!r} there (the daemon creates the topic at its first start; "
                f"check offset.storage.topic and kafka.bootstrap.servers)"
            )
    store = OffsetStore(
        ctx.conn,
        topic=ctx.topic,
        connector=ctx.connector,
        partitions=ctx.settings.offset_storage_partitions,
        replication_factor=ctx.settings.offset_storage_replication_factor,
        create=create,
    )
    async with store:
        yield store


# --------------------------------------------------------------------------------------------
# Planned writes


@dataclass(frozen=True)
class Write:
    """One offsets record to write; ``partition`` set means canonical key bytes."""

    label: str
    key: bytes
    before: bytes | None
    after: bytes | None
    partition: SourcePartition | None = None


def _show(value: bytes | None, absent: str) -> str:
    return absent if value is None else value.decode("utf-8", "replace")


def print_plan(ctx: Context, writes: Sequence[Write]) -> None:
    for write in writes:
        key = write.key.decode("utf-8", "replace")
        print(f"{write.label}\n  key:    {key}", file=ctx.out)
        print(f"  before: {_show(write.before, '(none)')}", file=ctx.out)
        print(f"  after:  {_show(write.after, '(deleted)')}", file=ctx.out)


async def apply_writes(ctx: Context, store: OffsetStore, writes: Sequence[Write]) -> int:
    """Print and write ``writes`` in order; a failure names what was and was not written."""
    todo = [w for w in writes if w.before != w.after]
    if not todo:
        print("nothing to change", file=ctx.out)
        return EXIT_OK
    print_plan(ctx, todo)
    for done, write in enumerate(todo):
        try:
            if write.partition is not None:
                await store.write(write.partition, write.after)
            else:
                await store.write_raw(write.key, write.after)
        except (KafkaError, OSError) as exc:
            print(
                f"{PROG}: failed writing {write.label} ({exc!r}); {done} of {len(todo)} "
                f"record(s) were written before it, none after",
                file=ctx.err,
            )
            return EXIT_FAILED
    print(f"wrote {len(todo)} record(s) to offsets topic {ctx.topic!r} (acks=all)", file=ctx.out)
    return EXIT_OK


def spellings(store: OffsetStore, partition: SourcePartition) -> list[StoredEntry]:
    """Records of ``partition`` under non-canonical key bytes."""
    canonical = encode_key(store.connector, partition)
    wanted = partition.as_dict()
    return [e for e in store.entries() if e.key != canonical and e.partition == wanted]


def replace_writes(
    store: OffsetStore, partition: SourcePartition, after: bytes | None, label: str
) -> list[Write]:
    """Write ``after`` under the canonical key and tombstone every other spelling of it, so
    the daemon (which falls back to a foreign spelling) cannot read the old value again.
    Each write's ``before`` is what its own key holds, so an unchanged key is not rewritten."""
    foreign = spellings(store, partition)
    canonical = encode_key(store.connector, partition)
    writes = [Write(label, canonical, store.get(partition), after, partition)]
    writes.extend(
        Write(f"{label}: old key spelling", entry.key, entry.value, None) for entry in foreign
    )
    return writes


def label_of(partition: SourcePartition, alias: str | None) -> str:
    return f"{alias or 'orphaned'} (table {partition.table})"
