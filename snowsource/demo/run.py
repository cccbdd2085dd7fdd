"""The whole demo run: emulator, daemon, live view, clean stop, summary and hints."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO, Final

import structlog
from pydantic import SecretStr

from snowsource.adapters.kafka import KafkaConnection, KafkaUnavailableError, wait_for_kafka
from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.config.models import Settings
from snowsource.core.discovery import db_objects, select
from snowsource.core.errors import ServiceNowError
from snowsource.core.query import normalise_query
from snowsource.demo import processes
from snowsource.demo.config import CHECKOUT, write_config
from snowsource.demo.options import (
    DEFAULT_KAFKA_PORT,
    EMULATOR_PASSWORD,
    EMULATOR_USER,
    TABLES,
    Options,
)
from snowsource.demo.processes import (
    Child,
    InterruptedDemoError,
    free_port,
    tail,
    terminal_foreground,
)
from snowsource.demo.progress import TableView, apply_event, human_seconds
from snowsource.demo.screen import Screen
from snowsource.demo.tracker import KafkaTracker, peek

REFRESH_SECONDS: Final = 0.5
COUNT_EVERY_SECONDS: Final = 3.0


async def count_rows(client: ServiceNowClient, view: TableView, table: str) -> None:
    """The backfill target: rows matching the table's base query now."""
    params = {"sysparm_limit": "1", "sysparm_fields": "sys_id", "sysparm_no_count": "false"}
    if view.query:
        params["sysparm_query"] = view.query
    with contextlib.suppress(ServiceNowError):
        page = await client.get_page(table, params)
        if page.total_count is not None:
            view.total = page.total_count


async def follow_daemon(
    child: Child, views: dict[str, TableView], log: IO[bytes], messages: list[str]
) -> None:
    """Copy the daemon's output to its log file and feed its JSON lines into the views."""
    proc = child.proc
    assert proc is not None
    assert proc.stdout is not None
    assert proc.stderr is not None

    async def copy_stderr(stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            log.write(line)
            log.flush()

    stderr_task = asyncio.create_task(copy_stderr(proc.stderr))
    try:
        while line := await proc.stdout.readline():
            log.write(line)
            log.flush()
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                message = apply_event(views, event)
                # The same library warning repeats while, say, Kafka is away: show it once.
                if message and message not in messages[-3:]:
                    messages.append(message)
    finally:
        await stderr_task


@contextlib.asynccontextmanager
async def _signals(stop: asyncio.Event, children: list[Child]) -> AsyncIterator[None]:
    """First Ctrl-C/SIGTERM: stop cleanly. Second one: kill the children at once."""
    loop = asyncio.get_running_loop()
    hits = 0

    def handler() -> None:
        nonlocal hits
        hits += 1
        if hits > 1:
            for child in children:
                child.kill()
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, handler)
    try:
        yield
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _kafka_ready(bootstrap: str) -> None:
    try:
        await wait_for_kafka(KafkaConnection(bootstrap_servers=bootstrap), 15)
    except KafkaUnavailableError:
        raise SystemExit(
            f"demo: Kafka is not reachable at {bootstrap}. Start the local broker with "
            f"`make kafka-up` (KAFKA_PORT picks its port), or point KAFKA_BOOTSTRAP at yours."
        ) from None


def _emulator_argv(port: int, options: Options) -> list[str]:
    return [
        *("emulator", "--port", str(port), "--tables", ",".join(TABLES)),
        *("--rows", str(options.rows), "--activity", f"{options.activity:g}"),
        *("--latency-ms", f"{options.latency_ms:g}"),
        # An instance's sessions and nodes (SPEC §14.1): the daemon's session pool at work.
        *("--session-sync", "--nodes", "2"),
        # sys_db_object lists a whole instance's tables: snow.discover finds those under task.
        "--whole-instance",
    ]


async def demo(options: Options) -> int:
    """The whole demo; returns the exit code."""
    python = sys.executable
    await _kafka_ready(options.bootstrap)
    workdir = Path(tempfile.mkdtemp(prefix="snowsource-demo-"))
    config_path = workdir / "config.yaml"
    emulator_log, daemon_log = workdir / "emulator.log", workdir / "snowsource.log"
    print(f"snowsource demo: Kafka at {options.bootstrap}; working directory {workdir}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stop = asyncio.Event()
    children: list[Child] = []
    started = time.monotonic()
    with emulator_log.open("wb") as elog, daemon_log.open("wb") as dlog:
        emulator = Child(
            "emulator",
            [python, "-m", "snowsource", *_emulator_argv(port, options)],
            elog,
            pipe=False,
        )
        children.append(emulator)
        async with _signals(stop, children), emulator:
            print(
                f"starting the ServiceNow emulator on {url} (user {EMULATOR_USER}, password "
                f"{EMULATOR_PASSWORD}; 2 nodes, one transaction per session), seeding "
                f"{options.rows:,} rows into each of {', '.join(TABLES)} ..."
            )
            await processes.wait_for_emulator(url, emulator, emulator_log, stop)
            rest_port = free_port()
            settings = write_config(config_path, url=url, options=options, rest_port=rest_port)
            daemon = Child(
                "snowsource",
                [python, "-m", "snowsource", "run", "--config", str(config_path)],
                dlog,
                pipe=True,
            )
            children.append(daemon)
            run = _Run(options, settings, url=url, stop=stop, daemon=daemon, log=dlog)
            code = await run.watch(config_path, rest_port)
        print("stopped the emulator")
    return _summary(
        run.views,
        code=code,
        elapsed=time.monotonic() - started,
        config_path=config_path,
        daemon_log=daemon_log,
        messages=run.messages,
        options=options,
        emulator_port=port,
    )


class _Run:
    """The daemon's lifetime: start it, show progress, stop it, collect what happened."""

    def __init__(
        self,
        options: Options,
        settings: Settings,
        *,
        url: str,
        stop: asyncio.Event,
        daemon: Child,
        log: IO[bytes],
    ) -> None:
        self.options = options
        self.settings = settings
        self.url = url
        self.stop = stop
        self.daemon = daemon
        self.log = log
        self.views = [
            TableView(alias, table.topic, normalise_query(table.query))
            for alias, table in settings.tables.items()
        ]
        self.names = {alias: table.name for alias, table in settings.tables.items()}
        self.messages: list[str] = []
        self._shown = 0  # messages already printed

    async def watch(self, config_path: Path, rest_port: int) -> int | None:
        """Run the daemon until stopped; its exit code."""
        options, settings, views = self.options, self.settings, self.views
        auth = BasicAuth(EMULATOR_USER, SecretStr(EMULATOR_PASSWORD))
        async with ServiceNowClient(self.url, auth) as client:
            await self._discover(client)
        async with (
            ServiceNowClient(self.url, auth) as client,
            KafkaTracker(options.bootstrap, views) as tracker,
        ):
            await self._count(client, views)
            print(f"connector {settings.name}: snowsource run --config {config_path}")
            print(f"Kafka {options.bootstrap}, topics {', '.join(v.topic for v in views)}")
            print(f"REST: curl -s http://127.0.0.1:{rest_port}/connectors/{settings.name}/status")
            print(f"console: open http://127.0.0.1:{rest_port}/console in a browser")
            if options.seconds is not None:
                print(f"running headless for {options.seconds:g} s (DEMO_SECONDS)")
            print()
            async with self.daemon:
                by_alias = {view.alias: view for view in views}
                follower = asyncio.create_task(
                    follow_daemon(self.daemon, by_alias, self.log, self.messages)
                )
                screen = Screen(views, time.monotonic())
                await self._live(screen, tracker, client, follower)
                code = await self.daemon.stop(within=settings.shutdown_timeout_seconds + 15)
                await follower
                await tracker.drain(within=10)
                self._show_messages(screen)
                screen.draw("stopped", final=True)
        return code

    async def _discover(self, client: ServiceNowClient) -> None:
        """Show the tables ``snow.discover`` selects as the daemon will (the same rules)."""
        settings = self.settings
        config = settings.snow.discover
        if config is None:
            return
        # The daemon's selection rules over one page of sys_db_object (the demo's instance has
        # a few dozen tables; the daemon pages it and probes each table's readability too).
        params = {"sysparm_fields": "sys_id,name,super_class,sys_class_name"}
        page = await client.get_page("sys_db_object", {**params, "sysparm_limit": "10000"})
        explicit = [table.name for table in settings.tables.values()]
        names = list(select(db_objects(page.rows), config.rules, explicit).tables)
        print(
            f"discovery (snow.discover extends: {config.extends}, exclude: {config.exclude}): "
            f"{len(names)} more tables from sys_db_object: {', '.join(names)}"
        )
        for name in names:
            self.views.append(TableView(name, f"{settings.topic_prefix}{name}", ""))
            self.names[name] = name

    async def _count(self, client: ServiceNowClient, views: list[TableView]) -> None:
        await asyncio.gather(*(count_rows(client, v, self.names[v.alias]) for v in views))

    def _show_messages(self, screen: Screen) -> None:
        while self._shown < len(self.messages):
            screen.message(self.messages[self._shown])
            self._shown += 1

    async def _live(
        self,
        screen: Screen,
        tracker: KafkaTracker,
        client: ServiceNowClient,
        follower: asyncio.Task[None],
    ) -> None:
        """Refresh the view until stopped, DEMO_SECONDS passed, or the daemon ended by itself."""
        seconds = self.options.seconds
        deadline = None if seconds is None else time.monotonic() + seconds
        next_count = time.monotonic() + COUNT_EVERY_SECONDS
        footer = "Ctrl-C stops the demo" if deadline is None else "headless run (DEMO_SECONDS)"
        while not self.stop.is_set():
            await tracker.poll()
            now = time.monotonic()
            for view in self.views:
                view.rate.add(now, view.rows)
            if now >= next_count:
                # The activity keeps adding rows: keep the backfill targets current.
                await self._count(client, [v for v in self.views if v.state != "stream"])
                next_count = now + COUNT_EVERY_SECONDS
            self._show_messages(screen)
            screen.draw(footer, now)
            if follower.done():
                screen.message("snowsource exited on its own")
                return
            if deadline is not None and now >= deadline:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), REFRESH_SECONDS)
        screen.message("stopping snowsource (SIGTERM: finish in-flight pages, commit, exit) ...")


def _shell_path(path: Path) -> str:
    """``path`` relative to the working directory when that is shorter, quoted for a shell."""
    try:
        text = str(path.relative_to(Path.cwd()))
    except ValueError:
        text = str(path)
    return shlex.quote(text)


def _kafka_down_hint(options: Options) -> str:
    if options.kafka_port is None:
        return f"the broker at {options.bootstrap} is yours"
    prefix = "" if options.kafka_port == DEFAULT_KAFKA_PORT else f"KAFKA_PORT={options.kafka_port} "
    where = "" if Path.cwd() == CHECKOUT else f" -C {_shell_path(CHECKOUT)}"
    return f"`{prefix}make{where} kafka-down` stops it"


def _summary(
    views: list[TableView],
    *,
    code: int | None,
    elapsed: float,
    config_path: Path,
    daemon_log: Path,
    messages: list[str],
    options: Options,
    emulator_port: int,
) -> int:
    ok = code == 0 and all(view.rows > 0 and not view.failed for view in views)
    print()
    print(f"Summary — ran {human_seconds(elapsed)}, snowsource exit code {code}")
    print(
        f"  {'table':<15} {'state':<9} {'rows to Kafka':>13}  {'sweeps':>6}  {'warnings':>8}  "
        "cursor after the last sweep"
    )
    for view in views:
        print(
            f"  {view.alias:<15} {view.state:<9} {view.rows:>13,}  {view.sweeps:>6}  "
            f"{view.warnings:>8}  {view.cursor or '-'}"
        )
        if view.failed or view.warning:
            print(
                f"  {'':<15} last {'error' if view.failed else 'warning'}: "
                f"{view.failed or view.warning}"
            )
    if code not in (0, None):
        print(f"\nlast lines of {daemon_log}:\n{tail(daemon_log)}")
    for message in messages[-5:]:
        print(f"  ! {message}")
    bin_dir = Path(sys.executable).parent
    snowsource = _shell_path(bin_dir / "snowsource")
    python = _shell_path(bin_dir / "python")
    config = _shell_path(config_path)
    print(f"\nLook around (the broker keeps running; {_kafka_down_hint(options)}):")
    print(f"  {snowsource} offsets list --config {config}")
    print(
        f"  {python} -m snowsource.demo peek {shlex.quote(views[0].topic)} --count 3 "
        f"--bootstrap {options.bootstrap}"
    )
    print(f"  less {_shell_path(daemon_log)}")
    print(
        f"Resume from where it stopped: the daemon needs an emulator on port {emulator_port} "
        "again (a fresh one, with new data):"
    )
    print(f"  {snowsource} {' '.join(_emulator_argv(emulator_port, options))} &")
    print(f"  {snowsource} run --config {config}")
    print(
        f"\n{'OK' if ok else 'PROBLEM'}: "
        + (
            "every table delivered rows and snowsource shut down cleanly"
            if ok
            else "a table delivered nothing, failed, or snowsource did not exit 0"
        )
    )
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m snowsource.demo``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "peek":
        parser = argparse.ArgumentParser(prog="python -m snowsource.demo peek")
        parser.add_argument("topic")
        parser.add_argument("--count", type=int, default=5)
        parser.add_argument("--bootstrap", default=Options.from_env().bootstrap)
        ns = parser.parse_args(args[1:])
        return asyncio.run(peek(ns.topic, ns.count, ns.bootstrap))
    if args:
        from snowsource import demo as package  # noqa: PLC0415 - only for this message

        print(package.__doc__)
        return 2
    # The live view is the output: library warnings (retries while Kafka or the emulator come
    # up) would only scroll it away. The daemon's own log goes to its file in full.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL + 1)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    try:
        with terminal_foreground():
            return asyncio.run(demo(Options.from_env()))
    except KeyboardInterrupt:  # Ctrl-C before the demo's own handler was in place
        print("demo: interrupted")
        return 0
    except InterruptedDemoError as exc:
        print(f"demo: {exc}; stopped what it had started")
        return 0
