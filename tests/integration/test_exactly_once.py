"""Exactly-once (``exactly.once: true``): each page and its offset in one Kafka transaction.

In-process daemons against the real broker; the processes-are-the-point tests (fencing, kill -9
chaos) live in ``test_exactly_once_processes.py``.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from aiokafka import AIOKafkaConsumer, TopicPartition

from snowsource.adapters.kafka import KafkaConnection, admin_client, create_topic
from snowsource.adapters.txn_producer import TransactionalProducer
from snowsource.cli import check_txn
from snowsource.cli.check import Status, exit_code, run_checks
from snowsource.config.loader import load_config
from snowsource.core.table_status import TableState
from snowsource.core.txn_id import transactional_id
from snowsource.runtime.deadline import Deadline
from tests.integration.conftest import Env
from tests.integration.engine import (
    caught_up,
    committed_stream,
    read_offsets,
    read_topic,
    running,
    status,
    write_config,
)
from tests.polling import poll_until


async def _end_offsets(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or {0}
        tps = [TopicPartition(topic, p) for p in parts]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


async def test_a_backfill_is_delivered_in_transactions_with_its_offsets(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=230)
    settings = env.settings(
        {"incident": {"name": "incident"}}, **{"exactly.once": True, "batch.size": 50}
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=60)
        await poll_until(committed_stream(daemon, "incident"), timeout=30)
        table = status(daemon, "incident")
        assert table.rows_emitted == 230
        spec = daemon.specs[0]
    topic = env.topic("incident")
    committed = await read_topic(env.bootstrap, topic, isolation_level="read_committed")
    pairs = Counter((r.key, r.value) for r in committed)
    assert len(pairs) == 230
    assert set(pairs.values()) == {1}
    assert {r.key.decode() for r in committed if r.key} == {
        r["sys_id"] for r in env.emu.rows("incident")
    }
    # Five pages, each closed by a commit marker: the log holds more offsets than records.
    assert await _end_offsets(env.bootstrap, topic) >= 230 + 5
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    assert offsets["incident"]["phase"] == "stream"
    last = max(env.emu.rows("incident"), key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    assert (offsets["incident"]["timestamp"], offsets["incident"]["sys_id"]) == (
        last["sys_updated_on"],
        last["sys_id"],
    )
    assert transactional_id(env.name, spec.partition).startswith(f"snowsource-{env.name}-")


async def test_check_says_exactly_once_is_on_and_that_transactions_work(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=3)
    path = write_config(
        env.tmp_path / "check.yaml",
        env.document({"incident": {"name": "incident"}}, **{"exactly.once": True}),
    )
    results = {r.name: r for r in await run_checks(load_config(path, env={}))}
    line = results[check_txn.NAME]
    assert line.status is Status.PASS, line
    assert "exactly.once is on" in line.detail
    assert "read_committed" in line.detail
    assert list(results).index(check_txn.NAME) == 3  # right after the offsets topic's line
    assert exit_code(results.values()) == 0


async def test_check_has_no_transactions_line_in_at_least_once_mode(env: Env) -> None:
    path = write_config(
        env.tmp_path / "check.yaml", env.document({"incident": {"name": "incident"}})
    )
    results = {r.name: r for r in await run_checks(load_config(path, env={}))}
    assert check_txn.NAME not in results


async def test_a_refused_record_aborts_its_page_so_none_of_the_page_is_visible(env: Env) -> None:
    base = env.emu.clock.now() - timedelta(hours=1)
    rows = [
        env.emu.insert("incident", {"short_description": f"row {i}"}, at=base) for i in range(30)
    ]
    big = env.emu.insert(
        "incident", {"short_description": "x" * 1_200_000}, at=base + timedelta(seconds=1)
    )
    settings = env.settings(
        {"incident": {"name": "incident"}}, **{"exactly.once": True, "batch.size": 20}
    )
    async with running(settings) as daemon:
        await poll_until(lambda: status(daemon, "incident").state == TableState.FAILED)
        assert big["sys_id"] in (status(daemon, "incident").last_error or "")
    committed = await read_topic(
        env.bootstrap, env.topic("incident"), isolation_level="read_committed"
    )
    # One second, ordered by sys_id: the first page committed; the second held ten rows
    # before the refused one, and was aborted.
    first_page = sorted(rows, key=lambda r: r["sys_id"])[:20]
    assert {r.key.decode() for r in committed if r.key} == {r["sys_id"] for r in first_page}
    everything = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(everything) > len(committed)  # the aborted records are in the log, hidden
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    assert offsets["incident"]["sys_id"] == first_page[-1]["sys_id"]


async def test_stop_and_resume_emit_nothing_twice(env: Env) -> None:
    base = env.emu.clock.now() - timedelta(minutes=30)
    for i in range(120):
        env.emu.insert(
            "incident", {"short_description": f"row {i}"}, at=base + timedelta(seconds=i)
        )
    settings = env.settings(
        {"incident": {"name": "incident"}},
        **{"exactly.once": True, "batch.size": 30, "overlap.seconds": 3600},
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=60)
        assert await daemon.stop_pollers(Deadline.after(10)) == []
        await daemon.start_pollers(reload=True)
        await poll_until(caught_up(daemon, "incident"), timeout=60)
        table = status(daemon, "incident")
        # The whole table lies in the re-read window: all of it read again, none of it sent.
        assert table.rows_emitted == 0
        assert table.rows_suppressed >= 120
    committed = await read_topic(
        env.bootstrap, env.topic("incident"), isolation_level="read_committed"
    )
    assert len(committed) == 120


async def test_a_delete_stream_has_its_own_transactional_id_and_its_tombstones_commit(
    env: Env,
) -> None:
    env.emu.seed(tables=("incident",), rows=20)
    doomed = [r["sys_id"] for r in env.emu.rows("incident")[:5]]
    settings = env.settings(
        {"incident": {"name": "incident", "deletes": "audit"}}, **{"exactly.once": True}
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.deletes"), timeout=60)
        for sys_id in doomed:
            env.emu.delete("incident", sys_id)
        await poll_until(lambda: status(daemon, "incident.deletes").rows_emitted >= 5, timeout=60)
        table, deletes = (s.partition for s in daemon.specs)
    assert transactional_id(env.name, table) != transactional_id(env.name, deletes)
    committed = await read_topic(
        env.bootstrap, env.topic("incident"), isolation_level="read_committed"
    )
    tombstones = [r.key.decode() for r in committed if r.key and r.value is None]
    assert sorted(tombstones) == sorted(doomed)
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    assert "sys_audit_delete" in offsets


async def test_a_producer_fenced_while_idle_is_replaced_at_the_next_start(env: Env) -> None:
    """A table that ran elsewhere meanwhile (group mode moves tables) comes back: its old
    producer was fenced while idle and must not be taken for a live one."""
    conn = KafkaConnection(env.bootstrap)
    offsets = await _offsets_topic(env)
    txn_id = f"snowsource-{env.name}-idle"
    first = TransactionalProducer(conn, transactional_id=txn_id, offsets_topic=offsets)
    other = TransactionalProducer(conn, transactional_id=txn_id, offsets_topic=offsets)
    try:
        await first.open()
        await first.begin()
        await (await first.send_offset(b"k", b"1"))
        await first.commit()
        await other.open()  # fences ``first``, which sent nothing since and cannot know it
        assert first.ready
        await first.open(fresh=True)  # what a generation does: fences ``other`` in turn
        await first.begin()
        await (await first.send_offset(b"k", b"2"))
        await first.commit()
    finally:
        await first.close(Deadline.after(10))
        await other.close(Deadline.after(10))
    values = [
        r.value for r in await read_topic(env.bootstrap, offsets, isolation_level="read_committed")
    ]
    assert values == [b"1", b"2"]


async def _offsets_topic(env: Env) -> str:
    async with admin_client(KafkaConnection(env.bootstrap)) as admin:
        await create_topic(admin, env.offsets_topic, partitions=1, replication_factor=1)
    return env.offsets_topic
