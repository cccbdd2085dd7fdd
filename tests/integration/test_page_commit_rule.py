"""The batch produce path keeps the commit rule through kill -9 (SPEC §6).

A page goes to Kafka as one batch per partition and its offset is written once, after the page's
acknowledged prefix is known. Killing the daemon while a page's batches are unacknowledged must
leave no committed offset past a row that did not reach Kafka; a restart then delivers every row.

On a local broker a page is acknowledged within milliseconds, so a kill would almost never find
one in flight and a daemon that committed at hand-over would pass. The process runs through
``tests/integration/slow_handover.py``, whose sink receives every page seconds after the
poller handed it over; the emulator holds the request for the page after it, so the poller
waits there with one page verifiably unacknowledged. The test kills it once the previous page's
offset is committed, then checks the committed offset (read_committed) against the topic.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from snowsource.core.cursor import Position
from snowsource.core.offsets_codec import parse_key
from snowsource.emulator.journal import Request
from tests.integration.conftest import Env
from tests.integration.engine import read_topic, write_config
from tests.integration.processes import start_run
from tests.polling import poll_until

BATCH = 500
#: Pages handed over before the kill: the last of them is the one in flight.
PAGES_BEFORE_KILL = 3
#: Far longer than reading the offsets topic back and killing the process take (about a second),
#: so the page in flight is still missing from the topic after the kill, and a commit made at
#: hand-over would already be in the offsets topic.
HANDOVER_DELAY_MS = 8000
#: The emulator holds the request after the page in flight this long: the poller stays put.
HOLD_SECONDS = 30.0


@pytest.mark.slow
async def test_kill_9_with_a_page_unacknowledged_commits_nothing_past_an_unacked_row(
    env: Env,
) -> None:
    env.emu.seed(tables=("incident",), rows=BATCH * 6)
    rows = sorted(env.emu.rows("incident"), key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    config = write_config(
        env.tmp_path / "kill9-page.yaml",
        env.document(
            {"incident": {"name": "incident"}},
            # One pager: the page choreography below is the single page stream's (slices have
            # their own kill -9 tests in test_slices_restarts.py).
            **{"batch.size": BATCH, "topic.creation.partitions": 3, "backfill.slices": 1},
        ),
    )
    log = env.tmp_path / "kill9-page.log"
    parked = asyncio.Event()
    pages: list[Request] = []

    def hold_the_page_after_the_one_in_flight(entry: Request) -> None:
        # The poller asks for page N+1 only once page N is handed over (the prefetch runs
        # while page N is acknowledged): holding that request parks the poller with page N
        # unacknowledged and nothing after it.
        if entry.table != "incident" or "sysparm_limit" not in entry.params or parked.is_set():
            return
        pages.append(entry)
        if len(pages) == PAGES_BEFORE_KILL:
            env.emu.faults.add(kind="slow", delay=HOLD_SECONDS, table="incident")
        elif len(pages) == PAGES_BEFORE_KILL + 1:
            parked.set()

    env.emu.on_request(hold_the_page_after_the_one_in_flight)
    process = await start_run(config, log, slow_handover_ms=HANDOVER_DELAY_MS)
    before_flight = rows[(PAGES_BEFORE_KILL - 1) * BATCH - 1]
    try:
        await asyncio.wait_for(parked.wait(), 120)
        # The page before the one in flight was acknowledged before it was handed over, so its
        # offset is written now: killing after it lands tests the commit, not the start-up.
        await poll_until(
            lambda: _committed_reaches(env, before_flight), timeout=HANDOVER_DELAY_MS / 2000
        )
    finally:
        process.kill()
    assert await process.wait() == -signal.SIGKILL, log.read_text()[-3000:]

    # What a restart would find: the offset it resumes from, and what Kafka holds.
    committed = await _committed_position(env)
    in_kafka = await _keys_in_topic(env)
    handed_over = rows[: PAGES_BEFORE_KILL * BATCH]
    # The experiment is only worth something if a page was really in flight at the kill.
    in_flight = [r["sys_id"] for r in handed_over if r["sys_id"] not in in_kafka]
    assert in_flight, "every handed-over row was already in Kafka at the kill: nothing in flight"
    assert committed is not None
    covered = [r for r in rows if Position(r["sys_updated_on"], r["sys_id"]) <= committed]
    assert covered == rows[: len(covered)]
    missing = [r["sys_id"] for r in covered if r["sys_id"] not in in_kafka]
    assert missing == [], (
        f"the committed offset covers {len(missing)} row(s) Kafka never acknowledged"
    )
    # One offset per page: a commit lands on a page boundary.
    assert len(covered) % BATCH == 0

    # The page in flight is lost with the process; the restart delivers it from the offset.
    env.emu.faults.clear()
    process = await start_run(config, log)
    try:
        await poll_until(lambda: _committed_stream(env), timeout=120, interval=0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0, log.read_text()[-3000:]
    assert await _keys_in_topic(env) == {r["sys_id"] for r in rows}


async def _keys_in_topic(env: Env) -> set[str]:
    records = await read_topic(env.bootstrap, env.topic("incident"))
    return {r.key.decode() for r in records if r.key}


async def _committed_offset(env: Env) -> dict[str, Any] | None:
    """The table's live offset as a restarted daemon would read it: read_committed."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=env.bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        tp = TopicPartition(env.offsets_topic, 0)
        partitions = consumer.partitions_for_topic(env.offsets_topic)
        if partitions is None:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(env.offsets_topic)
        if not partitions:
            return None
        tps = [TopicPartition(env.offsets_topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        live: dict[bytes, bytes | None] = {}
        for tp in tps:
            while await consumer.position(tp) < end[tp]:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for record in batch.get(tp, []):
                    if record.key is not None:
                        live[record.key] = record.value
    finally:
        await consumer.stop()
    for key, value in live.items():
        parsed = parse_key(key)
        if parsed is None or value is None or parsed[0] != env.name:
            continue
        if parsed[1]["table"] == "incident":
            offset: dict[str, Any] = orjson.loads(value)
            return offset
    return None


async def _committed_position(env: Env) -> Position | None:
    offset = await _committed_offset(env)
    return None if offset is None else Position(offset["timestamp"], offset["sys_id"])


async def _committed_reaches(env: Env, row: dict[str, Any]) -> bool:
    committed = await _committed_position(env)
    return committed is not None and committed >= Position(row["sys_updated_on"], row["sys_id"])


async def _committed_stream(env: Env) -> bool:
    offset = await _committed_offset(env)
    return offset is not None and offset["phase"] == "stream"
