"""``deletes: audit`` end to end: tombstones from ``sys_audit_delete`` on the real broker.

The delete stream is a second poller of the table over the emulator's ``sys_audit_delete``, under
its own source partition (``<alias>.deletes``). These tests delete rows while the daemon streams
and check what a compacted consumer relies on: one tombstone per deleted row, after every upsert
of its key, and a cursor that survives restarts like any other.
"""

from __future__ import annotations

import signal
from collections import Counter

import aiohttp
import orjson
import pytest

from snowsource.cli.offsets import amain
from snowsource.core.cursor import Position
from snowsource.core.deletes import ACCESS_HINT, delete_partition
from snowsource.core.offsets_codec import encode_key
from snowsource.core.table_status import TableState
from snowsource.engine.facade import ConnectorState
from snowsource.engine.supervisor import Daemon
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import (
    Record,
    caught_up,
    read_offsets,
    read_topic,
    running,
    settings_from,
    status,
    sweeps_after,
    write_config,
)
from tests.integration.processes import start_run
from tests.polling import poll_until

INCIDENT = {"incident": {"name": "incident", "deletes": "audit"}}


def _tombstones(records: list[Record]) -> list[Record]:
    return [r for r in records if r.value is None]


def _audit_of(env: Env) -> dict[str, str]:
    """documentkey -> sys_created_on of the emulator's incident audit rows."""
    return {
        row["documentkey"]: row["sys_created_on"]
        for row in env.emu.rows("sys_audit_delete")
        if row["tablename"] == "incident"
    }


def _deletes_done(daemon: Daemon, n: int) -> bool:
    deletes = status(daemon, "incident.deletes")
    return deletes.rows_emitted >= n and deletes.caught_up


async def test_twenty_deletes_while_streaming_give_twenty_tombstones_after_their_upserts(
    env: Env,
) -> None:
    env.emu.seed(tables=("incident",), rows=60)
    rows = env.emu.rows("incident")
    doomed = [r["sys_id"] for r in rows[:20]]
    settings = env.settings(INCIDENT)
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.deletes"))
        # While streaming: each doomed row is updated, then deleted, four per sweep; half of
        # them in the same instant, so the table may or may not see the last update first.
        for group in range(5):
            for i, sys_id in enumerate(doomed[group * 4 : group * 4 + 4]):
                env.emu.update("incident", sys_id, {"short_description": f"last words {i}"})
                if i % 2:
                    await sweeps_after(daemon, "incident")
                env.emu.delete("incident", sys_id)
            await sweeps_after(daemon, "incident")
        await poll_until(lambda: _deletes_done(daemon, 20))
        await sweeps_after(daemon, "incident.deletes")
        deletes = status(daemon, "incident.deletes")
        assert deletes.state == TableState.RUNNING
        assert deletes.rows_emitted == 20
        emitted = metrics.REGISTRY.get_sample_value(
            "snowsource_rows_emitted_total", {"table": "incident.deletes"}
        )
        assert emitted is not None
        assert emitted >= 20

    records = await read_topic(env.bootstrap, env.topic("incident"))
    stones = _tombstones(records)
    assert sorted(r.key.decode() for r in stones if r.key) == sorted(doomed)
    audit = _audit_of(env)
    for stone in stones:
        assert stone.key is not None
        key = stone.key.decode()
        assert stone.headers["snow.operation"] == b"delete"
        assert stone.headers["snow.table"] == b"incident"
        assert stone.headers["snow.timestamp"].decode() == audit[key]
        upserts = [r for r in records if r.key == stone.key and r.value is not None]
        assert upserts, f"{key} was emitted before it was deleted"
        assert all(u.partition == stone.partition for u in upserts)
        # A compacted consumer keeps the last record of a key: it must be the tombstone.
        assert max(u.offset for u in upserts) < stone.offset, key
    assert {r.headers["snow.operation"] for r in records if r.value is not None} == {b"upsert"}
    assert {r.headers["snow.instance"] for r in records} == {records[0].headers["snow.instance"]}

    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    last = max(Position(ts, "") for ts in audit.values())
    assert offsets["sys_audit_delete"]["timestamp"] == last.ts
    assert offsets["sys_audit_delete"]["phase"] == "stream"
    assert offsets["incident"]["fingerprint"] != offsets["sys_audit_delete"]["fingerprint"]
    offset_key = encode_key(
        env.name, delete_partition(snow_url=env.url, table="incident", query_domain=True)
    )
    stored = {r.key for r in await read_topic(env.bootstrap, env.offsets_topic)}
    assert offset_key in stored


async def test_the_delete_stream_waits_for_its_tables_first_sweep(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    gone = env.emu.rows("incident")[0]["sys_id"]
    env.emu.delete("incident", gone)
    env.emu.latency_ms = 40  # a first sweep of several pages
    settings = env.settings(INCIDENT, **{"batch.size": 5})
    async with running(settings) as daemon:
        await poll_until(lambda: _deletes_done(daemon, 1))
    records = await read_topic(env.bootstrap, env.topic("incident"))
    stone = _tombstones(records)
    assert [r.key for r in stone] == [gone.encode()]
    # The table's whole first sweep reached Kafka before the tombstone of a row deleted before
    # the daemon started (the table never saw that row, so no upsert of it exists).
    assert all(r.offset < stone[0].offset for r in records if r.value is not None)
    assert len(records) == 30


def _delete(env: Env, rows: list[dict[str, str]]) -> None:
    for row in rows:
        env.emu.delete("incident", row["sys_id"])


async def test_restart_keeps_the_delete_streams_cursor(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=40)
    rows = env.emu.rows("incident")
    settings = env.settings(INCIDENT, **{"overlap.seconds": 2})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.deletes"))
        _delete(env, rows[:5])
        env.emu.clock.advance(10)  # the first five fall out of the next run's re-read window
        _delete(env, rows[5:10])
        await poll_until(lambda: _deletes_done(daemon, 10))
    committed = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["sys_audit_delete"]
    assert committed["timestamp"] == _audit_of(env)[rows[9]["sys_id"]]
    first = len(await read_topic(env.bootstrap, env.topic("incident")))

    env.emu.clock.advance(10)
    _delete(env, rows[10:15])
    new = {r["sys_id"] for r in rows[10:15]}
    async with running(settings) as daemon:

        async def new_stones() -> bool:
            return new <= await _tombstone_keys(env)

        await poll_until(new_stones)
        assert status(daemon, "incident.deletes").window_start == (
            Position(committed["timestamp"], "").minus(2).ts
        )
    again = (await read_topic(env.bootstrap, env.topic("incident")))[first:]
    stones = Counter(r.key.decode() for r in _tombstones(again) if r.key)
    # Read from the stored cursor minus the overlap: the second five are inside the re-read
    # window but already in Kafka, the first five are older than it; only the new five come.
    assert set(stones) == new
    assert max(stones.values()) == 1


@pytest.mark.slow
async def test_sigterm_and_restart_re_emits_no_tombstone_of_the_overlap_window(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    rows = env.emu.rows("incident")
    # A wide overlap: every delete of the first run lies in the restart's re-read window.
    document = env.document(INCIDENT, **{"overlap.seconds": 300})
    config = write_config(env.tmp_path / "deletes-restart.yaml", document)
    log = env.tmp_path / "deletes-restart.log"
    _delete(env, rows[:6])
    env.emu.clock.advance(3)
    _delete(env, rows[6:12])
    doomed = {r["sys_id"] for r in rows[:12]}
    proc = await start_run(config, log)
    try:

        async def all_committed() -> bool:
            offset = await _committed_deletes(env)
            audit = _audit_of(env)
            return (
                offset is not None
                and offset["timestamp"] == max(audit.values())
                and await _tombstone_keys(env) == doomed
            )

        await poll_until(all_committed, timeout=60, interval=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0, log.read_text()[-3000:]
    before = await read_topic(env.bootstrap, env.topic("incident"))
    assert Counter(r.key.decode() for r in _tombstones(before) if r.key) == dict.fromkeys(doomed, 1)
    assert all(stone.headers["snow.audit_id"] for stone in _tombstones(before))

    settings = settings_from(env.tmp_path, document)
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.deletes"), timeout=60)
        # Quiet sweeps: nothing changes at the instance, so nothing may reach the topic.
        await sweeps_after(daemon, "incident.deletes", extra=2)
        await sweeps_after(daemon, "incident")
        deletes = status(daemon, "incident.deletes")
        assert deletes.window_start is not None
        assert deletes.window_start <= min(_audit_of(env).values())
        # The window was really read again (every sweep re-reads it), and every tombstone of
        # it was recognised as already in Kafka.
        assert deletes.rows_suppressed >= len(doomed)
        assert deletes.rows_emitted == 0
        assert status(daemon, "incident").rows_emitted == 0
    after = await read_topic(env.bootstrap, env.topic("incident"))
    assert after[len(before) :] == []


async def _committed_deletes(env: Env) -> dict[str, str] | None:
    return (await read_offsets(env.bootstrap, env.offsets_topic, env.name)).get("sys_audit_delete")


async def _tombstone_keys(env: Env) -> set[str]:
    records = await read_topic(env.bootstrap, env.topic("incident"))
    return {r.key.decode() for r in _tombstones(records) if r.key}


@pytest.mark.slow
async def test_kill_9_keeps_the_delete_streams_cursor(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=40)
    rows = env.emu.rows("incident")
    config = write_config(
        env.tmp_path / "kill9.yaml", env.document(INCIDENT, **{"overlap.seconds": 2})
    )
    log = env.tmp_path / "kill9.log"
    _delete(env, rows[:4])
    env.emu.clock.advance(10)
    _delete(env, rows[4:8])
    first = {r["sys_id"] for r in rows[:8]}
    proc = await start_run(config, log)
    try:

        async def committed_all() -> bool:
            offset = await _committed_deletes(env)
            return offset is not None and await _tombstone_keys(env) == first

        await poll_until(committed_all, timeout=60, interval=0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
    committed = await _committed_deletes(env)
    assert committed is not None
    before = len(await read_topic(env.bootstrap, env.topic("incident")))

    env.emu.clock.advance(10)
    _delete(env, rows[8:12])
    proc = await start_run(config, log)
    try:

        async def all_stones() -> bool:
            return await _tombstone_keys(env) == {r["sys_id"] for r in rows[:12]}

        await poll_until(all_stones, timeout=60, interval=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0, log.read_text()[-3000:]
    after = (await read_topic(env.bootstrap, env.topic("incident")))[before:]
    # The second process read deletes from the killed one's cursor minus the overlap: the
    # first four tombstones (older than that window) did not come again.
    floor = Position(committed["timestamp"], "").minus(2).ts
    again = {r.key.decode() for r in _tombstones(after) if r.key}
    for stone in _tombstones(after):
        assert stone.headers["snow.timestamp"].decode() >= floor
    assert {r["sys_id"] for r in rows[8:12]} <= again
    assert not {r["sys_id"] for r in rows[:4]} & again


async def test_403_on_the_audit_table_fails_only_the_delete_stream(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=20)
    env.emu.deny_table("admin", "sys_audit_delete")
    settings = env.settings(INCIDENT)
    async with running(settings) as daemon:
        await poll_until(lambda: status(daemon, "incident.deletes").state == TableState.FAILED)
        await poll_until(caught_up(daemon, "incident"))
        await sweeps_after(daemon, "incident")
        assert status(daemon, "incident").state == TableState.RUNNING
        assert daemon.state == ConnectorState.RUNNING
        error = status(daemon, "incident.deletes").last_error
        assert error is not None
        # The hint names the ACL (the test user's password, "admin", is masked in it).
        assert ACCESS_HINT.split(" (")[0] in error
        assert "read ACL on sys_audit_delete for the integration user" in error
        assert "403" in error
        assert "incident.deletes" in error
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(records) == 20


async def test_status_and_offsets_script_name_the_delete_stream(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    env.emu.seed(tables=("incident",), rows=5)
    env.emu.delete("incident", env.emu.rows("incident")[0]["sys_id"])
    document = env.document(INCIDENT, rest={"enabled": True, "port": 0})
    config = write_config(env.tmp_path / "named.yaml", document)
    settings = env.settings(INCIDENT, rest={"enabled": True, "port": 0})
    async with running(settings) as daemon:
        await poll_until(lambda: _deletes_done(daemon, 1))
        api = daemon.api
        assert api is not None
        url = f"{api.url}/connectors/{env.name}/status"  # type: ignore[attr-defined]
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 200
            body = orjson.loads(await resp.read())
    tables = body["tables"]
    assert set(tables) == {"incident", "incident.deletes"}
    assert tables["incident.deletes"]["table"] == "sys_audit_delete"
    assert tables["incident.deletes"]["state"] == "RUNNING"
    assert tables["incident.deletes"]["rows_emitted"] == 1

    capsys.readouterr()
    assert await amain(["list", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "incident.deletes" in x)
    assert "sys_audit_delete" in line
