"""Restarts, crashes, signals and Kafka outages never lose a row (SPEC §1, §6, §7)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import pytest

from snowsource.core.cursor import Position
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_offsets, read_topic, running, write_config
from tests.integration.processes import start_run
from tests.kafka_support import LocalBroker, free_broker_port
from tests.polling import poll_until


def _positions(rows: list[dict[str, str]]) -> list[Position]:
    return sorted(Position(r["sys_updated_on"], r["sys_id"]) for r in rows)


async def test_process_restart_resumes_from_committed_minus_overlap(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=120)
    settings = env.settings({"incident": {"name": "incident"}}, **{"overlap.seconds": 5})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    first = await read_topic(env.bootstrap, env.topic("incident"))
    committed = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    assert len(first) == 120

    # New rows after the first run; the restart must not backfill the table again.
    now = env.emu.clock.now()
    new = [env.emu.insert("incident", {"short_description": f"new {i}"}, at=now) for i in range(3)]
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        await poll_until(lambda: _all_keys_present(env, {r["sys_id"] for r in new}))
    second = (await read_topic(env.bootstrap, env.topic("incident")))[len(first) :]
    keys = Counter(r.key.decode() for r in second if r.key)
    assert {r["sys_id"] for r in new} <= set(keys)
    # Only rows inside the overlap window before the committed cursor come again.
    floor = Position(committed["timestamp"], "").minus(5)
    for record in second:
        stamp = record.headers["snow.timestamp"].decode()
        assert stamp >= floor.ts, f"{record.key!r} at {stamp} is older than the overlap window"
    assert max(keys.values()) == 1


async def test_restart_after_every_page_of_a_backfill_loses_nothing(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=300)
    rows = env.emu.rows("incident")
    # Slow pages so that each run stops right after its first page reached Kafka.
    env.emu.latency_ms = 150
    batch, overlap = 30, 2
    settings = env.settings(
        {"incident": {"name": "incident"}},
        **{"batch.size": batch, "overlap.seconds": overlap},
    )
    restarts = 0
    while True:
        async with running(settings) as daemon:
            status = daemon.pollers["incident"].status
            await poll_until(
                lambda s=status: s.rows_emitted > 0 or s.caught_up  # type: ignore[misc]
            )
            done = status.caught_up
        restarts += 1
        if done:
            break
        assert restarts < 40, "backfill made no progress across restarts"
    assert restarts >= 5, "the test must really restart in the middle of the backfill"

    records = await read_topic(env.bootstrap, env.topic("incident"))
    counts = Counter(r.key.decode() for r in records if r.key)
    assert set(counts) == {r["sys_id"] for r in rows}
    # Each restart may re-emit the overlap window and one page: never more.
    duplicates = sum(counts.values()) - len(counts)
    by_second = Counter(r["sys_updated_on"] for r in rows)
    widest_window = max(by_second.values()) * (overlap + 1)
    assert duplicates <= restarts * (batch + widest_window)
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    last = _positions(rows)[-1]
    assert (offsets["incident"]["timestamp"], offsets["incident"]["sys_id"]) == (last.ts, last.id)
    assert offsets["incident"]["phase"] == "stream"


async def _emitted(env: Env, alias: str) -> int:
    return len(await read_topic(env.bootstrap, env.topic(alias)))


@pytest.mark.slow
async def test_kill_9_mid_backfill_then_restart_loses_no_row(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=3000)
    env.emu.latency_ms = 20  # a backfill that takes a few seconds, so the kill lands mid-way
    rows = env.emu.rows("incident")
    config = write_config(
        env.tmp_path / "kill9.yaml",
        env.document({"incident": {"name": "incident"}}, **{"batch.size": 100}),
    )
    log = env.tmp_path / "kill9.log"
    proc = await start_run(config, log)
    try:
        await poll_until(lambda: _emitted_at_least(env, 500), timeout=60, interval=0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
    before = await _emitted(env, "incident")
    assert before < len(rows), "the kill must land before the backfill finished"
    committed = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    # Nothing committed points past a row that reached Kafka.
    emitted_keys = {
        r.key.decode() for r in await read_topic(env.bootstrap, env.topic("incident")) if r.key
    }
    assert committed["sys_id"] in emitted_keys

    proc = await start_run(config, log)
    try:
        await poll_until(lambda: _committed_phase_is(env, "stream"), timeout=90, interval=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0, log.read_text()[-3000:]
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert {r.key.decode() for r in records if r.key} == {r["sys_id"] for r in rows}


async def _emitted_at_least(env: Env, n: int) -> bool:
    return await _emitted(env, "incident") >= n


async def _committed_phase_is(env: Env, phase: str) -> bool:
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    return "incident" in offsets and offsets["incident"]["phase"] == phase


@pytest.mark.slow
async def test_sigterm_during_backfill_exits_0_with_offsets_committed(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=3000)
    env.emu.latency_ms = 20
    config = write_config(
        env.tmp_path / "term.yaml",
        env.document(
            {"incident": {"name": "incident"}},
            **{"batch.size": 100, "backfill.max.ahead.rows": 500},
        ),
    )
    log = env.tmp_path / "term.log"
    proc = await start_run(config, log)
    await poll_until(lambda: _emitted_at_least(env, 300), timeout=60, interval=0.1)
    proc.send_signal(signal.SIGTERM)
    assert await proc.wait() == 0, log.read_text()[-3000:]
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(records) < 3000, "SIGTERM must land during the backfill"
    committed = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    # Everything up to the offset is in Kafka. Slices (the default, 4) also produced rows of
    # later ranges, past the first range not known to be finished: never more than
    # backfill.max.ahead.rows (500 here) plus one page per slice.
    emitted = {r.key.decode() for r in records if r.key}
    ordered = sorted(env.emu.rows("incident"), key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    at = [r["sys_id"] for r in ordered].index(committed["sys_id"])
    assert all(r["sys_id"] in emitted for r in ordered[: at + 1])
    assert len(emitted) - (at + 1) <= 500 + 4 * 100
    assert committed["phase"] == "backfill"


@pytest.mark.slow
async def test_kafka_outage_of_a_few_seconds_loses_nothing(env: Env, tmp_path: Path) -> None:
    broker = LocalBroker(port=free_broker_port(), data_dir=tmp_path / "kafka")
    broker.start()
    try:
        env.bootstrap = broker.bootstrap
        env.emu.seed(tables=("incident",), rows=200)
        settings = env.settings(
            {"incident": {"name": "incident"}},
            **{"batch.size": 50, "kafka": {"bootstrap.servers": broker.bootstrap}},
        )
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident"), timeout=60)
            await asyncio.to_thread(broker.stop)
            now = env.emu.clock.now()
            during = [
                env.emu.insert("incident", {"short_description": f"outage {i}"}, at=now)
                for i in range(30)
            ]
            await asyncio.to_thread(broker.start)
            await poll_until(
                lambda: _all_keys_present(env, {r["sys_id"] for r in during}),
                timeout=120,
                interval=0.5,
            )
        records = await read_topic(env.bootstrap, env.topic("incident"))
        assert {r.key.decode() for r in records if r.key} == {
            r["sys_id"] for r in env.emu.rows("incident")
        }
        committed = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
        last = _positions(env.emu.rows("incident"))[-1]
        assert (committed["timestamp"], committed["sys_id"]) == (last.ts, last.id)
    finally:
        await asyncio.to_thread(broker.stop)


async def _all_keys_present(env: Env, keys: set[str]) -> bool:
    records = await read_topic(env.bootstrap, env.topic("incident"))
    return keys <= {r.key.decode() for r in records if r.key}
