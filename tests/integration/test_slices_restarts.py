"""Sliced backfills under kill -9 and rewinds (SPEC §14.2: "as with one slice").

kill -9 ten times in the middle of a sliced backfill of real ``snowsource run`` processes: no
row is lost, at-least-once sends no (sys_id, value) twice, exactly-once shows none twice under
read_committed, and the committed offset never moves back. A rewind (REST PATCH, and the
offsets script) into the middle of a sliced backfill re-emits every row from the new position.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientSession

from snowsource.cli.offsets import amain
from snowsource.core.table_status import TableStatus
from tests.integration.conftest import Env
from tests.integration.engine import Record, caught_up, read_topic, running, write_config
from tests.integration.test_exactly_once_processes import (
    KillAtPage,
    Process,
    _assert_offsets_only_committed,
    reaper,
)
from tests.integration.test_rest import base_url, call, offset, spec_of
from tests.polling import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["reaper"]  # the fixture, used by name

KILLS = 10


def _seed(env: Env, seconds: int = 60, per_second: int = 20) -> None:
    base = env.emu.clock.now() - timedelta(hours=1)
    for second in range(seconds):
        env.emu.burst("incident", per_second, at=base + timedelta(seconds=second * 30))


def _config(env: Env, name: str, **top: Any) -> Path:
    document = env.document(
        {"incident": {"name": "incident"}},
        **{
            "batch.size": 25,
            "overlap.seconds": 5,
            "backfill.slices": 4,
            "backfill.max.ahead.rows": 200,
            **top,
        },
    )
    return write_config(env.tmp_path / f"{name}.yaml", document)


async def _offset_history(env: Env) -> list[tuple[str, str]]:
    """Every value the offsets topic holds for this connector, in write order."""
    out = []
    records = await read_topic(env.bootstrap, env.offsets_topic, isolation_level="read_committed")
    for record in records:
        if record.value is not None and env.name.encode() in (record.key or b""):
            value = orjson.loads(record.value)
            out.append((value["timestamp"], value["sys_id"]))
    return out


async def _kill_ten_times(env: Env, process: Process, rng: random.Random) -> None:
    killer = KillAtPage(process, env, rng)
    for _ in range(KILLS):
        killer.arm(rng.randint(3, 12))
        await process.start()
        await process.killed()
    killer.arm(0)
    await process.start()
    await poll_until(lambda: _caught_up(process), timeout=120, interval=0.2)
    await process.terminate()


def _caught_up(process: Process) -> bool:
    return any(e.get("phase") == "stream" for e in process.events("sweep"))


def _assert_complete_and_once(env: Env, records: list[Record]) -> None:
    twice = {k: n for k, n in Counter((r.key, r.value) for r in records).items() if n > 1}
    assert not twice, f"(sys_id, value) sent more than once: {list(twice)[:3]}"
    assert {r.key.decode() for r in records if r.key} == {
        r["sys_id"] for r in env.emu.rows("incident")
    }


async def test_kill_9_ten_times_during_a_sliced_backfill_at_least_once(
    env: Env, reaper: list[Process]
) -> None:
    # 2,400 rows: every kill lands in the backfill (it asks fewer pages than it did).
    _seed(env, seconds=120)
    env.emu.latency_ms = 10
    process = Process(_config(env, "alo"))
    reaper.append(process)
    await _kill_ten_times(env, process, random.Random(2020))
    assert sum(1 for _ in process.all_lines() if _.get("event") == "sliced backfill") >= KILLS
    _assert_complete_and_once(env, await read_topic(env.bootstrap, env.topic("incident")))
    history = await _offset_history(env)
    assert history == sorted(history), "the committed offset moved back"


async def test_kill_9_ten_times_during_a_sliced_backfill_exactly_once(
    env: Env, reaper: list[Process]
) -> None:
    # 2,400 rows: every kill lands in the backfill (it asks fewer pages than it did).
    _seed(env, seconds=120)
    env.emu.latency_ms = 10
    process = Process(_config(env, "eos", **{"exactly.once": True}))
    reaper.append(process)
    await _kill_ten_times(env, process, random.Random(4711))
    records = await read_topic(
        env.bootstrap, env.topic("incident"), isolation_level="read_committed"
    )
    _assert_complete_and_once(env, records)
    await _assert_offsets_only_committed(env, records)
    history = await _offset_history(env)
    assert history == sorted(history), "the committed offset moved back"


# ------------------------------------------------------------------ rewinds


def _rows_from(env: Env, ts: str) -> set[str]:
    return {r["sys_id"] for r in env.emu.rows("incident") if r["sys_updated_on"] >= ts}


#: Rows the slices may read past the prefix in the rewind tests: the table's four ranges (one a
#: slice, cut to end together) would otherwise move the prefix past the middle only near the
#: backfill's end, too late for a rewind to land in it.
_AHEAD = 150


def _middle(env: Env) -> str:
    stamps = sorted(r["sys_updated_on"] for r in env.emu.rows("incident"))
    return stamps[len(stamps) // 2]


def _past(status: TableStatus, ts: str) -> bool:
    return status.committed is not None and status.committed.timestamp > ts


async def _new_keys(env: Env, before: int) -> Counter[str]:
    records = await read_topic(env.bootstrap, env.topic("incident"))
    return Counter(r.key.decode() for r in sorted(records, key=_order)[before:] if r.key)


def _order(record: Record) -> tuple[int, int]:
    return record.partition, record.offset


async def test_a_rest_rewind_into_a_sliced_backfill_re_emits_from_there(env: Env) -> None:
    _seed(env)
    env.emu.latency_ms = 20
    to = _middle(env)
    settings = env.settings(
        {"incident": {"name": "incident"}},
        rest={"enabled": True, "port": 0},
        **{"batch.size": 25, "backfill.slices": 4, "topic.creation.partitions": 1,
           "backfill.max.ahead.rows": _AHEAD},
    )  # fmt: skip
    async with ClientSession() as http, running(settings) as daemon:
        status = daemon.pollers["incident"].status
        await poll_until(lambda: _past(status, to), timeout=60)
        assert status.backfill is not None, "the rewind must land during the sliced backfill"
        url = base_url(daemon)
        code, state = await call(http, "GET", f"{url}/status")
        progress = state["tables"]["incident"]["backfill"]
        assert code == 200
        # 1,200 rows at 25 a page: the window's count makes a range of each ten pages or more.
        assert progress["ranges"] >= 4
        assert 0 < progress["covered"] < 1
        assert progress["rows_read"] >= progress["rows_ahead"] >= 0
        assert (await call(http, "PUT", f"{url}/stop"))[0] == 204
        before = len(await read_topic(env.bootstrap, env.topic("incident")))
        body = {"offsets": [{"partition": spec_of(daemon, "incident").partition.as_dict(),
                             "offset": offset(spec_of(daemon, "incident"), to)}]}  # fmt: skip
        assert (await call(http, "PATCH", f"{url}/offsets", body))[0] == 200
        assert (await call(http, "PUT", f"{url}/resume"))[0] == 202
        await poll_until(caught_up(daemon, "incident"), timeout=90)
    again = await _new_keys(env, before)
    assert set(again) == _rows_from(env, to), "every row from the rewind point, no older one"
    assert max(again.values()) == 1


async def test_an_offsets_script_rewind_into_a_sliced_backfill_re_emits_from_there(
    env: Env,
) -> None:
    _seed(env)
    env.emu.latency_ms = 20
    to = _middle(env)
    top = {"batch.size": 25, "backfill.slices": 4, "topic.creation.partitions": 1,
           "backfill.max.ahead.rows": _AHEAD}  # fmt: skip
    settings = env.settings({"incident": {"name": "incident"}}, **top)
    async with running(settings) as daemon:
        status = daemon.pollers["incident"].status
        await poll_until(lambda: _past(status, to), timeout=60)
        assert status.backfill is not None, "the rewind must land during the sliced backfill"
    before = len(await read_topic(env.bootstrap, env.topic("incident")))
    config = write_config(env.tmp_path / "script.yaml", env.document(
        {"incident": {"name": "incident"}}, **top))  # fmt: skip
    assert await amain(["rewind", "incident", "--to", to, "--config", str(config)]) == 0
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=90)
    again = await _new_keys(env, before)
    assert set(again) == _rows_from(env, to)
    assert max(again.values()) == 1
