"""Restarts without duplicates: the dedup cache is rebuilt from the output topic.

After a restart, a resume or an internal restart the first sweep re-reads the overlap window
before the committed cursor. Every (sys_id, value) of that window is already in Kafka and must
not be produced again — neither after SIGTERM nor after kill -9 in the middle of a page, where
records acknowledged after the last offset write are in the topic too.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.offset_store import OffsetStore
from snowsource.core.offsets_codec import SourceOffset, encode_value
from snowsource.emulator.journal import Request
from snowsource.runtime.deadline import Deadline
from tests.integration.conftest import Env
from tests.integration.engine import (
    Record,
    caught_up,
    committed_stream,
    read_offsets,
    read_topic,
    running,
    status,
    sweeps_after,
    write_config,
)
from tests.integration.processes import SNOWSOURCE
from tests.polling import poll_until


def _bursts(env: Env, seconds: int, per_second: int) -> list[dict[str, str]]:
    """``per_second`` rows stamped in each of ``seconds`` consecutive seconds, an hour ago."""
    base = env.emu.clock.now() - timedelta(hours=1)
    rows: list[dict[str, str]] = []
    for second in range(seconds):
        rows.extend(env.emu.burst("incident", per_second, at=base + timedelta(seconds=second)))
    return rows


def _pairs(records: list[Record]) -> Counter[tuple[bytes | None, bytes | None]]:
    return Counter((r.key, r.value) for r in records)


def _assert_each_version_once(env: Env, records: list[Record]) -> None:
    pairs = _pairs(records)
    twice = {key: n for (key, _v), n in pairs.items() if n > 1}
    assert not twice, f"(sys_id, value) emitted more than once: {twice}"
    final = {r["sys_id"]: r for r in env.emu.rows("incident")}
    seen = {r.key.decode(): r.json for r in records if r.key is not None}
    assert set(seen) == set(final)
    for sys_id, row in final.items():
        assert seen[sys_id]["sys_mod_count"] == row["sys_mod_count"], sys_id


class Daemon:
    """``snowsource run`` as a real process, its JSON log in its own file per start."""

    def __init__(self, env: Env, config: Path) -> None:
        self.env = env
        self.config = config
        self.starts = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.log = config.with_suffix(".0.log")

    async def start(self) -> None:
        self.starts += 1
        self.log = self.config.with_suffix(f".{self.starts}.log")
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                SNOWSOURCE,
                "run",
                "--config",
                str(self.config),
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_bytes().splitlines():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                out.append({"event": line.decode("utf-8", "replace")})
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == name]

    async def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert await self.proc.wait() == 0, self.log.read_text()[-3000:]

    async def killed(self) -> None:
        """Wait for a process that a test hook kills with SIGKILL."""
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), 60)
        assert code == -signal.SIGKILL, self.log.read_text()[-3000:]

    def quiet_sweeps(self) -> int:
        return sum(1 for line in self.events("sweep") if line.get("rows_emitted") == 0)


def _config(env: Env, name: str, **top: Any) -> Path:
    return write_config(
        env.tmp_path / f"{name}.yaml",
        env.document({"incident": {"name": "incident"}}, **{"batch.size": 50, **top}),
    )


async def _emitted(env: Env) -> int:
    return len(await read_topic(env.bootstrap, env.topic("incident")))


async def _finish_with_quiet_sweeps(daemon: Daemon) -> None:
    """Run until caught up and three sweeps in a row emitted nothing, then SIGTERM."""
    await daemon.start()
    await poll_until(lambda: daemon.quiet_sweeps() >= 3, timeout=90, interval=0.2)
    await daemon.terminate()


@pytest.mark.slow
async def test_sigterm_in_a_backfill_of_same_second_bursts_then_restart_emits_nothing_twice(
    env: Env,
) -> None:
    rows = _bursts(env, seconds=40, per_second=15)
    env.emu.latency_ms = 30  # the SIGTERM lands in the middle of the backfill
    daemon = Daemon(env, _config(env, "term"))
    await daemon.start()
    await poll_until(lambda: _emitted_at_least(env, 200), timeout=60, interval=0.05)
    await daemon.terminate()
    first = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(first) < len(rows), "SIGTERM must land during the backfill"

    # New versions of rows that already reached Kafka: the same key, another value.
    env.emu.latency_ms = 0
    now = env.emu.clock.now()
    for row in rows[:5]:
        env.emu.update("incident", row["sys_id"], {"short_description": "changed"}, at=now)
    await _finish_with_quiet_sweeps(daemon)

    records = await read_topic(env.bootstrap, env.topic("incident"))
    _assert_each_version_once(env, records)
    (rebuilt,) = daemon.events("dedup cache rebuilt from the output topic")
    # The overlap window held whole bursts of rows of the first run: all of them read back.
    assert rebuilt["records"] >= 15
    assert rebuilt["complete"] is True
    suppressed = sum(line["rows_suppressed"] for line in daemon.events("sweep"))
    assert suppressed >= 15, "the restart must have re-read the overlap window"


async def _emitted_at_least(env: Env, n: int) -> bool:
    return await _emitted(env) >= n


class KillAtPage:
    """SIGKILLs the daemon a few milliseconds after its n-th page request of a run arrives:
    the previous page is then being produced, acknowledged and committed."""

    def __init__(self, daemon: Daemon, env: Env, rng: random.Random) -> None:
        self._daemon = daemon
        self._rng = rng
        self._loop = asyncio.get_running_loop()
        self._page = 0
        self._seen = 0
        env.emu.on_request(self._hook)

    def arm(self, page: int) -> None:
        """Kill at the ``page``-th page request from now on (0: never)."""
        self._page, self._seen = page, 0

    def _hook(self, entry: Request) -> None:
        if not self._page or "ORDERBY" not in entry.params.get("sysparm_query", ""):
            return
        self._seen += 1
        proc = self._daemon.proc
        if self._seen == self._page and proc is not None and proc.returncode is None:
            self._loop.call_later(self._rng.uniform(0, 0.02), _kill, proc)


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGKILL)


@pytest.mark.slow
async def test_kill_9_mid_page_then_restart_emits_nothing_twice(env: Env) -> None:
    rows = _bursts(env, seconds=40, per_second=15)
    rng = random.Random(12)
    env.emu.latency_ms = 10
    # One pager: the kill lands after the page before it was committed. With slices the first
    # page requests go out together, so a kill at the 3rd to 5th can come before the table's
    # first offset write; a restart without an offset has no cursor to rebuild the dedup cache
    # from and sends the prefix range's pages again (docs/decisions.md, "Parallel backfill").
    # Sliced kills: tests/integration/test_slices_restarts.py.
    daemon = Daemon(env, _config(env, "kill", **{"batch.size": 60, "backfill.slices": 1}))
    killer = KillAtPage(daemon, env, rng)
    for page in (4, 3, 5):
        killer.arm(page)
        await daemon.start()
        await daemon.killed()
    killer.arm(0)
    keys = {r.key for r in await read_topic(env.bootstrap, env.topic("incident"))}
    assert len(keys) < len(rows), "the kills must land during the backfill"
    await _finish_with_quiet_sweeps(daemon)

    records = await read_topic(env.bootstrap, env.topic("incident"))
    _assert_each_version_once(env, records)
    rebuilt = daemon.events("dedup cache rebuilt from the output topic")
    assert len(rebuilt) == 1
    assert rebuilt[0]["records"] > 0


async def test_records_acknowledged_after_the_last_offset_write_are_not_produced_again(
    env: Env,
) -> None:
    """The offset write of the last 40 rows was lost (a crash between ack and offset write):
    the restart re-reads them, and finds every one of them already in the topic."""
    rows = _bursts(env, seconds=20, per_second=6)
    settings = env.settings({"incident": {"name": "incident"}}, **{"overlap.seconds": 3})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    before = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(before) == len(rows)
    ordered = sorted(rows, key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    older = ordered[-40]
    stored = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    rewound = SourceOffset(
        version="1",
        timestamp=older["sys_updated_on"],
        sys_id=older["sys_id"],
        phase="backfill",
        fingerprint=stored["fingerprint"],
    )
    spec = next(s for s in daemon.specs if s.alias == "incident")
    # A fresh offsets topic holding only the older commit: to the daemon this is exactly the
    # state a crash leaves (the history of its later commits never written).
    settings = env.settings(
        {"incident": {"name": "incident"}},
        **{"overlap.seconds": 3, "offset.storage.topic": f"{env.offsets_topic}-lost"},
    )
    async with OffsetStore(
        KafkaConnection(env.bootstrap),
        topic=settings.offset_storage_topic,
        connector=env.name,
        partitions=1,
    ) as store:
        await store.write(spec.partition, encode_value(rewound))

    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        table = status(daemon, "incident")
        assert table.rows_emitted == 0
        assert table.rows_suppressed >= 40
    after = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(after) == len(before)


async def test_resume_rebuilds_the_cache_and_re_emits_nothing(env: Env) -> None:
    rows = _bursts(env, seconds=10, per_second=10)
    settings = env.settings({"incident": {"name": "incident"}}, **{"overlap.seconds": 5})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        assert await daemon.stop_pollers(Deadline.after(10)) == []
        await daemon.start_pollers(reload=True)
        await poll_until(caught_up(daemon, "incident"))
        await sweeps_after(daemon, "incident", 2)
        table = status(daemon, "incident")
        assert table.rows_emitted == 0
        # Every row of the last five seconds and the committed one: 6 bursts of 10.
        assert table.rows_suppressed >= 50
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(records) == len(rows)


async def _offset_records(env: Env, topic: str) -> int:
    return len(await read_topic(env.bootstrap, topic))


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
@pytest.mark.parametrize("slices", [1, 4], ids=["one-pager", "sliced"])
async def test_a_sweep_whose_rows_were_all_in_kafka_moves_the_offset_to_its_last_row(
    env: Env, exactly_once: bool, slices: int
) -> None:
    """SPEC §15.4: the state a kill -9 leaves between produce and offset write (records in the
    topic past the stored offset). The restart's rebuild suppresses every re-read row, and
    its first completed sweep still moves the stored offset to the last row it read, with no
    new record; later sweeps that move nothing write no offset. Sliced: the backfill's end
    commits it (the stored offset says ``backfill``, so the restart's first sweep is sliced)."""
    rows = _bursts(env, seconds=20, per_second=6)
    top = {"overlap.seconds": 3, "exactly.once": exactly_once, "backfill.slices": slices}
    async with running(env.settings({"incident": {"name": "incident"}}, **top)) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    topic = env.topic("incident")
    before = await read_topic(env.bootstrap, topic, isolation_level=isolation)
    assert len(before) == len(rows)
    ordered = sorted(rows, key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    older, last = ordered[-40], ordered[-1]
    stored = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    lost_topic = f"{env.offsets_topic}-lost"
    settings = env.settings(
        {"incident": {"name": "incident"}}, **top, **{"offset.storage.topic": lost_topic}
    )
    spec = next(s for s in daemon.specs if s.alias == "incident")
    # A fresh offsets topic holding only the older commit: the history of the later commits
    # was never written, exactly the state a crash between produce and offset write leaves.
    rewound = SourceOffset(
        timestamp=older["sys_updated_on"],
        sys_id=older["sys_id"],
        phase="backfill",
        fingerprint=stored["fingerprint"],
    )
    async with OffsetStore(
        KafkaConnection(env.bootstrap), topic=lost_topic, connector=env.name, partitions=1
    ) as store:
        await store.write(spec.partition, encode_value(rewound))

    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        table = status(daemon, "incident")
        assert table.rows_emitted == 0
        assert table.rows_suppressed >= 40
        end = (last["sys_updated_on"], last["sys_id"])

        def at_end() -> bool:
            committed = table.committed
            return committed is not None and (committed.timestamp, committed.sys_id) == end

        await poll_until(at_end, timeout=10)
        await poll_until(committed_stream(daemon, "incident"), timeout=10)
        writes = await _offset_records(env, lost_topic)
        await sweeps_after(daemon, "incident", 3)
        assert table.rows_emitted == 0
        # Quiet sweeps re-read their overlap window and move nothing: no offset write.
        assert await _offset_records(env, lost_topic) == writes
    offset = (await read_offsets(env.bootstrap, lost_topic, env.name))["incident"]
    assert (offset["timestamp"], offset["sys_id"], offset["phase"]) == (*end, "stream")
    if slices > 1:
        # The sliced sweep's end wrote it, before the one-pager sweep after it said "stream".
        history = [r.json for r in await read_topic(env.bootstrap, lost_topic) if r.value]
        assert {**offset, "phase": "backfill"} in history
    after = await read_topic(env.bootstrap, topic, isolation_level=isolation)
    assert len(after) == len(before)
