"""``snowsource emulator``: run the Table API emulator as a process (demos, manual testing).

The clock follows the wall clock; SIGINT/SIGTERM stop it cleanly with exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Sequence
from datetime import UTC, datetime

import structlog

from snowsource.emulator.catalog import whole_instance
from snowsource.emulator.emulator import Emulator
from snowsource.emulator.server import serve, tls_context
from snowsource.observability.logs import configure_logging

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="snowsource emulator",
        description="Serve an emulated ServiceNow Table API with seeded, changing data.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on")
    parser.add_argument(
        "--tables",
        default="incident,change_request,cmdb_ci",
        help="comma-separated tables to seed (also task_sla, sys_user)",
    )
    parser.add_argument("--rows", type=int, default=1000, help="rows seeded per table")
    parser.add_argument(
        "--activity",
        type=float,
        default=0.0,
        help="rows inserted/updated per second in the background",
    )
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="delay added to every request"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated data")
    parser.add_argument("--user", default="admin", help="user name; '' turns authentication off")
    parser.add_argument("--password", default="admin", help="password of --user")
    parser.add_argument(
        "--user-tz", default="America/Los_Angeles", help="time zone of the user (display values)"
    )
    parser.add_argument(
        "--whole-instance",
        action="store_true",
        help="add a whole instance's tables to sys_db_object (task and cmdb_ci hierarchies, "
        "sys_ and u_ tables, views, unreadable tables) for snow.discover",
    )
    _instance_arguments(parser)
    parser.add_argument("--tls-cert", help="PEM certificate (chain): serve HTTPS")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    return parser


def _instance_arguments(parser: argparse.ArgumentParser) -> None:
    """Sessions, nodes and semaphores of a real instance (``emulator.instance``)."""
    group = parser.add_argument_group("instance model (sessions, nodes, semaphores)")
    group.add_argument(
        "--session-sync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve one session's requests one at a time (by JSESSIONID), as an instance does; "
        "--no-session-sync serves them all at once (nodes and semaphores still apply)",
    )
    group.add_argument(
        "--requests-per-session",
        type=int,
        default=1,
        help="transactions one session runs at a time (2 = Yokohama and later)",
    )
    group.add_argument(
        "--session-queue", type=int, default=10, help="requests waiting on one session before 202"
    )
    group.add_argument("--nodes", type=int, default=2, help="application nodes behind the LB")
    group.add_argument(
        "--node-threads", type=int, default=4, help="API_INT semaphore threads per node"
    )
    group.add_argument(
        "--node-queue", type=int, default=50, help="API_INT queue per node before 429"
    )
    group.add_argument(
        "--no-instance-model",
        action="store_true",
        help="no sessions, nodes or semaphores at all: every request is served at once",
    )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``snowsource emulator`` arguments (argparse exits on errors)."""
    parser = _parser()
    args = parser.parse_args(list(argv))
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    return args


def build(args: argparse.Namespace) -> Emulator:
    """The emulator the command line describes (seeded, clock following the wall clock)."""
    emu = Emulator(
        seed=args.seed,
        now=datetime.now(UTC),
        user=args.user,
        password=args.password,
        user_tz=args.user_tz,
    )
    emu.clock.follow_wall_clock(True)
    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    emu.seed(tables=tables, rows=args.rows)
    if "incident" in tables and "task_sla" in tables:
        emu.create_view(
            "incident_sla", {"inc": "incident", "sla": "task_sla"}, join=("inc_sys_id", "sla_task")
        )
    if args.whole_instance:
        whole_instance(emu, rows=max(args.rows // 10, 1))
    emu.latency_ms = args.latency_ms
    emu.instance.configure(
        enabled=not args.no_instance_model,
        session_sync=args.session_sync,
        per_session=args.requests_per_session,
        max_waiting=args.session_queue,
        nodes=args.nodes,
        node_threads=args.node_threads,
        node_queue=args.node_queue,
    )
    if args.activity > 0:
        emu.start_activity(args.activity)
    return emu


async def _run(args: argparse.Namespace, emu: Emulator) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log = structlog.get_logger("snowsource.emulator")
    try:
        context = tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
        async with serve(emu, host=args.host, port=args.port, ssl_context=context) as url:
            log.info(
                "emulator listening",
                url=url,
                tables=args.tables,
                rows=args.rows,
                activity=args.activity,
                auth=bool(args.user),
                instance=_describe_instance(args),
            )
            await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    log.info("emulator stopped")
    return EXIT_OK


def _describe_instance(args: argparse.Namespace) -> str:
    if args.no_instance_model:
        return "off"
    sync = f"{args.requests_per_session} per session" if args.session_sync else "no session sync"
    return f"{args.nodes} nodes x {args.node_threads} threads (queue {args.node_queue}), {sync}"


def main(argv: Sequence[str]) -> int:
    """Entry point: ``argv`` are the arguments after ``snowsource emulator``."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return EXIT_OK if exc.code in (0, None) else EXIT_USAGE
    log = structlog.get_logger("snowsource.emulator")
    # A bad argument or a taken port is reported in one line, without a traceback.
    problem: str
    try:
        emu = build(args)
    except (ValueError, KeyError) as exc:  # unknown table to seed, unknown time zone
        problem = str(exc)
    else:
        configure_logging("auto", "INFO")
        try:
            return asyncio.run(_run(args, emu))
        except OSError as exc:  # e.g. the port is taken, an unreadable certificate
            problem = str(exc)
        except KeyboardInterrupt:  # pragma: no cover - a second Ctrl-C during shutdown
            return EXIT_OK
        log.error("emulator failed", error=problem)
        return EXIT_RUNTIME
    log.error("invalid emulator arguments", error=problem)
    return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    import sys

    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main(sys.argv[1:]))
