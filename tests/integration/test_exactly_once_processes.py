"""Exactly-once with real ``snowsource run`` processes: zombie fencing, and kill -9 chaos.

ServiceNow is the in-process emulator (its rows change all along); Kafka is a real broker. What
is checked is what a ``read_committed`` consumer sees: every final row version, and no
(sys_id, value) twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import signal
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from snowsource.core.assignment import assign
from snowsource.emulator.journal import Request
from tests.integration.conftest import Env
from tests.integration.engine import Record, read_topic, write_config
from tests.integration.processes import start_run
from tests.kafka_support import REPO, LocalBroker, free_broker_port
from tests.polling import poll_until

SNOWSOURCE = str(REPO / ".venv" / "bin" / "snowsource")

pytestmark = pytest.mark.slow


class Process:
    """One ``snowsource run`` process; its JSON log in a file of its own per start."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.starts = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.log = config.with_suffix(".0.log")
        self.logs: list[Path] = []

    async def start(self) -> None:
        self.starts += 1
        self.log = self.config.with_suffix(f".{self.starts}.log")
        self.logs.append(self.log)
        self.proc = await start_run(self.config, self.log)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def lines(self, log: Path | None = None) -> list[dict[str, Any]]:
        out = []
        for line in (log or self.log).read_bytes().splitlines():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                out.append({"event": line.decode("utf-8", "replace"), "level": "raw"})
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == name]

    def all_lines(self) -> list[dict[str, Any]]:
        return [line for log in self.logs for line in self.lines(log)]

    async def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        assert code == 0, self.log.read_text()[-3000:]

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)

    async def killed(self) -> None:
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), 60)
        assert code == -signal.SIGKILL, self.log.read_text()[-3000:]


@pytest.fixture
async def reaper() -> AsyncIterator[list[Process]]:
    """Processes a test started; any still running at teardown (a failed test) is killed."""
    started: list[Process] = []
    yield started
    for process in started:
        if process.proc is not None and process.proc.returncode is None:
            process.kill()
            await process.proc.wait()


def _backfill(env: Env, seconds: int, per_second: int) -> None:
    base = env.emu.clock.now() - timedelta(hours=1)
    for second in range(seconds):
        env.emu.burst("incident", per_second, at=base + timedelta(seconds=second))


@contextlib.asynccontextmanager
async def _changing(env: Env, rng: random.Random, every: float = 0.05) -> AsyncIterator[None]:
    """Rows keep changing (updates and inserts, stamped now) until the block ends."""

    async def change() -> None:
        n = 0
        while True:
            n += 1
            ids = [r["sys_id"] for r in env.emu.rows("incident")]
            if n % 5 == 0:
                env.emu.insert("incident", {"short_description": f"new {n}"})
            else:
                env.emu.update("incident", rng.choice(ids), {"short_description": f"v{n}"})
            await asyncio.sleep(every)

    task = asyncio.create_task(change())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _committed(env: Env) -> list[Record]:
    return await read_topic(env.bootstrap, env.topic("incident"), isolation_level="read_committed")


def _assert_every_final_version_once(env: Env, records: list[Record]) -> None:
    pairs = Counter((r.key, r.value) for r in records)
    twice = {key: n for (key, _value), n in pairs.items() if n > 1}
    assert not twice, f"(sys_id, value) seen more than once under read_committed: {twice}"
    latest = {r.key.decode(): r.json for r in records if r.key is not None}
    final = {r["sys_id"]: r for r in env.emu.rows("incident")}
    assert set(latest) == set(final)
    stale = {
        sys_id
        for sys_id, row in final.items()
        if latest[sys_id]["sys_mod_count"] != row["sys_mod_count"]
    }
    assert not stale, f"final versions missing for {sorted(stale)[:5]}"


async def _has_final_versions(env: Env) -> bool:
    records = await _committed(env)
    latest = {r.key.decode(): r.json["sys_mod_count"] for r in records if r.key is not None}
    return latest == {r["sys_id"]: r["sys_mod_count"] for r in env.emu.rows("incident")}


def _config(
    env: Env, name: str, tables: dict[str, dict[str, Any]] | None = None, **top: Any
) -> Path:
    document = env.document(
        tables or {"incident": {"name": "incident"}},
        **{"exactly.once": True, "batch.size": 25, "overlap.seconds": 5, **top},
    )
    return write_config(env.tmp_path / f"{name}.yaml", document)


def _no_library_noise(process: Process) -> None:
    noisy = [
        line
        for line in process.all_lines()
        if "never retrieved" in str(line.get("event")) or line.get("level") == "raw"
    ]
    assert not noisy, noisy[:3]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("when", ["streaming", "mid_backfill"])
async def test_a_second_owner_fences_the_first_which_stops_the_table(
    env: Env, reaper: list[Process], when: str
) -> None:
    """Two processes forced to own the same table (different task ids, so the group's task-id
    fencing plays no part): the newer producer fences the older, which FAILs the table naming
    the transactional id and the newer process; read_committed sees nothing twice.

    ``mid_backfill``: the fence meets the older process's slices (4) in the middle of its
    backfill, with the pages of other slices still in flight."""
    mid_backfill = when == "mid_backfill"
    _backfill(env, seconds=60 if mid_backfill else 30, per_second=25 if mid_backfill else 10)
    env.emu.latency_ms = 20
    rng = random.Random(7)
    older = Process(_config(env, "older"))  # task 0 of 1: every table
    # Task 1 of 2 owns incident when the connector has a second table: another task id.
    tables = {"incident": {"name": "incident"}, "problem": {"name": "problem"}}
    assert assign(list(tables), 2)["incident"] == 1
    newer = Process(_config(env, "newer", tables=tables, **{"tasks.max": 2, "task.id": 1}))
    reaper += [older, newer]
    async with _changing(env, rng):
        await older.start()
        await poll_until(lambda: _at_least(env, 60), timeout=60, interval=0.1)
        if mid_backfill:
            # 60 pages of 25: the older process's slices cannot finish before the fence.
            env.emu.latency_ms = 1000
            assert not _caught_up(older)
        await newer.start()
        await poll_until(lambda: bool(older.events("table FAILED")), timeout=60, interval=0.1)
        if mid_backfill:
            assert not _caught_up(older), "the fence came after the backfill"
            env.emu.latency_ms = 20
        await poll_until(lambda: _caught_up(newer), timeout=90, interval=0.2)
    env.emu.latency_ms = 0
    await poll_until(lambda: _has_final_versions(env), timeout=60, interval=0.5)

    (fenced,) = older.events("table fenced by a newer producer")
    assert fenced["transactional_id"].startswith(f"snowsource-{env.name}-")
    assert any(f"pid {newer.pid}" in member for member in fenced["other_members"])
    (failed,) = older.events("table FAILED")
    assert "fenced" in failed["error"]
    assert fenced["transactional_id"] in failed["error"]
    assert not newer.events("table FAILED")
    # The zombie sends nothing more: no transaction of its own after the fence.
    fenced_at = older.lines().index(fenced)
    assert not [e for e in older.lines()[fenced_at:] if e.get("event") == "sweep"]
    await newer.terminate()
    await older.terminate()
    _assert_every_final_version_once(env, await _committed(env))
    _no_library_noise(older)
    _no_library_noise(newer)


async def _at_least(env: Env, n: int) -> bool:
    return len(await _committed(env)) >= n


def _caught_up(process: Process) -> bool:
    return any(e.get("phase") == "stream" for e in process.events("sweep"))


class KillAtPage:
    """SIGKILLs the process a few milliseconds after its n-th page request arrives (the page
    before is then in its transaction: produced, committed, or in between)."""

    def __init__(self, process: Process, env: Env, rng: random.Random) -> None:
        self._process = process
        self._rng = rng
        self._loop = asyncio.get_running_loop()
        self._page = 0
        self._seen = 0
        env.emu.on_request(self._hook)

    def arm(self, page: int) -> None:
        self._page, self._seen = page, 0

    def _hook(self, entry: Request) -> None:
        if not self._page or "ORDERBY" not in entry.params.get("sysparm_query", ""):
            return
        self._seen += 1
        if self._seen == self._page:
            self._loop.call_later(self._rng.uniform(0, 0.03), self._process.kill)


@pytest.mark.timeout(300)  # eight kill -9s, a broker of its own started twice
async def test_kill_9_at_random_points_and_a_broker_restart_lose_and_repeat_nothing(
    env: Env, tmp_path: Path, reaper: list[Process]
) -> None:
    broker = LocalBroker(port=free_broker_port(), data_dir=tmp_path / "kafka")
    await asyncio.to_thread(broker.start)
    try:
        env.bootstrap = broker.bootstrap
        _backfill(env, seconds=40, per_second=12)
        env.emu.latency_ms = 10
        rng = random.Random(1812)
        process = Process(_config(env, "chaos", kafka={"bootstrap.servers": broker.bootstrap}))
        reaper.append(process)
        killer = KillAtPage(process, env, rng)
        async with _changing(env, rng):
            for kill in range(8):
                killer.arm(rng.randint(2, 6))
                await process.start()
                if kill == 4:
                    # The broker goes away under a running process and comes back.
                    killer.arm(0)
                    wanted = len(await _committed(env)) + 25
                    await poll_until(functools.partial(_at_least, env, wanted), timeout=60)
                    await asyncio.to_thread(broker.stop)
                    await asyncio.sleep(1)  # an outage, not a synchronisation
                    await asyncio.to_thread(broker.start)
                    killer.arm(rng.randint(2, 6))
                await process.killed()
            killer.arm(0)
            await process.start()
            await poll_until(lambda: _caught_up(process), timeout=90, interval=0.2)
        env.emu.latency_ms = 0
        await poll_until(lambda: _has_final_versions(env), timeout=60, interval=0.5)
        await process.terminate()

        records = await _committed(env)
        _assert_every_final_version_once(env, records)
        await _assert_offsets_only_committed(env, records)
        _no_library_noise(process)
    finally:
        await asyncio.to_thread(broker.stop)


async def _assert_offsets_only_committed(env: Env, records: list[Record]) -> None:
    """Every offset a read_committed reader of the offsets topic sees points at a row version
    that is in the output topic under read_committed: no offset outran its page."""
    committed_rows = {
        (r.key.decode(), r.headers["snow.timestamp"].decode()) for r in records if r.key
    }
    offsets = await read_topic(env.bootstrap, env.offsets_topic, isolation_level="read_committed")
    cursors = [orjson.loads(r.value) for r in offsets if r.value is not None]
    assert cursors
    for cursor in cursors:
        assert (cursor["sys_id"], cursor["timestamp"]) in committed_rows, cursor
