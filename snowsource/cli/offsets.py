"""``snowsource offsets``: inspect and change stored offsets in the offsets topic (SPEC §8).

Works directly on the offsets topic with the same configuration file as the daemon, so it
needs nothing but Kafka: ``list``, ``export`` (read-only; they never create the topic) and
``rewind``, ``set``, ``delete``, ``reset``, ``import`` (writes). Every write is validated like
the daemon validates offsets, printed before/after, written under canonical key bytes with
``acks=all`` and refused while any process of the connector is a member of its consumer group
(SPEC §10) unless ``--force`` is given.

Exit codes: 0 done; 2 usage or configuration error (nothing was contacted, nothing written);
1 refused, or failed (Kafka, missing offsets topic, a write that did not succeed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shlex
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

import orjson
import structlog
from aiokafka.errors import KafkaError

from snowsource.adapters.kafka import (
    KafkaConnection,
    KafkaUnavailableError,
    TopicConfigError,
    admin_client,
    existing_topics,
    wait_for_kafka,
)
from snowsource.adapters.membership import SESSION_TIMEOUT_MS, Member, describe_members
from snowsource.adapters.offset_store import OffsetStore
from snowsource.config.settings import Settings, load_config
from snowsource.core.errors import ConfigError, OffsetError
from snowsource.core.offsets_codec import (
    SourceOffset,
    SourcePartition,
    StoredEntry,
    encode_key,
    encode_value,
)
from snowsource.core.offsets_plan import (
    ListedOffset,
    OffsetChange,
    list_offsets,
    parse_offsets_document,
    rest_listing,
    rewind_offset,
    set_offset,
    validate_changes,
)
from snowsource.core.table import TableSpec
from snowsource.engine.supervisor import kafka_connection, table_spec

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "amain", "main"]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2

_PROG: Final = "snowsource offsets"
_CLIENT_ID: Final = "snowsource-offsets"


class _UsageError(Exception):
    """Bad arguments or input detected before anything was contacted (exit 2)."""


class _RefusedError(Exception):
    """The change was not made on purpose (exit 1)."""


# --------------------------------------------------------------------------------------------
# Arguments


def _parser() -> argparse.ArgumentParser:
    config_help = "configuration file (default: $SNOWSOURCE_CONFIG, then ./config.yaml)"
    force_help = (
        "write even while snowsource processes of this connector run (they may overwrite the "
        "change with their next commit)"
    )
    # --config is accepted before and after the subcommand; SUPPRESS keeps a subcommand's
    # absent option from overwriting the value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help=config_help)

    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Inspect, rewind and reset the stored offsets of this connector.",
    )
    parser.add_argument("--config", default=None, help=config_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", parents=[common], help="one line per stored partition")
    p.add_argument("--json", action="store_true", help="print the Connect REST shape")

    p = sub.add_parser("rewind", parents=[common], help="re-read a table from a point in time")
    p.add_argument("alias")
    p.add_argument("--to", required=True, metavar="'YYYY-MM-DD HH:MM:SS'", help="UTC")
    p.add_argument("--force", action="store_true", help=force_help)

    p = sub.add_parser("set", parents=[common], help="set a table's cursor explicitly")
    p.add_argument("alias")
    p.add_argument("--timestamp", required=True, metavar="'YYYY-MM-DD HH:MM:SS'", help="UTC")
    p.add_argument(
        "--sys-id", required=True, help="the id.field value of the last row already emitted"
    )
    p.add_argument("--force", action="store_true", help=force_help)

    p = sub.add_parser(
        "delete", parents=[common], help="delete offsets (the table replays from start.timestamp)"
    )
    p.add_argument("alias", nargs="?")
    p.add_argument(
        "--orphaned",
        action="store_true",
        help="delete every stored partition no configured table reads (instead of an alias)",
    )
    p.add_argument("--force", action="store_true", help=force_help)

    p = sub.add_parser("reset", parents=[common], help="delete every offset of this connector")
    p.add_argument("--yes", action="store_true", help="really delete them")
    p.add_argument("--force", action="store_true", help=force_help)

    p = sub.add_parser("export", parents=[common], help="write the offsets to FILE (Connect JSON)")
    p.add_argument("file", help="output file, - for stdout")

    p = sub.add_parser("import", parents=[common], help="write the offsets in FILE (Connect JSON)")
    p.add_argument("file", help="input file, - for stdin")
    p.add_argument("--force", action="store_true", help=force_help)
    return parser


# --------------------------------------------------------------------------------------------
# Context


@dataclass
class _Context:
    settings: Settings
    conn: KafkaConnection
    tables: list[TableSpec]
    out: TextIO
    err: TextIO
    config_path: str | None = None

    def command(self, args: str) -> str:
        """``snowsource offsets ARGS`` as the user should type it: with their ``--config``."""
        config = f" --config {shlex.quote(self.config_path)}" if self.config_path else ""
        return f"`{_PROG} {args}{config}`"

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
        raise _UsageError(
            f"unknown table alias {alias!r}: the configuration has {configured} "
            f"(aliases are the keys under snow.tables)"
        )

    def warn(self, message: str) -> None:
        print(f"warning: {message}", file=self.err)


def _context(settings: Settings, config_path: str | None = None) -> _Context:
    # Every table of the connector, whatever task owns it: offsets belong to the connector.
    tables = [table_spec(settings, alias, table) for alias, table in settings.tables.items()]
    return _Context(
        settings=settings,
        conn=kafka_connection(settings, client_id=_CLIENT_ID),
        tables=tables,
        out=sys.stdout,
        err=sys.stderr,
        config_path=config_path,
    )


def _timestamp_arg(option: str, value: str, build: Callable[[], SourceOffset]) -> SourceOffset:
    try:
        return build()
    except OffsetError as exc:
        raise _UsageError(f"{option} {value!r}: {exc} (give it in UTC, quoted)") from None


# --------------------------------------------------------------------------------------------
# Kafka


async def _connect(ctx: _Context) -> None:
    await wait_for_kafka(ctx.conn, ctx.settings.kafka.startup_timeout_seconds)


async def _guard(ctx: _Context, force: bool) -> None:
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
    session = SESSION_TIMEOUT_MS // 1000
    raise _RefusedError(
        f"refused: {len(members)} snowsource process(es) of connector {ctx.connector!r} "
        f"running (members of consumer group snowsource.{ctx.connector}):\n{running}\n"
        f"A running process would overwrite the change with its next offset commit.\n"
        f"Stop the snowsource process(es) (SIGTERM) and retry; after a crash this can take up "
        f"to {session} seconds (the group session timeout), or use --force.\n"
        f"PUT /connectors/{ctx.connector}/stop does not help here: a STOPPED process still "
        f"runs. To change offsets under a STOPPED process use its REST API instead "
        f"(PATCH or DELETE /connectors/{ctx.connector}/offsets)."
    )


def _member_order(member: Member) -> tuple[int, int]:
    return member.task_id, member.started_ms


@contextlib.asynccontextmanager
async def _store(ctx: _Context, *, create: bool) -> AsyncIterator[OffsetStore]:
    if not create:
        async with admin_client(ctx.conn) as admin:
            found = await existing_topics(admin, [ctx.topic])
        if ctx.topic not in found:
            raise _RefusedError(
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
class _Write:
    """One offsets record to write; ``partition`` set means canonical key bytes."""

    label: str
    key: bytes
    before: bytes | None
    after: bytes | None
    partition: SourcePartition | None = None


def _show(value: bytes | None, absent: str) -> str:
    return absent if value is None else value.decode("utf-8", "replace")


def _print_plan(ctx: _Context, writes: Sequence[_Write]) -> None:
    for write in writes:
        key = write.key.decode("utf-8", "replace")
        print(f"{write.label}\n  key:    {key}", file=ctx.out)
        print(f"  before: {_show(write.before, '(none)')}", file=ctx.out)
        print(f"  after:  {_show(write.after, '(deleted)')}", file=ctx.out)


async def _apply(ctx: _Context, store: OffsetStore, writes: Sequence[_Write]) -> int:
    """Print and write ``writes`` in order; a failure names what was and was not written."""
    todo = [w for w in writes if w.before != w.after]
    if not todo:
        print("nothing to change", file=ctx.out)
        return EXIT_OK
    _print_plan(ctx, todo)
    for done, write in enumerate(todo):
        try:
            if write.partition is not None:
                await store.write(write.partition, write.after)
            else:
                await store.write_raw(write.key, write.after)
        except (KafkaError, OSError) as exc:
            print(
                f"{_PROG}: failed writing {write.label} ({exc!r}); {done} of {len(todo)} "
                f"record(s) were written before it, none after",
                file=ctx.err,
            )
            return EXIT_FAILED
    print(f"wrote {len(todo)} record(s) to offsets topic {ctx.topic!r} (acks=all)", file=ctx.out)
    return EXIT_OK


def _spellings(store: OffsetStore, partition: SourcePartition) -> list[StoredEntry]:
    """Records of ``partition`` under non-canonical key bytes."""
    canonical = encode_key(store.connector, partition)
    wanted = partition.as_dict()
    return [e for e in store.entries() if e.key != canonical and e.partition == wanted]


def _replace(
    store: OffsetStore, partition: SourcePartition, after: bytes | None, label: str
) -> list[_Write]:
    """Write ``after`` under the canonical key and tombstone every other spelling of it, so
    the daemon (which falls back to a foreign spelling) cannot read the old value again.
    Each write's ``before`` is what its own key holds, so an unchanged key is not rewritten."""
    foreign = _spellings(store, partition)
    canonical = encode_key(store.connector, partition)
    writes = [_Write(label, canonical, store.get(partition), after, partition)]
    writes.extend(
        _Write(f"{label}: old key spelling", entry.key, entry.value, None) for entry in foreign
    )
    return writes


def _label(partition: SourcePartition, alias: str | None) -> str:
    return f"{alias or 'orphaned'} (table {partition.table})"


# --------------------------------------------------------------------------------------------
# Commands


async def _cmd_list(ctx: _Context, args: argparse.Namespace) -> int:
    await _connect(ctx)
    async with _store(ctx, create=False) as store:
        listed = list_offsets(ctx.connector, store.entries(), ctx.tables)
    if args.json:
        print(_json(rest_listing(listed)), file=ctx.out)
        return EXIT_OK
    _print_listing(ctx, listed)
    return EXIT_OK


def _json(document: object) -> str:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


def _print_listing(ctx: _Context, listed: Sequence[ListedOffset]) -> None:
    if not listed:
        print(f"no offsets stored for connector {ctx.connector!r} in {ctx.topic!r}", file=ctx.out)
    else:
        header = ("ALIAS", "TABLE", "MATCH", "TIMESTAMP", "SYS_ID", "PHASE")
        rows = [
            (
                item.alias or "orphaned",
                item.table,
                str(item.match),
                item.field("timestamp"),
                item.field("sys_id") or '""',
                item.field("phase"),
            )
            for item in listed
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(),
                file=ctx.out,
            )
    notes = [
        f"  {item.alias or 'orphaned'} {item.table} ({item.match}): {item.note}; partition "
        f"{orjson.dumps(item.partition).decode()}"
        for item in listed
        if item.note
    ]
    notes.extend(
        f"  {item.alias or 'orphaned'} {item.table}: stored under non-canonical key bytes "
        f"{item.key.decode('utf-8', 'replace')} (the daemon rewrites it canonically on start)"
        for item in listed
        if not item.canonical
    )
    stored = {item.alias for item in listed}
    missing = [spec for spec in ctx.tables if spec.alias not in stored]
    if missing:
        notes.append(
            "  no stored offset (starts from start.timestamp): "
            + ", ".join(f"{spec.alias} ({spec.start_timestamp})" for spec in missing)
        )
    if notes:
        print("notes:", file=ctx.out)
        for note in notes:
            print(note, file=ctx.out)


async def _cmd_export(ctx: _Context, args: argparse.Namespace) -> int:
    await _connect(ctx)
    async with _store(ctx, create=False) as store:
        listed = list_offsets(ctx.connector, store.entries(), ctx.tables)
    broken = [item for item in listed if item.offset is None]
    if broken:
        raise _RefusedError(
            "cannot export: these stored values are not JSON (delete them first with "
            f"{ctx.command('delete ALIAS')} or {ctx.command('delete --orphaned')}): "
            + "; ".join(item.key.decode("utf-8", "replace") for item in broken)
        )
    text = _json(rest_listing(listed)) + "\n"
    if args.file == "-":
        ctx.out.write(text)
        return EXIT_OK
    await asyncio.to_thread(Path(args.file).write_text, text, encoding="utf-8")
    unusable = [item for item in listed if item.match in ("invalid", "unknown")]
    for item in unusable:
        ctx.warn(
            f"{item.alias or 'orphaned'} {item.table} ({item.match}: {item.note}) is exported "
            f"as stored, but `offsets import` will refuse it"
        )
    print(f"exported {len(listed)} partition(s) of {ctx.connector!r} to {args.file}", file=ctx.out)
    return EXIT_OK


async def _cmd_rewind(ctx: _Context, args: argparse.Namespace) -> int:
    spec = ctx.table(args.alias)
    offset = _timestamp_arg(
        "--to", args.to, lambda: rewind_offset(spec.partition, args.to, alias=spec.alias)
    )
    return await _write_offset(ctx, args, spec, offset)


async def _cmd_set(ctx: _Context, args: argparse.Namespace) -> int:
    spec = ctx.table(args.alias)
    offset = _timestamp_arg(
        "--timestamp",
        args.timestamp,
        lambda: set_offset(spec.partition, args.timestamp, args.sys_id, alias=spec.alias),
    )
    return await _write_offset(ctx, args, spec, offset)


async def _write_offset(
    ctx: _Context, args: argparse.Namespace, spec: TableSpec, offset: SourceOffset
) -> int:
    await _connect(ctx)
    await _guard(ctx, args.force)
    async with _store(ctx, create=True) as store:
        writes = _replace(
            store, spec.partition, encode_value(offset), _label(spec.partition, spec.alias)
        )
        return await _apply(ctx, store, writes)


async def _cmd_delete(ctx: _Context, args: argparse.Namespace) -> int:
    if (args.alias is None) == (not args.orphaned):
        raise _UsageError("delete takes either an ALIAS or --orphaned")
    spec = ctx.table(args.alias) if args.alias else None
    await _connect(ctx)
    await _guard(ctx, args.force)
    async with _store(ctx, create=False) as store:
        if spec is None:
            writes = _orphan_tombstones(ctx, store)
        else:
            label = _label(spec.partition, spec.alias)
            writes = [w for w in _replace(store, spec.partition, None, label) if w.before]
            if spec.legacy_partition != spec.partition:
                # The daemon adopts the Java connector's offset when a table has none: delete
                # it too, or "delete" would resume from there instead of start.timestamp.
                legacy = _replace(
                    store,
                    spec.legacy_partition,
                    None,
                    f"{spec.alias}: the Java connector's offset (legacy fingerprint) the daemon "
                    f"would otherwise adopt",
                )
                writes.extend(w for w in legacy if w.before)
        if not writes:
            what = "orphaned partitions" if spec is None else f"offset for {spec.alias!r}"
            print(f"no {what} stored; nothing to delete", file=ctx.out)
            return EXIT_OK
        return await _apply(ctx, store, writes)


def _orphan_tombstones(ctx: _Context, store: OffsetStore) -> list[_Write]:
    writes: list[_Write] = []
    for entry in store.entries():
        (item,) = list_offsets(ctx.connector, [entry], ctx.tables)
        if item.alias is None:
            writes.append(
                _Write(f"orphaned {item.table} ({item.match})", entry.key, entry.value, None)
            )
    return writes


async def _cmd_reset(ctx: _Context, args: argparse.Namespace) -> int:
    await _connect(ctx)
    if args.yes:
        await _guard(ctx, args.force)
    async with _store(ctx, create=False) as store:
        entries = store.entries()
        if not args.yes:
            listed = list_offsets(ctx.connector, entries, ctx.tables)
            _print_listing(ctx, listed)
            raise _RefusedError(
                f"refused: reset deletes every offset of connector {ctx.connector!r} "
                f"({len(entries)} record(s) listed above; every table then replays from its "
                f"start.timestamp); run {ctx.command('reset --yes')} to do it"
            )
        writes = []
        for entry in entries:
            (item,) = list_offsets(ctx.connector, [entry], ctx.tables)
            writes.append(_Write(_label_item(item), entry.key, entry.value, None))
        if not writes:
            print(
                f"no offsets stored for connector {ctx.connector!r}; nothing to reset", file=ctx.out
            )
            return EXIT_OK
        return await _apply(ctx, store, writes)


def _label_item(item: ListedOffset) -> str:
    return f"{item.alias or 'orphaned'} (table {item.table})"


async def _cmd_import(ctx: _Context, args: argparse.Namespace) -> int:
    changes = _read_import(args.file)
    validated = _validate_import(ctx, changes)
    await _connect(ctx)
    await _guard(ctx, args.force)
    async with _store(ctx, create=True) as store:
        writes: list[_Write] = []
        for change in validated:
            value = encode_value(change.offset)
            label = _label(change.partition, change.alias)
            writes.extend(_replace(store, change.partition, value, label))
        return await _apply(ctx, store, writes)


def _read_import(file: str) -> list[tuple[object, object]]:
    try:
        raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise _UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _UsageError(f"{file} is not JSON: {exc}") from None
    try:
        return parse_offsets_document(document)
    except OffsetError as exc:
        raise _UsageError(f"{file}: {exc}") from None


def _validate_import(ctx: _Context, pairs: list[tuple[object, object]]) -> list[OffsetChange]:
    try:
        changes = validate_changes(pairs, ctx.tables, allow_unconfigured=True)
    except OffsetError as exc:
        raise _UsageError(f"nothing was written; invalid entries:\n{exc}") from None
    for change in changes:
        if change.alias is None and change.offset is not None:
            ctx.warn(
                f"importing an offset no configured table reads (table {change.partition.table}, "
                f"query_fingerprint {change.partition.query_fingerprint}); it is kept for when "
                f"that table is configured again"
            )
    return changes


_Command = Callable[[_Context, argparse.Namespace], Awaitable[int]]
_COMMANDS: Final[dict[str, _Command]] = {
    "list": _cmd_list,
    "export": _cmd_export,
    "rewind": _cmd_rewind,
    "set": _cmd_set,
    "delete": _cmd_delete,
    "reset": _cmd_reset,
    "import": _cmd_import,
}


# --------------------------------------------------------------------------------------------
# Entry points


@contextlib.contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """Library log lines go to stderr (WARNING and up) so stdout stays the command's output;
    the previous logging configuration is restored (the daemon may share this process)."""
    previous = structlog.get_config() if structlog.is_configured() else None
    aiokafka_logger = logging.getLogger("aiokafka")
    aiokafka_level = aiokafka_logger.level
    # aiokafka logs retriable conditions (a leader moving right after topic creation) at ERROR;
    # whatever really fails reaches us as an exception and is reported once, plainly.
    aiokafka_logger.setLevel(logging.CRITICAL)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        aiokafka_logger.setLevel(aiokafka_level)
        if previous is None:
            structlog.reset_defaults()
        else:
            structlog.configure(**previous)


async def amain(argv: Sequence[str]) -> int:
    """``snowsource offsets ARGS`` inside a running event loop; returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return EXIT_OK if exc.code in (0, None) else EXIT_USAGE
    if args.command is None:
        parser.print_usage(sys.stderr)
        print(f"{_PROG}: a command is required", file=sys.stderr)
        return EXIT_USAGE
    with _logs_to_stderr():
        try:
            loaded = load_config(args.config)
        except ConfigError as exc:
            print(f"{_PROG}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        ctx = _context(loaded.settings, args.config)
        for warning in loaded.warnings:
            ctx.warn(warning)
        try:
            return await _COMMANDS[args.command](ctx, args)
        except _UsageError as exc:
            print(f"{_PROG}: {exc}", file=ctx.err)
            return EXIT_USAGE
        except _RefusedError as exc:
            print(f"{_PROG}: {exc}", file=ctx.err)
            return EXIT_FAILED
        except (KafkaUnavailableError, TopicConfigError, OffsetError) as exc:
            print(f"{_PROG}: {exc}", file=ctx.err)
            return EXIT_FAILED
        except BrokenPipeError:
            raise  # the reader went away (`| head`): main() ends quietly
        except (KafkaError, OSError) as exc:
            print(f"{_PROG}: failed: {exc!r}", file=ctx.err)
            return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point used by ``snowsource offsets`` (``argv`` without the word ``offsets``)."""
    try:
        code = asyncio.run(amain(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # a closed pipe shows here, while we can still handle it
    except BrokenPipeError:
        # `offsets list | head`: the reader has what it wanted. Point stdout at /dev/null so
        # the interpreter's own flush at exit stays quiet too; exit 1, as the output is cut.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_FAILED
    return code
