"""Is Kafka reachable right now? Answered from the producer's own connections, cheaply.

Readiness must turn false while Kafka is unreachable, and a probe may come every few seconds
from an orchestrator. Asking the producer's client costs nothing while it holds an open
connection to a broker (aiokafka notices a broker that closed or reset the connection at once);
only when it holds none does the probe try to open one, bounded by ``within`` seconds. So the
answer is what the producer itself would find, without a second client, and a stopped broker
shows within one probe. Answers are shared for ``fresh_for`` seconds, so a burst of probes costs
one look.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Protocol

__all__ = ["BrokerClient", "KafkaProbe"]


class _Broker(Protocol):
    @property
    def nodeId(self) -> int: ...  # noqa: N802 - aiokafka's name


class _Cluster(Protocol):
    def brokers(self) -> Iterable[_Broker]: ...


class BrokerClient(Protocol):
    """What the probe uses of ``aiokafka.AIOKafkaClient``."""

    @property
    def cluster(self) -> _Cluster: ...

    async def ready(self, node_id: int) -> bool: ...


class KafkaProbe:
    """``await probe.reachable()``: True when a broker of the client's metadata answers."""

    def __init__(
        self,
        client: Callable[[], BrokerClient | None],
        *,
        within: float = 2.0,
        fresh_for: float = 1.0,
    ) -> None:
        self._client = client
        self._within = within
        self._fresh_for = fresh_for
        self._answer: tuple[float, bool] | None = None
        self._looking: asyncio.Task[bool] | None = None

    async def reachable(self) -> bool:
        """True when the client holds, or can open within ``within`` s, a broker connection."""
        if self._answer is not None and time.monotonic() - self._answer[0] < self._fresh_for:
            return self._answer[1]
        if self._looking is None or self._looking.done():
            self._looking = asyncio.create_task(self._look(), name="kafka-probe")
        # Shielded: one caller going away must not cancel the look the others wait for.
        return await asyncio.shield(self._looking)

    async def close(self) -> None:
        """Abandon a look still running (at shutdown)."""
        looking, self._looking = self._looking, None
        if looking is not None and not looking.done():
            looking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await looking

    async def _look(self) -> bool:
        answer = False
        client = self._client()
        if client is not None:
            nodes = sorted(broker.nodeId for broker in client.cluster.brokers())
            try:
                async with asyncio.timeout(self._within):
                    for node in nodes:
                        if await client.ready(node):
                            answer = True
                            break
            except TimeoutError:
                answer = False
        self._answer = (time.monotonic(), answer)
        return answer
