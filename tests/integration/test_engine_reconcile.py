"""``deletes: reconcile`` end to end: key sweeps of the emulator, tombstones on the real broker.

The table has ``no_audit_delete=true``, so the instance records none of its deletions and only
the key sweep can tell Kafka about them. Sweeps page 10 keys at a time here (the daemon's
``reconcile_page_size``), so a sweep of a few dozen rows has several pages and can be stopped
in the middle.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest

from snowsource.cli.offsets import amain as offsets_main
from snowsource.config.models import Settings
from snowsource.core.offsets_codec import SourcePartition, encode_key
from snowsource.core.reconcile import RECHECK_PAGES, reconcile_partition
from snowsource.emulator.journal import Request
from snowsource.engine.reconcile import ReconcilePoller
from snowsource.engine.supervisor import Daemon
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import (
    Record,
    caught_up,
    read_topic,
    status,
    sweeps_after,
    write_config,
)
from tests.integration.engine import running as engine_running
from tests.polling import poll_until

PAGE = 10
RECONCILE = {"name": "incident", "deletes": "reconcile", "reconcile.interval.seconds": 1}


@contextlib.asynccontextmanager
async def running(settings: Settings, *, page_size: int = PAGE) -> AsyncIterator[Daemon]:
    """A daemon whose key sweeps page ``page_size`` sys_ids, until the block ends."""
    daemon = Daemon(settings, reconcile_page_size=page_size)
    shutdown = asyncio.Event()
    task = asyncio.create_task(daemon.run(shutdown), name="daemon")
    ready = asyncio.create_task(daemon.ready.wait())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        ready.cancel()
        await task
    try:
        yield daemon
    finally:
        shutdown.set()
        assert await task == 0


def _tombstones(records: list[Record]) -> Counter[str]:
    return Counter(r.key.decode() for r in records if r.value is None and r.key is not None)


async def _stored(env: Env, partition: SourcePartition) -> dict[str, str]:
    """The last offset written under ``partition``."""
    key = encode_key(env.name, partition)
    values = [r.value for r in await read_topic(env.bootstrap, env.offsets_topic) if r.key == key]
    assert values, f"no offset stored for {partition}"
    assert values[-1] is not None
    found: dict[str, str] = orjson.loads(values[-1])
    return found


def _sweeper(daemon: Daemon) -> ReconcilePoller:
    poller = daemon.pollers["incident.reconcile"]
    assert isinstance(poller, ReconcilePoller)
    return poller


def _is_key_page(entry: Request) -> bool:
    return (
        entry.table == "incident"
        and entry.params.get("sysparm_fields") == "sys_id"
        and "sys_idIN" not in entry.params.get("sysparm_query", "")
    )


def _is_recheck(entry: Request) -> bool:
    return entry.table == "incident" and "sys_idIN" in entry.params.get("sysparm_query", "")


@pytest.fixture
def unaudited(env: Env) -> Env:
    env.emu.set_no_audit_delete("incident")
    return env


async def test_deleted_rows_of_an_unaudited_table_get_one_tombstone_each(unaudited: Env) -> None:
    env = unaudited
    env.emu.seed(tables=("incident",), rows=45)
    doomed = [row["sys_id"] for row in env.emu.rows("incident")[::6]]
    async with running(env.settings({"incident": RECONCILE})) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        await sweeps_after(daemon, "incident.reconcile")
        assert _sweeper(daemon).sweep.last_sweep.tombstones == 0
        for sys_id in doomed:
            env.emu.delete("incident", sys_id)
        added = [env.emu.insert("incident", {"short_description": "new"})["sys_id"]]
        # The sweep running now may pass some of the keys, the next sends the rest: the one
        # after sees a topic that matches the instance.
        await sweeps_after(daemon, "incident.reconcile", extra=3)
        summary = _sweeper(daemon).sweep.last_sweep
        reconcile = status(daemon, "incident.reconcile")
    assert not [r for r in env.emu.rows("sys_audit_delete") if r["tablename"] == "incident"]
    records = await read_topic(env.bootstrap, env.topic("incident"))
    stones = [r for r in records if r.value is None]
    assert _tombstones(records) == Counter(doomed)
    for stone in stones:
        assert stone.headers["snow.operation"] == b"delete"
        assert stone.headers["snow.delete.source"] == b"reconcile"
        assert stone.headers["snow.table"] == b"incident"
        upserts = [r.offset for r in records if r.key == stone.key and r.value is not None]
        assert max(upserts) < stone.offset
    assert added[0].encode() in {r.key for r in records if r.value is not None}
    assert summary.live_in_kafka == summary.instance_keys == 45 + 1 - len(doomed)
    assert (summary.tombstones, summary.missing_in_kafka) == (0, 0)
    assert reconcile.rows_emitted == len(doomed)
    progress = await _stored(env, reconcile_partition(daemon.specs[0], snow_url=env.url))
    assert progress["phase"] == "stream"


async def test_a_key_back_by_the_recheck_is_never_deleted(unaudited: Env) -> None:
    """Deleted after the topic was read and before its key page, inserted again (same sys_id)
    between the key page and the re-check: the re-check finds it, no tombstone is sent."""
    env = unaudited
    env.emu.seed(tables=("incident",), rows=25)
    # Neighbours in sys_id order: the same key page misses both.
    back, gone = sorted(row["sys_id"] for row in env.emu.rows("incident"))[3:5]
    armed = asyncio.Event()
    rechecked: list[str] = []

    def hook(entry: Request) -> None:
        if not armed.is_set():
            return
        if _is_key_page(entry) and not rechecked and env.emu.get("incident", gone) is not None:
            env.emu.delete("incident", back)
            env.emu.delete("incident", gone)
        elif _is_recheck(entry) and back in entry.params["sysparm_query"]:
            rechecked.append(entry.params["sysparm_query"])
            if env.emu.get("incident", back) is None:
                env.emu.insert("incident", {"sys_id": back, "short_description": "re-created"})

    env.emu.on_request(hook)
    async with running(env.settings({"incident": RECONCILE})) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        await sweeps_after(daemon, "incident.reconcile")
        armed.set()
        await poll_until(lambda: status(daemon, "incident.reconcile").rows_emitted >= 1)
        await sweeps_after(daemon, "incident.reconcile")
        await sweeps_after(daemon, "incident")
    assert rechecked, "the sweep never re-checked the re-created key"
    # One batched request named both keys the page missed.
    assert gone in rechecked[0]
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert _tombstones(records) == Counter([gone])
    latest = [r for r in records if r.key == back.encode()][-1]
    assert latest.value is not None
    assert latest.json["short_description"] == "re-created"


async def test_a_restart_mid_sweep_resumes_after_the_last_reconciled_key(unaudited: Env) -> None:
    env = unaudited
    # 25 key pages: the lost keys of ten pages share a re-check, then the progress moves.
    env.emu.seed(tables=("incident",), rows=250)
    keys = sorted(row["sys_id"] for row in env.emu.rows("incident"))
    doomed = keys[5::7]
    key_pages: list[Request] = []
    env.emu.on_request(lambda entry: key_pages.append(entry) if _is_key_page(entry) else None)
    # The rows are deleted while no daemon runs: a sweep already past their keys would only
    # find them an interval later (a sweep may start right after the last one ends).
    daily = {**RECONCILE, "reconcile.interval.seconds": 3600}
    async with running(env.settings({"incident": daily})) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        await sweeps_after(daemon, "incident.reconcile")
    for sys_id in doomed:
        env.emu.delete("incident", sys_id)
    env.emu.latency_ms = 150  # key pages slow enough to stop between two of them
    async with running(env.settings({"incident": RECONCILE})) as daemon:
        tenth_page_last = keys[RECHECK_PAGES * PAGE - 1]

        def settled_ten_pages() -> bool:
            stored = status(daemon, "incident.reconcile").committed
            return (
                stored is not None
                and stored.phase == "backfill"
                and stored.sys_id >= tenth_page_last
            )

        await poll_until(settled_ten_pages)
        sweep = status(daemon, "incident.reconcile")
    stored = sweep.committed
    assert stored is not None
    assert stored.phase == "backfill"
    sent_before = _tombstones(await read_topic(env.bootstrap, env.topic("incident")))
    assert sent_before, "the interrupted process stopped before any tombstone"
    assert set(sent_before) < set(doomed), "the interrupted process finished the sweep"
    env.emu.latency_ms = 0
    key_pages.clear()
    # An unfinished sweep resumes at once whatever the interval; the next would wait an hour.
    async with running(env.settings({"incident": daily})) as daemon:
        await sweeps_after(daemon, "incident.reconcile")
    first = key_pages[0].params["sysparm_query"]
    assert f"sys_id>{stored.sys_id}" in first, first
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert _tombstones(records) == Counter(doomed)
    progress = await _stored(env, reconcile_partition(daemon.specs[0], snow_url=env.url))
    assert (progress["phase"], progress["sys_id"]) == ("stream", "")


async def test_audit_and_reconcile_send_one_tombstone_for_one_delete(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    doomed = [row["sys_id"] for row in env.emu.rows("incident")[2:9]]
    both = {**RECONCILE, "deletes": ["audit", "reconcile"]}
    async with running(env.settings({"incident": both})) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.deletes"))
        await sweeps_after(daemon, "incident.reconcile")
        # The key sweep running now reads the topic before the delete stream's tombstones.
        for sys_id in doomed:
            env.emu.delete("incident", sys_id)
        await sweeps_after(daemon, "incident.reconcile", extra=2)
        await poll_until(lambda: status(daemon, "incident.deletes").rows_emitted >= len(doomed))
        await sweeps_after(daemon, "incident.deletes")
        summary = _sweeper(daemon).sweep.last_sweep
    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert _tombstones(records) == Counter(doomed)
    assert summary.tombstones == 0


async def test_status_offsets_script_and_metrics_name_the_sweep_and_the_journal(
    unaudited: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    env = unaudited
    env.emu.seed(tables=("incident",), rows=5)
    first = env.emu.rows("incident")[0]["sys_id"]
    env.emu.add_journal_entry("incident", first, "a comment")
    tables = {"incident": {**RECONCILE, "journal": True}}
    rest = {"rest": {"enabled": True, "port": 0}}
    config = write_config(env.tmp_path / "named.yaml", env.document(tables, **rest))
    async with engine_running(env.settings(tables, **rest)) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.journal"))
        env.emu.delete("incident", first)
        await poll_until(lambda: status(daemon, "incident.reconcile").rows_emitted == 1)
        api = daemon.api
        assert api is not None
        url = f"{api.url}/connectors/{env.name}/status"  # type: ignore[attr-defined]
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 200
            body = orjson.loads(await resp.read())
    found = body["tables"]
    assert set(found) == {"incident", "incident.reconcile", "incident.journal"}
    assert found["incident.reconcile"]["table"] == "incident"
    assert found["incident.reconcile"]["rows_emitted"] == 1
    assert found["incident.journal"]["table"] == "sys_journal_field"
    assert found["incident.journal"]["rows_emitted"] == 1
    emitted = metrics.REGISTRY.get_sample_value(
        "snowsource_rows_emitted_total", {"table": "incident.reconcile"}
    )
    assert emitted is not None
    assert emitted >= 1
    capsys.readouterr()
    assert await offsets_main(["list", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "incident.reconcile" in out, out
    assert "incident.journal" in out, out
