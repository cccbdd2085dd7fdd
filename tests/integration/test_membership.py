"""Group membership: a join that never holds up the start, and a consumer that never fetches."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.membership import GroupMembership, describe_members
from tests.conftest import TopicFactory
from tests.kafka_support import unique
from tests.polling import poll_until


@pytest.fixture
def requests_sent(monkeypatch: pytest.MonkeyPatch) -> dict[str, Counter[str]]:
    """Every request a Kafka client sends, by client id and request type (the real broker still
    answers each: this only counts)."""
    sent: dict[str, Counter[str]] = {}
    real_send = AIOKafkaClient.send

    async def counting_send(self: AIOKafkaClient, node_id: Any, request: Any, **kw: Any) -> Any:
        sent.setdefault(self._client_id, Counter())[type(request).__name__] += 1
        return await real_send(self, node_id, request, **kw)

    monkeypatch.setattr(AIOKafkaClient, "send", counting_send)
    return sent


async def test_membership_joins_and_heartbeats_without_a_single_fetch_request(
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    requests_sent: dict[str, Counter[str]],
) -> None:
    # Partitions that hold records: a member that were assigned any would fetch them.
    topic = await topic_factory("membership", partitions=3)
    conn = KafkaConnection(bootstrap_servers=kafka_bootstrap)
    connector = unique("member")
    member = GroupMembership(conn, connector=connector, task_id=0, topic=topic, on_fenced=print)
    await member.start()
    try:
        await poll_until(lambda: _joined(conn, connector, member), timeout=30, interval=0.2)
        # Heartbeats prove the counter sees this consumer's traffic after the join.
        await poll_until(
            lambda: _count(requests_sent, member.client_id, "HeartbeatRequest") >= 2,
            timeout=15,
            interval=0.1,
        )
        mine = requests_sent[member.client_id]
        assert any(name.startswith("JoinGroupRequest") for name in mine), mine
        assert any(name.startswith("SyncGroupRequest") for name in mine), mine
        assert not [name for name in mine if name.startswith("FetchRequest")], mine
        assert not [name for name in mine if name.startswith("ListOffsetsRequest")], mine
        assert member._consumer is not None
        assert member._consumer.assignment() == set()
    finally:
        await member.close()


def _count(sent: dict[str, Counter[str]], client_id: str, request: str) -> int:
    return sum(n for name, n in sent.get(client_id, Counter()).items() if name.startswith(request))


async def _joined(conn: KafkaConnection, connector: str, member: GroupMembership) -> bool:
    members = await describe_members(conn, connector)
    return any(m.started_ms == member.started_ms for m in members)


async def test_start_returns_before_a_dead_members_session_expires(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("membership")
    conn = KafkaConnection(bootstrap_servers=kafka_bootstrap)
    connector = unique("member")
    crashed = GroupMembership(conn, connector=connector, task_id=0, topic=topic, on_fenced=print)
    await crashed.start()
    await poll_until(lambda: _joined(conn, connector, crashed), timeout=30)
    # A crash: the member's heartbeats stop without a LeaveGroup, its session (10 s) runs on.
    assert crashed._consumer is not None
    coordinator = crashed._consumer._coordinator
    assert coordinator is not None
    coordinator._heartbeat_task.cancel()
    await crashed._consumer._client.close()

    fenced: list[str] = []
    restarted = GroupMembership(
        conn, connector=connector, task_id=0, topic=topic, on_fenced=fenced.append
    )
    loop = asyncio.get_running_loop()
    began = loop.time()
    await restarted.start()
    try:
        assert loop.time() - began < 3.0, "start() waited for the rebalance"
        # The join completes once the dead member's session expired; the older process is not
        # this one's duplicate to fence: it is gone.
        await poll_until(lambda: _only_member(conn, connector, restarted), timeout=40, interval=0.5)
        assert fenced == []
    finally:
        await restarted.close()
        # Only now, long after its session expired: its leave request finds nothing to leave.
        await crashed.close()


async def _only_member(conn: KafkaConnection, connector: str, member: GroupMembership) -> bool:
    members = await describe_members(conn, connector)
    return [m.member_id for m in members] == [member._member_id()] and bool(member._member_id())
