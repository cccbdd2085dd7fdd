"""aiokafka's failover messages: INFO, and one WARN per broker and episode (SPEC §15.4)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from aiokafka import errors

from snowsource.observability import broker_absence
from snowsource.observability.broker_absence import BrokerAbsence
from tests.unit.test_logs import _run


def _events(lines: list[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in lines]


def test_a_killed_broker_is_one_warn_naming_it_and_its_messages_are_info() -> None:
    lines = _run(
        """
        from aiokafka import errors
        client = logging.getLogger("aiokafka")
        group = logging.getLogger("aiokafka.consumer.group_coordinator")
        refused = "[Errno 111] Connect call failed ('127.0.0.1', 19601)"
        for _ in range(3):
            client.error("Unable connect to node with id %s: %s", 2, refused)
        client.error('Unable connect to "%s:%s": %s', "127.0.0.1", 19601, refused)
        group.error(
            "Error sending %s to node %s [%s] -- marking coordinator dead",
            "HeartbeatRequest", 2, errors.KafkaConnectionError("gone"),
        )
        client.error("Topic %s not found in cluster metadata", "orders")
        """,
        level="INFO",
    )
    events = _events(lines)
    warns = [e for e in events if e["level"] == "warning"]
    # The bootstrap's message about the same address is the same episode.
    assert [w["broker"] for w in warns] == ["node 2 (127.0.0.1:19601)"]
    assert all(w["logger"] == "snowsource.kafka" and w["since"] for w in warns)
    library = [e for e in events if str(e["logger"]).startswith("aiokafka")]
    # The repeat limiter keeps one of the three identical lines.
    assert [e["level"] for e in library] == ["info", "info", "info", "error"]
    assert library[-1]["event"] == "Topic orders not found in cluster metadata"


@pytest.fixture
def clock() -> Iterator[list[float]]:
    now = [1000.0]
    saved = BrokerAbsence.clock
    BrokerAbsence.clock = lambda: now[0]
    BrokerAbsence.forget()
    yield now
    BrokerAbsence.clock = saved
    BrokerAbsence.forget()


def _record(node: int) -> logging.LogRecord:
    return logging.LogRecord(
        "aiokafka", logging.ERROR, __file__, 1, "Unable connect to node with id %s: %s",
        (node, errors.KafkaConnectionError("refused")), None,
    )  # fmt: skip


def test_a_new_episode_starts_after_a_quiet_minute(
    clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    warned: list[str] = []
    monkeypatch.setattr(
        broker_absence, "_warn", lambda broker, _since, _detail: warned.append(broker)
    )
    absence = BrokerAbsence()
    for _ in range(5):  # every 10 s for 40 s: one episode
        record = _record(3)
        absence.filter(record)
        assert record.levelno == logging.INFO
        clock[0] += 10
    assert warned == ["node 3"]
    clock[0] += broker_absence.EPISODE_QUIET_SECONDS
    absence.filter(_record(3))
    absence.filter(_record(1))
    assert warned == ["node 3", "node 3", "node 1"]
