"""A Kafka client's start and close run to their end even when their caller is cancelled.

aiokafka closes a client's connections last; a cancel arriving in the middle of ``stop()`` (a
poller cancelled at the shutdown deadline while it closes its dedup-rebuild consumer) would
leave sockets open that Python reports when the client is collected. These fakes stand for the
client: what is tested is ``close_fully``'s handling of the cancel and of a close out of time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from snowsource.adapters.kafka import close_fully, start_fully


@dataclass
class FakeConnection:
    closed: bool = False

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeKafkaClient:
    _conns: dict[str, FakeConnection] = field(default_factory=lambda: {"1": FakeConnection()})


class SlowClient:
    """A client whose ``stop()`` waits for ``release`` before it closes its connections."""

    def __init__(self) -> None:
        self._client = FakeKafkaClient()
        self.starting = asyncio.Event()
        self.stopping = asyncio.Event()
        self.started = False
        self.release = asyncio.Event()
        self.stopped = False

    async def start(self) -> None:
        self.starting.set()
        await self.release.wait()
        self.started = True

    async def stop(self) -> None:
        self.stopping.set()
        await self.release.wait()
        for conn in self._client._conns.values():
            conn.close()
        self.stopped = True


async def test_a_cancel_during_the_close_lets_it_finish_then_is_raised() -> None:
    client = SlowClient()
    closing = asyncio.create_task(close_fully(client))
    await client.stopping.wait()
    closing.cancel()
    await asyncio.sleep(0)  # the cancel is delivered to close_fully, which keeps waiting
    assert not closing.done()
    client.release.set()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert client.stopped
    assert client._client._conns["1"].closed


async def test_a_close_out_of_time_has_its_connections_closed_at_once() -> None:
    client = SlowClient()
    assert await close_fully(client, within=0.05) is False
    assert not client.stopped  # its stop() was abandoned...
    assert client._client._conns["1"].closed  # ...but no socket is left open


async def test_a_close_in_time_returns_true_and_raises_its_own_error() -> None:
    client = SlowClient()
    client.release.set()
    assert await close_fully(client) is True
    assert client.stopped

    class Failing(SlowClient):
        async def stop(self) -> None:
            raise RuntimeError("stop failed")

    with pytest.raises(RuntimeError, match="stop failed"):
        await close_fully(Failing())


async def test_a_cancel_during_the_start_lets_it_finish_then_is_raised() -> None:
    client = SlowClient()
    starting = asyncio.create_task(start_fully(client))
    await client.starting.wait()
    starting.cancel()
    client.release.set()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert client.started  # the bootstrap finished: what it opened is the client's to close


async def test_a_start_that_cannot_finish_after_a_cancel_is_given_up() -> None:
    client = SlowClient()
    starting = asyncio.create_task(start_fully(client, within=0.05))
    await client.starting.wait()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert not client.started
