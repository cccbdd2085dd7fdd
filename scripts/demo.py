"""``make demo``: snowsource streaming the bundled ServiceNow emulator into the local Kafka, live.

    python scripts/demo.py                 # run until Ctrl-C (headless for N s with DEMO_SECONDS=N)
    python scripts/demo.py peek TOPIC [--count N]   # print the last records of a topic

What it does:
1. checks that Kafka answers (``make demo`` has started the local broker already);
2. starts ``snowsource emulator`` as a process on a free port, seeded with incident,
   change_request and cmdb_ci rows plus ongoing activity;
3. writes a configuration derived from ``config.example.yaml`` into a fresh temporary directory
   (a unique connector name per run, so every run backfills from scratch; the output topics and
   the offsets topic are the example's and are shared between runs);
4. runs ``snowsource run`` as a process with JSON logs and shows, per table, rows delivered to
   Kafka, phase, lag, and a progress bar with an estimate while the table backfills. Rows and the
   backfill position come from reading the output topics (what really reached Kafka); phase,
   lag and failures come from the daemon's log lines (the per-sweep ``sweep`` event and
   ``table FAILED``);
5. on Ctrl-C (or after ``DEMO_SECONDS``) stops the daemon with SIGTERM (a clean shutdown commits
   what Kafka acknowledged), then the emulator, and prints a summary and commands to look at the
   topics and offsets. The configuration and logs stay in the temporary directory.

Environment:
- ``DEMO_SECONDS``: run headless for that many seconds, then stop as on Ctrl-C;
- ``KAFKA_BOOTSTRAP``: the broker (default ``127.0.0.1:$KAFKA_PORT``, the one ``scripts/kafka.sh``
  runs, port 9092 unless ``KAFKA_PORT`` says otherwise);
- ``DEMO_ROWS``: rows seeded per table (default 20000: a backfill long enough to watch);
- ``DEMO_ACTIVITY``: rows changed per second while the demo runs (default 5);
- ``DEMO_LATENCY_MS``: emulated ServiceNow latency per request (default 150);
- ``DEMO_TOPIC_PREFIX``: put every table in ``<prefix><alias>`` instead of the example's topics.
``SNOWSOURCE_*`` variables of the calling shell are not passed on: the demo runs exactly the
configuration it wrote.

Exit code: 0 when the daemon shut down cleanly and every table delivered rows; 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import structlog
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import SecretStr

from snowsource.adapters.kafka import (
    KafkaConnection,
    KafkaUnavailableError,
    admin_client,
    existing_topics,
    wait_for_kafka,
)
from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.config.settings import Settings, load_config
from snowsource.core.errors import ConfigError, ServiceNowError
from snowsource.core.query import normalise_query

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config.example.yaml"
TABLES = ("incident", "change_request", "cmdb_ci")
EMULATOR_USER = "admin"
EMULATOR_PASSWORD = "admin"  # noqa: S105 - the bundled emulator's well-known demo credentials
BAR_WIDTH = 24
# Enough seeded rows, and enough latency per page, to watch a backfill for a few seconds.
DEFAULT_ROWS = 20000
DEFAULT_LATENCY_MS = 150
DEFAULT_ACTIVITY = 5.0
REFRESH_SECONDS = 0.5
# Without a tty a table's line is printed when it changed, at most this often.
PLAIN_LINE_SECONDS = 2.0


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"demo: {name} must be a number, got {raw!r}") from None


@dataclass(frozen=True)
class Options:
    """What this run does, from the environment."""

    seconds: float | None
    bootstrap: str
    rows: int
    activity: float
    latency_ms: float
    topic_prefix: str | None

    @classmethod
    def from_env(cls) -> Options:
        """Read the ``DEMO_*`` / ``KAFKA_*`` variables (see the module docstring)."""
        seconds = _env_number("DEMO_SECONDS", 0)
        return cls(
            seconds=seconds if seconds > 0 else None,
            bootstrap=os.environ.get("KAFKA_BOOTSTRAP", "").strip()
            or f"127.0.0.1:{os.environ.get('KAFKA_PORT', '').strip() or 9092}",
            rows=int(_env_number("DEMO_ROWS", DEFAULT_ROWS)),
            activity=_env_number("DEMO_ACTIVITY", DEFAULT_ACTIVITY),
            latency_ms=_env_number("DEMO_LATENCY_MS", DEFAULT_LATENCY_MS),
            topic_prefix=os.environ.get("DEMO_TOPIC_PREFIX") or None,
        )


# --------------------------------------------------------------------------------------------
# Child processes
# --------------------------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("SNOWSOURCE_")}


class Child:
    """A subprocess in its own session (Ctrl-C reaches only the demo, which stops it in order)."""

    def __init__(self, name: str, argv: Sequence[str], log: IO[bytes], *, pipe: bool) -> None:
        self.name = name
        self._argv = list(argv)
        self._log = log
        self._pipe = pipe
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Child:
        self.proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdout=asyncio.subprocess.PIPE if self._pipe else self._log,
            stderr=asyncio.subprocess.PIPE if self._pipe else self._log,
            stdin=asyncio.subprocess.DEVNULL,
            env=_child_env(),
            cwd=REPO,
            start_new_session=True,
            limit=16 * 1024 * 1024,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(within=15)

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended."""
        return None if self.proc is None else self.proc.returncode

    async def stop(self, within: float) -> int | None:
        """SIGTERM, wait up to ``within`` s, then SIGKILL. Safe to call more than once."""
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), within)
            except TimeoutError:
                print(f"demo: {self.name} did not stop within {within:g}s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        return proc.returncode

    def kill(self) -> None:
        """Stop at once (a second Ctrl-C)."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_for_emulator(
    url: str, emulator: Child, log_path: Path, stop: asyncio.Event
) -> None:
    auth = BasicAuth(EMULATOR_USER, SecretStr(EMULATOR_PASSWORD))
    deadline = time.monotonic() + 180
    async with ServiceNowClient(url, auth, connect_timeout=2, request_timeout=5) as client:
        while True:
            if stop.is_set():
                raise SystemExit("demo: interrupted while the emulator was starting")
            if emulator.returncode is not None:
                raise SystemExit(
                    f"demo: the emulator exited with code {emulator.returncode}:\n{_tail(log_path)}"
                )
            try:
                await client.get_page("incident", {"sysparm_limit": "1"})
                return
            except ServiceNowError:
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"demo: the emulator did not answer:\n{_tail(log_path)}"
                    ) from None
                await asyncio.sleep(0.3)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def write_config(path: Path, *, url: str, options: Options, rest_port: int | None) -> Settings:
    """``config.example.yaml`` pointed at this run's emulator and Kafka; validated."""
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    document["name"] = "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    document["snow"]["url"] = url
    document["snow"]["auth"].update(
        {"type": "basic", "username": EMULATOR_USER, "password": EMULATOR_PASSWORD}
    )
    document["kafka"]["bootstrap.servers"] = options.bootstrap
    # A livelier stream view than the example's 5 s; everything else is the example's.
    document["poll.interval.ms"] = 1000
    document["log"] = {"format": "json", "level": "INFO"}
    document["rest"] = (
        {"enabled": True, "host": "127.0.0.1", "port": rest_port}
        if rest_port is not None
        else {"enabled": False}
    )
    if options.topic_prefix is not None:
        document["topic.prefix"] = options.topic_prefix
        for table in document["snow"]["tables"].values():
            table.pop("topic", None)
    path.write_text(
        "# Written by scripts/demo.py from config.example.yaml\n"
        + yaml.safe_dump(document, sort_keys=False),
        encoding="utf-8",
    )
    try:
        return load_config(path, env={}).settings
    except ConfigError as exc:
        raise SystemExit(f"demo: the derived configuration is invalid: {exc}") from None


# --------------------------------------------------------------------------------------------
# What the screen shows
# --------------------------------------------------------------------------------------------


@dataclass
class TableView:
    """Everything known about one table."""

    alias: str
    topic: str
    query: str
    total: int | None = None  # rows matching the base query (the backfill's target)
    rows: int = 0  # records that reached Kafka during this run
    last_ts: str | None = None  # snow.timestamp header of the newest record
    phase: str = "starting"
    lag_s: float | None = None
    cursor: str | None = None
    sweeps: int = 0
    failed: str | None = None
    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=10))

    def sample(self, now: float) -> None:
        """Remember (time, rows) for the rate estimate."""
        self.samples.append((now, self.rows))

    def rate(self) -> float | None:
        """Rows per second over the last few seconds."""
        if len(self.samples) < 2:
            return None
        (t0, r0), (t1, r1) = self.samples[0], self.samples[-1]
        # Under two seconds of history the estimate swings wildly: show none yet.
        return (r1 - r0) / (t1 - t0) if t1 - t0 >= 2 and r1 > r0 else None

    @property
    def state(self) -> str:
        """FAILED, stream (caught up), backfill (rows arriving, not caught up) or starting."""
        if self.failed:
            return "FAILED"
        if self.phase == "stream":
            return "stream"
        return "backfill" if self.rows else "starting"

    def lag(self) -> float | None:
        """Seconds behind: the daemon's own figure once caught up, else the newest row's age."""
        if self.state == "stream" and self.lag_s is not None:
            return self.lag_s
        if self.last_ts is not None:
            try:
                newest = datetime.strptime(self.last_ts, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            except ValueError:
                return None
            return max((datetime.now(UTC) - newest).total_seconds(), 0.0)
        return None


def human_seconds(seconds: float | None) -> str:
    """``2.1s``, ``4m 10s``, ``3h 5m``, ``12d 4h``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def progress_bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[#########-----------]`` drawn with block characters."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    return "[" + "█" * filled + "░" * (width - filled) + "]"


def table_line(view: TableView, width: int) -> str:
    """One table's status line."""
    state = view.state
    head = f"{view.alias:<15} {state:<9}"
    if state == "FAILED":
        return f"{head} {view.failed}"[:width]
    lag = f"lag {human_seconds(view.lag())}"
    if state == "backfill" and view.total:
        fraction = min(view.rows / view.total, 0.99)
        rate = view.rate()
        eta = human_seconds(max(view.total - view.rows, 0) / rate) if rate else "-"
        body = (
            f"{progress_bar(fraction)} {fraction * 100:3.0f}%  "
            f"{view.rows:>7,}/{view.total:,} rows  {view.rate() or 0:>6,.0f} rows/s  "
            f"ETA {eta:<7} {lag}"
        )
    else:
        last = f"  sweeps {view.sweeps}" if view.sweeps else ""
        body = f"{view.rows:>7,} rows{last}  {lag}"
    return f"{head} {body}"[:width]


class Screen:
    """Redraws in place on a tty; otherwise prints a table's line when it changed (throttled)."""

    def __init__(self, views: list[TableView], started: float) -> None:
        self.views = views
        self.started = started
        self.tty = sys.stdout.isatty()
        self._drawn = 0
        self._printed: dict[str, tuple[str, str, float]] = {}

    def width(self) -> int:
        """Terminal width (generous when not a terminal)."""
        return shutil.get_terminal_size((160, 24)).columns if self.tty else 200

    def message(self, text: str) -> None:
        """A line above the live view (which is redrawn below it)."""
        print(f"! {text}", flush=True)
        self._drawn = 0

    def draw(self, footer: str) -> None:
        """Refresh the view."""
        width = self.width()
        elapsed = time.monotonic() - self.started
        if self.tty:
            lines = [table_line(view, width) for view in self.views]
            lines.append(f"{footer}  (running {human_seconds(elapsed)})"[:width])
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            sys.stdout.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            sys.stdout.flush()
            self._drawn = len(lines)
            return
        now = time.monotonic()
        for view in self.views:
            state, content = view.state, f"{view.rows} {view.sweeps} {view.failed}"
            last_state, last_content, last_time = self._printed.get(view.alias, ("", "", 0.0))
            changed = content != last_content and now - last_time >= PLAIN_LINE_SECONDS
            if state != last_state or changed:
                self._printed[view.alias] = (state, content, now)
                print(f"[{elapsed:6.1f}s] {table_line(view, width)}", flush=True)


# --------------------------------------------------------------------------------------------
# Following the daemon and Kafka
# --------------------------------------------------------------------------------------------


def apply_event(views: dict[str, TableView], event: dict[str, Any]) -> str | None:
    """Update the views from one daemon log line; returns a message worth showing, if any."""
    name = event.get("event")
    view = views.get(str(event.get("table")))
    if name == "sweep" and view is not None:
        view.sweeps += 1
        view.phase = str(event.get("phase") or view.phase)
        lag = event.get("lag_s")
        view.lag_s = float(lag) if isinstance(lag, int | float) else view.lag_s
        view.cursor = str(event.get("cursor") or view.cursor or "")
        return None
    if name == "table FAILED" and view is not None:
        view.failed = str(event.get("error") or "failed")
        return f"{view.alias} FAILED: {view.failed}"
    if event.get("level") in ("error", "critical") and view is None:
        return f"snowsource: {name}: {event.get('error', '')}".rstrip(": ")
    return None


async def follow_daemon(
    child: Child, views: dict[str, TableView], log: IO[bytes], messages: list[str]
) -> None:
    """Copy the daemon's output to the log file and feed its JSON lines into the views."""
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
                continue  # the standard library's plain lines (aiokafka warnings)
            if isinstance(event, dict):
                message = apply_event(views, event)
                if message:
                    messages.append(message)
    finally:
        await stderr_task


class KafkaTracker:
    """Reads the output topics from where they ended when the demo started."""

    def __init__(self, bootstrap: str, views: list[TableView]) -> None:
        self._conn = KafkaConnection(bootstrap_servers=bootstrap, client_id="snowsource-demo")
        self._views = {view.topic: view for view in views}
        self._consumer = AIOKafkaConsumer(**self._conn.client_kwargs(), enable_auto_commit=False)
        self._assigned: set[TopicPartition] = set()
        self._ends: dict[TopicPartition, int] = {}

    async def __aenter__(self) -> KafkaTracker:
        await self._consumer.start()
        await self._discover(baseline=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def _discover(self, *, baseline: bool = False) -> None:
        """Assign partitions of topics that exist now (the daemon creates them at start)."""
        async with admin_client(self._conn) as admin:
            found = await existing_topics(admin, list(self._views))
        new = {
            TopicPartition(topic, partition)
            for topic, count in found.items()
            for partition in range(count)
        } - self._assigned
        if not new:
            return
        # Topics that existed before this run: count only what this run adds.
        ends = await self._consumer.end_offsets(list(new)) if baseline else {}
        self._assigned |= new
        self._consumer.assign(sorted(self._assigned))
        for tp in new:
            self._consumer.seek(tp, ends.get(tp, 0))

    async def poll(self) -> None:
        """Consume what arrived; call repeatedly."""
        if len(self._assigned) < len(self._views):
            with contextlib.suppress(KafkaError, OSError):
                await self._discover()
        if not self._assigned:
            await asyncio.sleep(0.2)
            return
        batches = await self._consumer.getmany(timeout_ms=200, max_records=20000)
        for tp, records in batches.items():
            view = self._views[tp.topic]
            view.rows += len(records)
            for record in records:
                stamp = dict(record.headers).get("snow.timestamp")
                if stamp is not None:
                    text = stamp.decode("utf-8", "replace")
                    if view.last_ts is None or text > view.last_ts:
                        view.last_ts = text

    async def drain(self, within: float) -> None:
        """Read up to the current end of every topic (after the daemon stopped)."""
        deadline = time.monotonic() + within
        with contextlib.suppress(KafkaError, OSError):
            await self._discover()
        if not self._assigned:
            return
        ends = await self._consumer.end_offsets(sorted(self._assigned))
        while time.monotonic() < deadline:
            positions = {tp: await self._consumer.position(tp) for tp in self._assigned}
            if all(positions[tp] >= ends[tp] for tp in self._assigned):
                return
            await self.poll()


async def count_rows(client: ServiceNowClient, view: TableView, table: str) -> None:
    """The backfill target: rows matching the table's base query now."""
    params = {"sysparm_limit": "1", "sysparm_fields": "sys_id", "sysparm_no_count": "false"}
    if view.query:
        params["sysparm_query"] = view.query
    with contextlib.suppress(ServiceNowError):
        page = await client.get_page(table, params)
        if page.total_count is not None:
            view.total = page.total_count


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def _shell_path(path: Path) -> str:
    """``path`` relative to the working directory when that is shorter."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


async def _kafka_ready(bootstrap: str) -> None:
    try:
        await wait_for_kafka(KafkaConnection(bootstrap_servers=bootstrap), 15)
    except KafkaUnavailableError:
        raise SystemExit(
            f"demo: Kafka is not reachable at {bootstrap}. Start the local broker with "
            f"`make kafka-up`, or point KAFKA_BOOTSTRAP at yours."
        ) from None


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


async def demo(options: Options) -> int:
    """The whole demo; returns the exit code."""
    python = sys.executable
    await _kafka_ready(options.bootstrap)
    workdir = Path(tempfile.mkdtemp(prefix="snowsource-demo-"))
    config_path = workdir / "config.yaml"
    emulator_log, daemon_log = workdir / "emulator.log", workdir / "snowsource.log"
    print(f"snowsource demo: Kafka at {options.bootstrap}; working directory {workdir}")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    rest_port = _free_port() if importlib.util.find_spec("snowsource.api.rest") else None
    stop = asyncio.Event()
    children: list[Child] = []
    started = time.monotonic()
    with emulator_log.open("wb") as elog, daemon_log.open("wb") as dlog:
        emulator = Child(
            "emulator",
            [
                *(python, "-m", "snowsource", "emulator", "--port", str(port)),
                *("--tables", ",".join(TABLES), "--rows", str(options.rows)),
                *("--activity", f"{options.activity:g}", "--latency-ms", f"{options.latency_ms:g}"),
            ],
            elog,
            pipe=False,
        )
        children.append(emulator)
        async with _signals(stop, children), emulator:
            print(
                f"starting the ServiceNow emulator on {url} (user {EMULATOR_USER}, password "
                f"{EMULATOR_PASSWORD}), seeding {options.rows:,} rows into each of "
                f"{', '.join(TABLES)} ..."
            )
            await _wait_for_emulator(url, emulator, emulator_log, stop)
            settings = write_config(config_path, url=url, options=options, rest_port=rest_port)
            daemon = Child(
                "snowsource",
                [python, "-m", "snowsource", "run", "--config", str(config_path)],
                dlog,
                pipe=True,
            )
            children.append(daemon)
            run = _Run(
                options,
                settings=settings,
                url=url,
                stop=stop,
                daemon=daemon,
                log=dlog,
                rest_port=rest_port,
            )
            code, views, messages = await run.watch(config_path)
        print("stopped the emulator")
    return _summary(
        views,
        code=code,
        elapsed=time.monotonic() - started,
        config_path=config_path,
        daemon_log=daemon_log,
        messages=messages,
    )


class _Run:
    """The daemon's lifetime: start it, show progress, stop it, collect what happened."""

    def __init__(
        self,
        options: Options,
        *,
        settings: Settings,
        url: str,
        stop: asyncio.Event,
        daemon: Child,
        log: IO[bytes],
        rest_port: int | None,
    ) -> None:
        self.options = options
        self.settings = settings
        self.url = url
        self.stop = stop
        self.daemon = daemon
        self.log = log
        self.rest_port = rest_port
        self.views = [
            TableView(alias, table.topic, normalise_query(table.query))
            for alias, table in settings.tables.items()
        ]
        self.names = {alias: table.name for alias, table in settings.tables.items()}
        self.messages: list[str] = []
        self._shown = 0  # messages already printed

    async def watch(self, config_path: Path) -> tuple[int | None, list[TableView], list[str]]:
        """Run the daemon until stopped; its exit code, the views and notable messages."""
        options, settings, views = self.options, self.settings, self.views
        auth = BasicAuth(EMULATOR_USER, SecretStr(EMULATOR_PASSWORD))
        async with (
            ServiceNowClient(self.url, auth) as client,
            KafkaTracker(options.bootstrap, views) as tracker,
        ):
            await self._count(client, views)
            print(f"connector {settings.name}: snowsource run --config {config_path}")
            print(f"Kafka {options.bootstrap}, topics {', '.join(v.topic for v in views)}")
            if self.rest_port is not None:
                print(
                    f"REST: curl -s http://127.0.0.1:{self.rest_port}/connectors/"
                    f"{settings.name}/status"
                )
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
                await tracker.drain(within=5)
                self._show_messages(screen)
                screen.draw("stopped")
        return code, views, self.messages

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
        next_count = time.monotonic() + 3
        footer = "Ctrl-C stops the demo" if deadline is None else "headless run (DEMO_SECONDS)"
        while not self.stop.is_set():
            await tracker.poll()
            now = time.monotonic()
            for view in self.views:
                view.sample(now)
            if now >= next_count:
                # The activity keeps adding rows: keep the backfill targets current.
                await self._count(client, [v for v in self.views if v.state != "stream"])
                next_count = now + 3
            self._show_messages(screen)
            screen.draw(footer)
            if follower.done():
                screen.message("snowsource exited on its own")
                return
            if deadline is not None and now >= deadline:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), REFRESH_SECONDS)
        screen.message("stopping snowsource (SIGTERM: finish in-flight pages, commit, exit) ...")


def _summary(
    views: list[TableView],
    *,
    code: int | None,
    elapsed: float,
    config_path: Path,
    daemon_log: Path,
    messages: list[str],
) -> int:
    ok = code == 0 and all(view.rows > 0 and not view.failed for view in views)
    print()
    print(f"Summary — ran {human_seconds(elapsed)}, snowsource exit code {code}")
    print(
        f"  {'table':<15} {'phase':<9} {'rows to Kafka':>13}  {'sweeps':>6}  "
        "cursor after the last sweep"
    )
    for view in views:
        print(
            f"  {view.alias:<15} {view.state:<9} {view.rows:>13,}  {view.sweeps:>6}  "
            f"{view.cursor or '-'}"
        )
    if code not in (0, None):
        print(f"\nlast lines of {daemon_log}:\n{_tail(daemon_log)}")
    for message in messages[-5:]:
        print(f"  ! {message}")
    bin_dir = Path(sys.executable).parent
    snowsource = _shell_path(bin_dir / "snowsource")
    python = _shell_path(bin_dir / "python")
    demo = _shell_path(Path(__file__).resolve())
    print("\nLook around (the broker keeps running; `make kafka-down` stops it):")
    print(f"  {snowsource} offsets list --config {config_path}")
    print(f"  {python} {demo} peek {views[0].topic} --count 3")
    print(f"  less {daemon_log}")
    print(f"  {snowsource} run --config {config_path}   # resumes; needs `snowsource emulator`")
    print(
        f"\n{'OK' if ok else 'PROBLEM'}: "
        + (
            "every table delivered rows and snowsource shut down cleanly"
            if ok
            else "a table delivered nothing, failed, or snowsource did not exit 0"
        )
    )
    return 0 if ok else 1


# --------------------------------------------------------------------------------------------
# peek
# --------------------------------------------------------------------------------------------


async def peek(topic: str, count: int, bootstrap: str) -> int:
    """Print the last ``count`` records of ``topic``: key, headers, value."""
    conn = KafkaConnection(bootstrap_servers=bootstrap, client_id="snowsource-demo-peek")
    async with admin_client(conn) as admin:
        found = await existing_topics(admin, [topic])
    if topic not in found:
        print(f"peek: topic {topic!r} not found at {bootstrap}", file=sys.stderr)
        return 1
    consumer = AIOKafkaConsumer(**conn.client_kwargs(), enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(found[topic])]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        for tp in tps:
            consumer.seek(tp, max(ends[tp] - count, starts[tp]))
        records: list[Any] = []
        pending = [tp for tp in tps if ends[tp] > starts[tp]]
        while pending:
            for tp, batch in (await consumer.getmany(*pending, timeout_ms=1000)).items():
                records.extend(r for r in batch if r.offset < ends[tp])
            pending = [tp for tp in pending if await consumer.position(tp) < ends[tp]]
        for record in sorted(records, key=lambda r: r.timestamp)[-count:]:
            headers = {k: v.decode("utf-8", "replace") for k, v in record.headers}
            key = record.key.decode("utf-8", "replace") if record.key else None
            value = json.loads(record.value) if record.value else None
            print(f"--- {topic}[{record.partition}]@{record.offset} key={key}")
            print(f"    headers: {json.dumps(headers)}")
            print("    value: " + json.dumps(value, indent=2).replace("\n", "\n    "))
        if not records:
            print(f"peek: topic {topic!r} is empty")
        return 0
    finally:
        await consumer.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "peek":
        parser = argparse.ArgumentParser(prog="demo.py peek")
        parser.add_argument("topic")
        parser.add_argument("--count", type=int, default=5)
        parser.add_argument("--bootstrap", default=Options.from_env().bootstrap)
        ns = parser.parse_args(args[1:])
        return asyncio.run(peek(ns.topic, ns.count, ns.bootstrap))
    if args:
        print(__doc__)
        return 2
    # The live view is the output: library warnings (retries while Kafka or the emulator come
    # up) would only scroll it away. The daemon's own log goes to its file in full.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL + 1)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    return asyncio.run(demo(Options.from_env()))


if __name__ == "__main__":
    raise SystemExit(main())
