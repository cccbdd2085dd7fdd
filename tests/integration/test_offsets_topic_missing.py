"""A missing offsets topic is created on a first run only: never a silent full replay."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from structlog.testing import capture_logs

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.offset_store import OffsetsTopicMissingError, OffsetStore
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_offsets, read_topic, running, write_config
from tests.integration.processes import SNOWSOURCE
from tests.polling import poll_until


def _run(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SNOWSOURCE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if not k.startswith("SNOWSOURCE_")},
        check=False,
    )


async def _delete_topic(admin: AIOKafkaAdminClient, topic: str) -> None:
    await admin.delete_topics([topic])

    async def gone() -> bool:
        return topic not in await admin.list_topics()

    # Deletion completes asynchronously; a start before it would still find the topic.
    await poll_until(gone, timeout=30, interval=0.2)


async def _first_run(env: Env, rows: int = 30) -> Path:
    env.emu.seed(tables=("incident",), rows=rows)
    settings = env.settings({"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    assert len(await read_topic(env.bootstrap, env.topic("incident"))) == rows
    return write_config(
        env.tmp_path / "config.yaml", env.document({"incident": {"name": "incident"}})
    )


async def test_offsets_topic_deleted_while_stopped_refuses_to_start_naming_both_ways_forward(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    config = await _first_run(env)
    await _delete_topic(kafka_admin, env.offsets_topic)
    env.emu.journal.clear()

    result = await asyncio.to_thread(_run, "run", "--config", str(config))

    assert result.returncode == 1, result.stdout[-3000:]
    assert f"offsets topic '{env.offsets_topic}' does not exist" in result.stdout
    assert env.topic("incident") in result.stdout
    assert "snowsource offsets import FILE" in result.stdout
    assert "snowsource run --allow-full-replay" in result.stdout
    # Refused before reading anything, and without creating the topic behind the user's back.
    assert env.emu.journal.for_table("incident") == []
    assert env.offsets_topic not in await kafka_admin.list_topics()
    assert len(await read_topic(env.bootstrap, env.topic("incident"))) == 30


async def test_allow_full_replay_creates_the_topic_and_replays_once(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    config = await _first_run(env)
    await _delete_topic(kafka_admin, env.offsets_topic)
    log = env.tmp_path / "replay.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            SNOWSOURCE,
            "run",
            "--config",
            str(config),
            "--allow-full-replay",
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        await poll_until(lambda: _phase_committed(env, "stream"), timeout=60, interval=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0, log.read_text()[-3000:]
    assert "--allow-full-replay: creating it" in log.read_text()
    # Every row came again: the replay the flag asked for.
    keys = Counter(r.key for r in await read_topic(env.bootstrap, env.topic("incident")))
    assert len(keys) == 30
    assert set(keys.values()) == {2}

    # Left in place, the flag changes nothing once the topic exists, and says to remove it.
    store = OffsetStore(
        KafkaConnection(bootstrap_servers=env.bootstrap),
        topic=env.offsets_topic,
        connector=env.name,
        output_topics=[env.topic("incident")],
        allow_full_replay=True,
    )
    with capture_logs() as logs:
        async with store:
            assert store.entries(), "the offsets written by the replay are still there"
    assert any(e["event"].startswith("--allow-full-replay has no effect") for e in logs)

    # Needed once: the topic exists now, so a plain start resumes from its offsets.
    await _resumes_without_replay(env)


async def test_import_from_an_export_is_the_other_way_forward(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    config = await _first_run(env)
    exported = env.tmp_path / "offsets.json"
    done = await asyncio.to_thread(
        _run, "offsets", "export", str(exported), "--config", str(config)
    )
    assert done.returncode == 0, done.stderr
    before = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    await _delete_topic(kafka_admin, env.offsets_topic)

    done = await asyncio.to_thread(
        _run, "offsets", "import", str(exported), "--config", str(config)
    )
    assert done.returncode == 0, done.stderr
    assert await read_offsets(env.bootstrap, env.offsets_topic, env.name) == before

    await _resumes_without_replay(env)


async def test_first_run_creates_the_offsets_topic_when_output_topics_are_empty(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    # The output topic exists (made by an operator beforehand) but holds nothing yet.
    await kafka_admin.create_topics([_new_topic(env.topic("incident"))])
    store = OffsetStore(
        KafkaConnection(bootstrap_servers=env.bootstrap),
        topic=env.offsets_topic,
        connector=env.name,
        partitions=1,
        output_topics=[env.topic("incident"), env.topic("missing")],
    )
    async with store:
        assert store.loaded.is_set()
    assert env.offsets_topic in await kafka_admin.list_topics()


async def test_the_rule_counts_every_topic_it_is_given(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    await _first_run(env)
    await _delete_topic(kafka_admin, env.offsets_topic)
    conn = KafkaConnection(bootstrap_servers=env.bootstrap)
    # A table this process does not run still counts when the caller passes it (group mode).
    store = OffsetStore(
        conn,
        topic=env.offsets_topic,
        connector=env.name,
        output_topics=[env.topic("other"), env.topic("incident")],
    )
    with pytest.raises(OffsetsTopicMissingError, match=env.topic("incident")):
        async with store:
            pass
    async with OffsetStore(
        conn, topic=env.offsets_topic, connector=env.name, output_topics=[env.topic("other")]
    ):
        pass
    assert env.offsets_topic in await kafka_admin.list_topics()


def _new_topic(name: str) -> NewTopic:
    return NewTopic(name, 1, 1)


async def _resumes_without_replay(env: Env) -> None:
    """A start resumes from the stored cursor: only rows of its own second may come again."""
    committed = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    before = len(await read_topic(env.bootstrap, env.topic("incident")))
    settings = env.settings({"incident": {"name": "incident"}}, **{"overlap.seconds": 0})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    again = (await read_topic(env.bootstrap, env.topic("incident")))[before:]
    assert len(again) < 30
    for record in again:
        assert record.headers["snow.timestamp"].decode() >= committed["timestamp"]


async def _phase_committed(env: Env, phase: str) -> bool:
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    return "incident" in offsets and offsets["incident"]["phase"] == phase
