"""An output topic deleted while running: one WARN, the offset stays, FAILED after the grace
period naming the topic; the other tables carry on."""

from __future__ import annotations

import time
from collections.abc import MutableMapping, Sequence
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from structlog.testing import capture_logs

from snowsource.core.table_status import TableState
from snowsource.engine import topic_watch
from snowsource.engine.facade import ConnectorState
from snowsource.runtime.deadline import Deadline
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_offsets, read_topic, running
from tests.polling import poll_until

GRACE = 4.0
GONE = "output topic does not exist any more"


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_watch, "MISSING_TOPIC_FAIL_AFTER_SECONDS", GRACE)
    monkeypatch.setattr(topic_watch, "CHECK_INTERVAL_SECONDS", 0.3)


async def _delete(admin: AIOKafkaAdminClient, topic: str) -> None:
    await admin.delete_topics([topic])

    async def gone() -> bool:
        return topic not in await admin.list_topics()

    await poll_until(gone, timeout=30, interval=0.1)


def _warnings(
    logs: Sequence[MutableMapping[str, Any]], table: str
) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e.get("table") == table and e["log_level"] == "warning"]


@pytest.mark.slow
async def test_deleted_output_topic_warns_once_keeps_the_offset_and_fails_after_the_grace(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=20)
    settings = env.settings(
        {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}},
        **{"topic.creation.enable": True},
    )
    with capture_logs() as logs:
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident", "change_request"))
            await poll_until(lambda: _stream_committed(env, "incident"))
            committed = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
            await _delete(kafka_admin, env.topic("incident"))
            deleted_at = time.monotonic()
            now = env.emu.clock.now()
            env.emu.insert("incident", {"short_description": "after the deletion"}, at=now)
            other = env.emu.insert("change_request", {"short_description": "still"}, at=now)

            status = daemon.pollers["incident"].status
            await poll_until(lambda: status.state == TableState.FAILED, timeout=GRACE + 30)
            failed_after = time.monotonic() - deleted_at

            assert failed_after >= GRACE
            assert status.last_error is not None
            assert f"output topic {env.topic('incident')!r}" in status.last_error
            assert "Re-create the topic" in status.last_error
            # The other table is unaffected: its new row reaches its topic.
            await poll_until(lambda: _has_key(env, "change_request", other["sys_id"]))
            assert daemon.pollers["change_request"].status.state != TableState.FAILED
            # Not re-created behind the operator's back, although topic creation is enabled.
            assert env.topic("incident") not in await kafka_admin.list_topics()
            # The operator re-creates it; the producer's pending retry can now be delivered,
            # but the FAILED table's offset must not follow it.
            await kafka_admin.create_topics([NewTopic(env.topic("incident"), 1, 1)])

    after = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    assert after == committed, "the offset moved past rows Kafka never acknowledged"
    gone = [e for e in _warnings(logs, "incident") if e["event"].startswith(GONE)]
    assert len(gone) == 1, gone
    assert gone[0]["topic"] == env.topic("incident")
    # Not one line per metadata refresh or retry: a handful of WARN lines at most.
    assert len(_warnings(logs, "incident")) <= 3, _warnings(logs, "incident")
    assert not _warnings(logs, "change_request")


@pytest.mark.slow
async def test_a_topic_back_within_the_grace_lets_the_table_carry_on(
    env: Env, kafka_admin: AIOKafkaAdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topic_watch, "MISSING_TOPIC_FAIL_AFTER_SECONDS", 60.0)
    env.emu.seed(tables=("incident",), rows=10)
    settings = env.settings({"incident": {"name": "incident"}})
    with capture_logs() as logs:
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident"))
            await _delete(kafka_admin, env.topic("incident"))
            await poll_until(
                lambda: any(e["event"].startswith(GONE) for e in _warnings(logs, "incident"))
            )
            await kafka_admin.create_topics([NewTopic(env.topic("incident"), 1, 1)])
            row = env.emu.insert("incident", {"short_description": "back"}, at=env.emu.clock.now())
            await poll_until(lambda: _has_key(env, "incident", row["sys_id"]), timeout=60)
            # The row may be delivered before the watch's next look notices the topic is back.
            await poll_until(
                lambda: any(e["event"].startswith("output topic exists again") for e in logs)
            )
            assert daemon.pollers["incident"].status.state != TableState.FAILED


async def _has_key(env: Env, alias: str, key: str) -> bool:
    return key.encode() in {r.key for r in await read_topic(env.bootstrap, env.topic(alias))}


async def _stream_committed(env: Env, alias: str) -> bool:
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    return alias in offsets and offsets[alias]["phase"] == "stream"


@pytest.mark.slow
async def test_restart_after_the_failure_creates_the_topic_when_creation_is_enabled(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    env.emu.seed(tables=("incident",), rows=10)
    settings = env.settings({"incident": {"name": "incident"}}, **{"topic.creation.enable": True})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        await _delete(kafka_admin, env.topic("incident"))
        status = daemon.pollers["incident"].status
        await poll_until(lambda: status.state == TableState.FAILED, timeout=GRACE + 30)

        # What POST /connectors/<name>/restart does: stop, then start from the stored offsets.
        await daemon.stop_pollers(Deadline.after(10), target=ConnectorState.RUNNING)
        await daemon.start_pollers(reload=True)

        assert env.topic("incident") in await kafka_admin.list_topics()
        row = env.emu.insert("incident", {"short_description": "new"}, at=env.emu.clock.now())
        await poll_until(lambda: _has_key(env, "incident", row["sys_id"]), timeout=60)
        assert daemon.pollers["incident"].status.state != TableState.FAILED
