"""The Kafka probe's own rules: shared looks, a short memory, a bounded wait.

What a real producer's client answers while a real broker stops is tested in
``tests/integration/test_table_health.py``; here a stand-in of the probe's own ``BrokerClient``
protocol controls exactly when a broker answers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from snowsource.adapters.kafka_probe import KafkaProbe


@dataclass(frozen=True)
class Broker:
    nodeId: int  # noqa: N815 - aiokafka's name


@dataclass
class Cluster:
    nodes: set[Broker] = field(default_factory=lambda: {Broker(1), Broker(2)})

    def brokers(self) -> set[Broker]:
        return self.nodes


@dataclass
class Client:
    up: set[int] = field(default_factory=lambda: {2})
    asked: list[int] = field(default_factory=list)
    hang: bool = False
    cluster: Cluster = field(default_factory=Cluster)

    async def ready(self, node_id: int) -> bool:
        self.asked.append(node_id)
        if self.hang:
            await asyncio.Event().wait()
        return node_id in self.up


async def test_any_broker_that_answers_makes_kafka_reachable() -> None:
    client = Client()
    assert await KafkaProbe(lambda: client, fresh_for=0).reachable()
    assert client.asked == [1, 2]
    client.up = set()
    assert not await KafkaProbe(lambda: client, fresh_for=0).reachable()


async def test_no_client_or_no_broker_is_unreachable() -> None:
    assert not await KafkaProbe(lambda: None).reachable()
    client = Client(cluster=Cluster(nodes=set()))
    assert not await KafkaProbe(lambda: client).reachable()


async def test_concurrent_probes_share_one_look_and_remember_it_briefly() -> None:
    client = Client()
    probe = KafkaProbe(lambda: client, fresh_for=60)
    answers = await asyncio.gather(*(probe.reachable() for _ in range(5)))
    assert answers == [True] * 5
    assert client.asked == [1, 2]
    client.up = set()
    assert await probe.reachable()  # still the remembered answer
    assert client.asked == [1, 2]


async def test_a_broker_that_never_answers_is_given_up_on_within_the_bound() -> None:
    client = Client(hang=True)
    probe = KafkaProbe(lambda: client, within=0.2, fresh_for=0)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert not await probe.reachable()
    assert loop.time() - began < 2
    await probe.close()
