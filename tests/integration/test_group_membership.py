"""Group mode's membership against the real broker: the table plan reaches every member, the
consumer never fetches, a member that was expelled hears of it, and reloading the offsets
beside running pollers never forgets their newest commit."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from snowsource.adapters.group_protocol import GroupView, TableAssignor
from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.membership import GROUP_TASK_ID, GroupMembership
from snowsource.adapters.offset_store import OffsetStore
from snowsource.core.group_plan import owner_among
from tests.conftest import TopicFactory
from tests.integration.conftest import Env
from tests.integration.test_membership import _count, requests_sent  # noqa: F401 - fixture
from tests.kafka_support import unique
from tests.polling import poll_until

ALIASES = [f"t{i}" for i in range(6)]


class _Member:
    def __init__(self, conn: KafkaConnection, connector: str, topic: str, key: str) -> None:
        self.key = key
        self.views: list[GroupView] = []
        self.lost: list[str] = []
        self.runs: set[str] = set()
        assignor = TableAssignor(
            key=key,
            aliases=ALIASES,
            worker_id=lambda: f"{key}:8083",
            running=lambda: self.runs,
            on_view=self.views.append,
        )
        self.membership = GroupMembership(
            conn,
            connector=connector,
            task_id=GROUP_TASK_ID,
            topic=topic,
            on_fenced=self.lost.append,
            assignor=assignor,
            session_timeout_ms=6000,
            on_lost=self.lost.append,
        )

    def mine(self) -> set[str]:
        return self.views[-1].tables_of(self.key) if self.views else set()


async def test_every_member_gets_the_whole_plan_and_nobody_fetches(
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    requests_sent: dict[str, Counter[str]],  # noqa: F811 - the fixture
) -> None:
    topic = await topic_factory("group-membership", partitions=3)
    conn = KafkaConnection(bootstrap_servers=kafka_bootstrap)
    connector = unique("group")
    members = [_Member(conn, connector, topic, key) for key in ("k-a", "k-b")]
    for member in members:
        await member.membership.start()
    try:

        def planned_for_both() -> bool:
            return all(m.views and len(m.views[-1].members) == 2 for m in members)

        await poll_until(planned_for_both, timeout=60, interval=0.2)
        views = [m.views[-1] for m in members]
        assert views[0] == views[1]
        for alias in ALIASES:
            assert views[0].owners[alias] == owner_among(alias, ["k-a", "k-b"])
        for member in members:
            client_id = member.membership.client_id
            await poll_until(
                lambda c=client_id: _count(requests_sent, c, "Heartbeat") >= 2,  # type: ignore[misc]
                timeout=15,
                interval=0.1,
            )
            sent = requests_sent[member.membership.client_id]
            assert not [n for n in sent if n.startswith("FetchRequest")], sent
            assert not [n for n in sent if n.startswith("ListOffsetsRequest")], sent
            consumer = member.membership._consumer
            assert consumer is not None
            assert consumer.assignment() == set()
    finally:
        for member in members:
            await member.membership.close()


async def test_a_leaving_member_frees_its_tables_and_an_expelled_one_is_told(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory("group-membership")
    conn = KafkaConnection(bootstrap_servers=kafka_bootstrap)
    connector = unique("group")
    a, b = (_Member(conn, connector, topic, key) for key in ("k-a", "k-b"))
    await a.membership.start()
    await b.membership.start()
    try:
        await poll_until(lambda: bool(a.views and len(a.views[-1].members) == 2), timeout=60)
        a.runs = a.mine()
        # b leaves cleanly: a gets every table in the next round, no session to wait for.
        await b.membership.close()
        await poll_until(lambda: a.mine() == set(ALIASES), timeout=15, interval=0.1)
        assert not a.lost

        # The broker forgets a (as after a session expiry): its next join says so.
        consumer = a.membership._consumer
        assert consumer is not None
        consumer._coordinator.reset_generation()
        await poll_until(lambda: bool(a.lost), timeout=15, interval=0.1)
        assert "no longer knew this member" in a.lost[0]
    finally:
        await a.membership.close()
        await b.membership.close()


async def test_a_reload_beside_a_writer_keeps_the_newest_local_write(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = KafkaConnection(env.bootstrap)
    key = b'["' + env.name.encode() + b'",{"table":"t"}]'
    async with OffsetStore(conn, topic=env.offsets_topic, connector=env.name, partitions=1) as s:
        await s.write_raw(key, b'{"n":0}')
        real_end_offsets = AIOKafkaConsumer.end_offsets

        async def end_offsets_then_commit(self: AIOKafkaConsumer, partitions: Any) -> Any:
            # A poller's commit lands right after the reload fixed where it stops reading.
            ends = await real_end_offsets(self, partitions)
            await s.write_raw(key, b'{"n":1}')
            return ends

        monkeypatch.setattr(AIOKafkaConsumer, "end_offsets", end_offsets_then_commit)
        await s.load()
        assert s._data[key] == b'{"n":1}'
