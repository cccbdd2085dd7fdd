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
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

import orjson
import structlog
from aiokafka.errors import KafkaError

from snowsource.adapters.kafka import KafkaUnavailableError, TopicConfigError
from snowsource.adapters.offset_store import OffsetStore
from snowsource.cli.offsets_session import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Context,
    RefusedError,
    UsageError,
    Write,
    add_discovered,
    apply_writes,
    connect,
    guard,
    label_of,
    make_context,
    open_store,
    replace_writes,
    timestamp_arg,
)
from snowsource.config.loader import load_config
from snowsource.core.errors import ConfigError, OffsetError
from snowsource.core.offsets_codec import SourceOffset, encode_value
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

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "amain", "main"]


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
        prog=PROG,
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
# Commands


async def _cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    await connect(ctx)
    async with open_store(ctx, create=False) as store:
        listed = list_offsets(ctx.connector, store.entries(), ctx.tables)
    if args.json:
        print(_json(rest_listing(listed)), file=ctx.out)
        return EXIT_OK
    _print_listing(ctx, listed)
    return EXIT_OK


def _json(document: object) -> str:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


def _print_listing(ctx: Context, listed: Sequence[ListedOffset]) -> None:
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


async def _cmd_export(ctx: Context, args: argparse.Namespace) -> int:
    await connect(ctx)
    async with open_store(ctx, create=False) as store:
        listed = list_offsets(ctx.connector, store.entries(), ctx.tables)
    broken = [item for item in listed if item.offset is None]
    if broken:
        raise RefusedError(
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


async def _cmd_rewind(ctx: Context, args: argparse.Namespace) -> int:
    spec = ctx.table(args.alias)
    offset = timestamp_arg(
        "--to",
        args.to,
        lambda: rewind_offset(spec.partition, args.to, id_field=spec.id_field, alias=spec.alias),
    )
    return await _write_offset(ctx, args, spec, offset)


async def _cmd_set(ctx: Context, args: argparse.Namespace) -> int:
    spec = ctx.table(args.alias)
    offset = timestamp_arg(
        "--timestamp",
        args.timestamp,
        lambda: set_offset(
            spec.partition, args.timestamp, args.sys_id, id_field=spec.id_field, alias=spec.alias
        ),
    )
    return await _write_offset(ctx, args, spec, offset)


async def _write_offset(
    ctx: Context, args: argparse.Namespace, spec: TableSpec, offset: SourceOffset
) -> int:
    await connect(ctx)
    await guard(ctx, args.force)
    async with open_store(ctx, create=True) as store:
        writes = replace_writes(
            store, spec.partition, encode_value(offset), label_of(spec.partition, spec.alias)
        )
        return await apply_writes(ctx, store, writes)


async def _cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    if (args.alias is None) == (not args.orphaned):
        raise UsageError("delete takes either an ALIAS or --orphaned")
    spec = ctx.table(args.alias) if args.alias else None
    await connect(ctx)
    await guard(ctx, args.force)
    async with open_store(ctx, create=False) as store:
        if spec is None:
            writes = _orphan_tombstones(ctx, store)
        else:
            label = label_of(spec.partition, spec.alias)
            writes = [w for w in replace_writes(store, spec.partition, None, label) if w.before]
            writes.extend(_legacy_tombstones(store, spec))
        if not writes:
            what = "orphaned partitions" if spec is None else f"offset for {spec.alias!r}"
            print(f"no {what} stored; nothing to delete", file=ctx.out)
            return EXIT_OK
        return await apply_writes(ctx, store, writes)


def _legacy_tombstones(store: OffsetStore, spec: TableSpec) -> list[Write]:
    """Deleting ``spec``'s offset: its Java connector's offset goes too. The daemon adopts that
    one when a table has none, so it would resume from there instead of start.timestamp."""
    if spec.legacy_partition == spec.partition:
        return []
    label = (
        f"{spec.alias}: the Java connector's offset (legacy fingerprint) the daemon would "
        f"otherwise adopt"
    )
    return [w for w in replace_writes(store, spec.legacy_partition, None, label) if w.before]


def _orphan_tombstones(ctx: Context, store: OffsetStore) -> list[Write]:
    writes: list[Write] = []
    for entry in store.entries():
        (item,) = list_offsets(ctx.connector, [entry], ctx.tables)
        if item.alias is None:
            writes.append(
                Write(f"orphaned {item.table} ({item.match})", entry.key, entry.value, None)
            )
    return writes


async def _cmd_reset(ctx: Context, args: argparse.Namespace) -> int:
    await connect(ctx)
    if args.yes:
        await guard(ctx, args.force)
    async with open_store(ctx, create=False) as store:
        entries = store.entries()
        if not args.yes:
            listed = list_offsets(ctx.connector, entries, ctx.tables)
            _print_listing(ctx, listed)
            raise RefusedError(
                f"refused: reset deletes every offset of connector {ctx.connector!r} "
                f"({len(entries)} record(s) listed above; every table then replays from its "
                f"start.timestamp); run {ctx.command('reset --yes')} to do it"
            )
        writes = []
        for entry in entries:
            (item,) = list_offsets(ctx.connector, [entry], ctx.tables)
            writes.append(Write(_label_item(item), entry.key, entry.value, None))
        if not writes:
            print(
                f"no offsets stored for connector {ctx.connector!r}; nothing to reset", file=ctx.out
            )
            return EXIT_OK
        return await apply_writes(ctx, store, writes)


def _label_item(item: ListedOffset) -> str:
    return f"{item.alias or 'orphaned'} (table {item.table})"


async def _cmd_import(ctx: Context, args: argparse.Namespace) -> int:
    changes = _read_import(args.file)
    validated = _validate_import(ctx, changes)
    await connect(ctx)
    await guard(ctx, args.force)
    async with open_store(ctx, create=True) as store:
        writes: list[Write] = []
        for change in validated:
            value = encode_value(change.offset)
            label = label_of(change.partition, change.alias)
            writes.extend(replace_writes(store, change.partition, value, label))
            if change.offset is None:  # as PATCH and delete do
                for spec in ctx.tables:
                    if spec.partition == change.partition:
                        writes.extend(_legacy_tombstones(store, spec))
        return await apply_writes(ctx, store, writes)


def _read_import(file: str) -> list[tuple[object, object]]:
    try:
        raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{file} is not JSON: {exc}") from None
    try:
        return parse_offsets_document(document)
    except OffsetError as exc:
        raise UsageError(f"{file}: {exc}") from None


def _validate_import(ctx: Context, pairs: list[tuple[object, object]]) -> list[OffsetChange]:
    try:
        changes = validate_changes(pairs, ctx.tables, allow_unconfigured=True)
    except OffsetError as exc:
        raise UsageError(f"nothing was written; invalid entries:\n{exc}") from None
    for change in changes:
        if change.alias is None and change.offset is not None:
            ctx.warn(
                f"importing an offset no configured table reads (table {change.partition.table}, "
                f"query_fingerprint {change.partition.query_fingerprint}); it is kept for when "
                f"that table is configured again"
            )
    return changes


_Command = Callable[[Context, argparse.Namespace], Awaitable[int]]
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
        print(f"{PROG}: a command is required", file=sys.stderr)
        return EXIT_USAGE
    with _logs_to_stderr():
        try:
            loaded = load_config(args.config)
        except ConfigError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        ctx = make_context(loaded.settings, args.config)
        for warning in loaded.warnings:
            ctx.warn(warning)
        try:
            await add_discovered(ctx)
            return await _COMMANDS[args.command](ctx, args)
        except UsageError as exc:
            print(f"{PROG}: {exc}", file=ctx.err)
            return EXIT_USAGE
        except RefusedError as exc:
            print(f"{PROG}: {exc}", file=ctx.err)
            return EXIT_FAILED
        except (KafkaUnavailableError, TopicConfigError, OffsetError) as exc:
            print(f"{PROG}: {exc}", file=ctx.err)
            return EXIT_FAILED
        except BrokenPipeError:
            raise  # the reader went away (`| head`): main() ends quietly
        except (KafkaError, OSError) as exc:
            print(f"{PROG}: failed: {exc!r}", file=ctx.err)
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
