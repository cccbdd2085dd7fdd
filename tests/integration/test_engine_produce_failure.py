"""A retriable produce failure restarts the table from its committed offset (SPEC §6)."""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from snowsource.adapters.sink import RecordSink
from snowsource.core.table_status import TableState
from snowsource.engine import wiring
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, keys_of, read_offsets, read_topic, running, status
from tests.polling import poll_until


async def test_retriable_produce_failure_restarts_the_table_and_loses_nothing(
    env: Env, kafka_admin: AIOKafkaAdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Records that cannot be delivered fail after 2 s instead of aiokafka's default 40 s.
    monkeypatch.setattr(
        wiring, "RecordSink", functools.partial(RecordSink, request_timeout_ms=2000)
    )
    topic = env.topic("incident")
    base = env.emu.clock.now() - timedelta(hours=1)

    def insert(i: int) -> dict[str, str]:
        return env.emu.insert(
            "incident", {"short_description": f"r{i}"}, at=base + timedelta(seconds=i)
        )

    first = [insert(i) for i in range(10)]
    settings = env.settings({"incident": {"name": "incident"}}, **{"overlap.seconds": 0})
    async with running(settings) as daemon:
        table = status(daemon, "incident")
        await poll_until(caught_up(daemon, "incident"))
        committed_before = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))[
            "incident"
        ]
        assert committed_before["sys_id"] == first[-1]["sys_id"]

        # The output topic disappears (auto-creation is off): every produce now fails with a
        # retriable error, and the table must restart from its committed offset, not FAIL.
        await kafka_admin.delete_topics([topic])
        second = [insert(i) for i in range(10, 20)]
        await poll_until(lambda: table.last_error is not None, timeout=60)
        assert table.state == TableState.RUNNING
        # Retried, and visible while it is: what failed, how often, since when.
        assert f"producing to topic {topic} failed" in (table.last_error or "")
        assert table.consecutive_failures >= 1
        assert table.failing_since is not None
        stored = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
        assert stored["sys_id"] == committed_before["sys_id"], "offset moved past a lost row"

        await kafka_admin.create_topics([NewTopic(topic, 1, 1)])
        await poll_until(lambda: _has_keys(env, topic, {r["sys_id"] for r in second}), timeout=60)
        await poll_until(caught_up(daemon, "incident"), timeout=30)
        assert table.consecutive_failures == 0
        assert table.failing_since is None
        assert table.last_error is None
    committed = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    assert committed["sys_id"] == second[-1]["sys_id"]


async def _has_keys(env: Env, topic: str, keys: set[str]) -> bool:
    try:
        return keys <= set(keys_of(await read_topic(env.bootstrap, topic)))
    except Exception:  # the topic may not be visible yet
        return False
