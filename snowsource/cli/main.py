"""The ``snowsource`` command line (SPEC §1).

Exit codes: 0 clean shutdown; 2 invalid configuration or usage (nothing was contacted); 1 fatal
runtime error (Kafka unreachable at start, unusable offsets topic, fenced by a newer process).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import structlog

from snowsource import __version__
from snowsource.core.errors import ConfigError, FencedError, SnowsourceError

if TYPE_CHECKING:
    from snowsource.config.models import Settings
    from snowsource.engine.wiring import Adapters

    AdaptersFactory = Callable[[Settings], Adapters]

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2


EXIT_CODES_HELP = """exit codes:
  0  clean shutdown (SIGTERM/SIGINT included); for check: every check passed
  1  fatal runtime error (Kafka unreachable, unusable offsets topic, fenced by a newer
     process with the same task.id); for check: a check failed
  2  invalid configuration or usage (nothing was contacted)"""

RUN_EXIT_CODES_HELP = """exit codes:
  0  clean shutdown (SIGTERM/SIGINT included)
  1  fatal runtime error (Kafka unreachable for kafka.startup.timeout.seconds, unusable
     offsets topic, offsets topic missing while output topics hold records, fenced by a
     newer process with the same task.id)
  2  invalid configuration or usage (nothing was contacted)"""

CHECK_EXIT_CODES_HELP = """exit codes:
  0  every check passed (a time-zone warning does not fail it)
  1  a check failed
  2  invalid configuration or usage (nothing was contacted)"""

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(value: str) -> str:
    level = value.strip().upper()
    level = "WARNING" if level == "WARN" else level
    if level not in _LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"invalid log level {value!r}: use one of {', '.join(_LOG_LEVELS)}"
        )
    return level


def _parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="snowsource",
        description="Stream ServiceNow tables into Apache Kafka with Connect-compatible offsets.",
        epilog=EXIT_CODES_HELP + "\n\n`snowsource COMMAND --help` describes each command.",
        formatter_class=formatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"snowsource {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    config_help = "configuration file (default: $SNOWSOURCE_CONFIG, then ./config.yaml)"

    run = sub.add_parser(
        "run",
        help="run the daemon in the foreground",
        description=(
            "Run the daemon in the foreground: read every table this task owns, produce its\n"
            "rows to Kafka and commit offsets after Kafka acknowledged them. Logs go to stdout\n"
            "(JSON when not on a terminal). SIGTERM or Ctrl-C stops cleanly within\n"
            "shutdown.timeout.seconds."
        ),
        epilog=RUN_EXIT_CODES_HELP,
        formatter_class=formatter,
    )
    run.add_argument("--config", help=config_help)
    run.add_argument(
        "--log-level",
        type=_log_level,
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL; overrides log.level of the configuration",
    )
    run.add_argument(
        "--allow-full-replay",
        action="store_true",
        help=(
            "when the offsets topic is missing although output topics hold records, create it "
            "anyway and replay every table from its start.timestamp (needed once; without it "
            "such a start is refused)"
        ),
    )

    check = sub.add_parser(
        "check",
        help="check configuration, Kafka and ServiceNow",
        description=(
            "Validate the configuration, then check Kafka (reachable, offsets topic usable) and\n"
            "ServiceNow (credentials, every table readable, cursor and configured fields\n"
            "visible, the integration user's time zone). Prints one pass/fail line per check;\n"
            "nothing is written anywhere."
        ),
        epilog=CHECK_EXIT_CODES_HELP,
        formatter_class=formatter,
    )
    check.add_argument("--config", help=config_help)
    _delegated(sub)
    return parser


def _delegated(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands whose own parsers read their arguments (listed here for ``--help``)."""
    sub.add_parser("offsets", help="inspect, rewind and reset stored offsets", add_help=False)
    sub.add_parser("emulator", help="run the bundled ServiceNow Table API emulator", add_help=False)
    sub.add_parser("config", help="import a Kafka Connect connector config", add_help=False)
    sub.add_parser(
        "reconcile", help="compare each table's instance rows with its topic", add_help=False
    )


def cmd_run(
    config_path: str | None,
    log_level: str | None = None,
    *,
    allow_full_replay: bool = False,
    adapters: AdaptersFactory | None = None,
) -> int:
    """``snowsource run``; ``log_level`` (from ``--log-level``) overrides ``log.level``;
    ``adapters`` builds the daemon's adapters (by default ``engine.wiring.Adapters``)."""
    from snowsource.cli.run import run_until_signal
    from snowsource.config.loader import load_config
    from snowsource.observability.logs import configure_logging

    loaded = load_config(config_path)
    settings = loaded.settings
    configure_logging(str(settings.log.format), log_level or str(settings.log.level))
    for warning in loaded.warnings:
        structlog.get_logger("snowsource.config.settings").warning(warning)
    try:
        return asyncio.run(
            run_until_signal(settings, allow_full_replay=allow_full_replay, adapters=adapters)
        )
    except FencedError as exc:
        structlog.get_logger("snowsource").error("fenced", error=str(exc))
        return EXIT_RUNTIME
    except SnowsourceError as exc:
        structlog.get_logger("snowsource").error("fatal", error=str(exc))
        return EXIT_RUNTIME


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``snowsource`` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "emulator":
        from snowsource.emulator.cli import main as emulator_main

        return emulator_main(args_list[1:])
    if args_list and args_list[0] == "offsets":
        from snowsource.cli.offsets import main as offsets_main

        return offsets_main(args_list[1:])
    if args_list and args_list[0] == "reconcile":
        from snowsource.cli.reconcile import main as reconcile_main

        return reconcile_main(args_list[1:])
    if args_list and args_list[0] == "config":
        from snowsource.cli.config_import import main as config_main

        return config_main(args_list[1:])
    parser = _parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return int(exc.code or 0) if exc.code in (0, None) else EXIT_USAGE
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command == "run":
            return cmd_run(args.config, args.log_level, allow_full_replay=args.allow_full_replay)
        if args.command == "check":
            from snowsource.cli.check import main as check_main

            return check_main(args.config)
    except ConfigError as exc:
        print(f"snowsource: {exc}", file=sys.stderr)
        return EXIT_USAGE
    parser.print_help()
    return EXIT_USAGE
