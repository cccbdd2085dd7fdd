"""``make demo`` headless: every table's rows reach Kafka, then a clean stop (snowsource.demo)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from snowsource.config.loader import load_config
from tests.integration.engine import read_offsets, read_topic
from tests.kafka_support import REPO, unique

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TABLES = ("incident", "change_request", "cmdb_ci")


async def test_headless_demo_streams_every_table(
    kafka_bootstrap: str, kafka_admin: AIOKafkaAdminClient
) -> None:
    prefix = unique("demo") + "."
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNOWSOURCE_", "DEMO_"))}
    env.update(
        {
            "DEMO_SECONDS": "20",
            "DEMO_ROWS": "300",
            "DEMO_LATENCY_MS": "0",
            "DEMO_TOPIC_PREFIX": prefix,
            "KAFKA_BOOTSTRAP": kafka_bootstrap,
        }
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "snowsource.demo",
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=100)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    output = out.decode("utf-8", "replace")
    topics = [prefix + table for table in TABLES]
    try:
        assert proc.returncode == 0, output[-4000:]
        assert "Summary" in output
        assert "OK: every table delivered rows" in output
        config = re.search(r"offsets list --config (\S+)", output)
        assert config is not None, output[-2000:]
        # Hints name the broker and the emulator port this run used.
        assert f"peek {prefix}incident --count 3 --bootstrap {kafka_bootstrap}" in output
        emulator = re.search(r"on http://127\.0\.0\.1:(\d+)", output)
        assert emulator is not None
        assert f"emulator --port {emulator.group(1)} --tables" in output
        # The console's URL, on the REST port the run's curl hint uses.
        console = re.search(r"console: open (http://127\.0\.0\.1:\d+)/console ", output)
        assert console is not None, output[:2000]
        assert f"curl -s {console.group(1)}/connectors/" in output
        # Headless: a line per table on change and a summary every 10 s, not every table
        # every few seconds.
        stamped = [line for line in output.splitlines() if line.startswith("[")]
        summaries = [line for line in stamped if "rows to Kafka:" in line]
        assert 1 <= len(summaries) <= 2, stamped
        # snow.discover adds the tables under task (the demo prints how many).
        found = re.search(r"(\d+) more tables from sys_db_object", output)
        assert found is not None, output[:2000]
        assert int(found.group(1)) >= 5
        shown = len(TABLES) + int(found.group(1))
        assert len(stamped) - len(summaries) <= 4 * shown, stamped

        for table, topic in zip(TABLES, topics, strict=True):
            records = await read_topic(kafka_bootstrap, topic)
            assert records, f"no records in {topic}"
            assert {r.headers["snow.table"] for r in records} == {table.encode()}
            assert all(r.key for r in records)

        # The clean shutdown committed every table's position in the offsets topic.
        settings = load_config(config.group(1), env={}).settings
        offsets = await read_offsets(kafka_bootstrap, settings.offset_storage_topic, settings.name)
        # Every table: the explicit three and those snow.discover found under task.
        assert set(offsets) >= set(TABLES) | {"task", "problem", "u_priority_incident"}
        assert len(offsets) == shown
        assert {offset["phase"] for offset in offsets.values()} == {"stream"}
    finally:
        existing = [t for t in topics if t in await kafka_admin.list_topics()]
        if existing:
            await kafka_admin.delete_topics(existing)


def _make_demo_in_a_terminal(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """``make demo`` as a user runs it: in a terminal (a pty) whose foreground job it is.

    Returns the process and the pty's master end."""
    master, slave = os.openpty()

    def controlling_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        ["make", "--no-print-directory", "demo"],
        cwd=REPO,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling_terminal,  # noqa: PLW1509 - the child needs its own terminal
    )
    os.close(slave)
    return proc, master


def _read_until(master: int, marker: bytes, seen: bytearray, timeout: float) -> bool:
    return _read_until_true(master, lambda text: marker in text, seen, timeout)


def _read_until_true(
    master: int, done: Callable[[bytearray], bool], seen: bytearray, timeout: float
) -> bool:
    """Read the terminal into ``seen`` until ``done(seen)``, it closes or time runs out."""
    deadline = time.monotonic() + timeout
    while not done(seen):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([master], [], [], remaining)
        if not ready:
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed: every process on it ended
            return done(seen)
        if not chunk:
            return done(seen)
        seen += chunk
    return True


FOOTER = b"Ctrl-C stops the demo"


def _every_table_streams(text: bytearray) -> bool:
    """The last whole frame (the lines between the last two footers) shows only streaming
    tables: none waiting for its first rows and none in backfill (whose line shows a rate)."""
    frames = text.split(FOOTER)
    if len(frames) < 3:
        return False
    frame = frames[-2]
    waiting = b"waiting for the first rows" in frame or b"rows/s" in frame
    return b"sweeps" in frame and not waiting


async def test_ctrl_c_ends_make_demo_with_exit_0(
    kafka_bootstrap: str, kafka_admin: AIOKafkaAdminClient
) -> None:
    if os.environ.get("SNOWSOURCE_TEST_KAFKA") or shutil.which("make") is None:
        pytest.skip("needs make and the local broker that scripts/kafka.sh runs")
    prefix = unique("demo") + "."
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNOWSOURCE_", "DEMO_"))}
    env.pop("KAFKA_BOOTSTRAP", None)
    env.update(
        {
            "KAFKA_PORT": kafka_bootstrap.rsplit(":", 1)[1],
            "DEMO_ROWS": "300",
            "DEMO_LATENCY_MS": "0",
            "DEMO_TOPIC_PREFIX": prefix,
            "TERM": "dumb",
        }
    )
    proc, master = await asyncio.to_thread(_make_demo_in_a_terminal, env)
    seen = bytearray()
    try:
        started = await asyncio.to_thread(_read_until, master, FOOTER, seen, 90)
        assert started, seen.decode("utf-8", "replace")[-3000:]
        # Every table, the discovered ones too, streams: the demo's exit code says whether each
        # delivered rows, so Ctrl-C before that would be a "PROBLEM" by design. The terminal
        # turns Ctrl-C into SIGINT for its foreground process group.
        streaming = await asyncio.to_thread(
            _read_until_true, master, _every_table_streams, seen, 60
        )
        assert streaming, seen.decode("utf-8", "replace")[-3000:]
        os.write(master, b"\x03")
        await asyncio.to_thread(_read_until, master, b"\x00never", seen, 60)
        code = await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.returncode is None:  # the test failed before make ended: end what it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait)
        os.close(master)
        topics = [t for t in await kafka_admin.list_topics() if t.startswith(prefix)]
        if topics:
            await kafka_admin.delete_topics(topics)
    output = seen.decode("utf-8", "replace")
    assert code == 0, f"make exited {code}:\n{output[-3000:]}"  # -2 would be "died of SIGINT"
    assert "OK: every table delivered rows" in output
    assert "Interrupt" not in output  # make's own "*** [demo] Interrupt"


async def test_ctrl_c_while_the_emulator_starts_is_a_clean_stop(kafka_bootstrap: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNOWSOURCE_", "DEMO_"))}
    # Seeding this many rows takes far longer than the test waits.
    env.update({"DEMO_ROWS": "2000000", "KAFKA_BOOTSTRAP": kafka_bootstrap})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "snowsource.demo",
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    seen = b""
    try:
        async with asyncio.timeout(60):
            while b"starting the ServiceNow emulator" not in seen:
                line = await proc.stdout.readline()
                assert line, seen.decode()
                seen += line
            proc.send_signal(signal.SIGINT)
            rest, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    output = (seen + rest).decode("utf-8", "replace")
    assert proc.returncode == 0, output
    assert "interrupted while the emulator was starting" in output
