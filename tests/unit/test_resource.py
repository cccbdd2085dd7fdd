"""A failed ``start()`` closes what it opened (resources never leak half-started)."""

from __future__ import annotations

import gc
import socket
import warnings

import pytest

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.sink import RecordSink
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource


class HalfStarted(AsyncResource):
    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closes: list[Deadline | None] = []

    async def start(self) -> None:
        self.opened.append("connection")
        raise OSError("second step failed")

    async def close(self, deadline: Deadline | None = None) -> None:
        self.closes.append(deadline)
        self.opened.clear()


async def test_a_failed_start_is_followed_by_close() -> None:
    resource = HalfStarted()
    with pytest.raises(OSError, match="second step failed"):
        async with resource:
            raise AssertionError("the body must not run")
    assert resource.opened == []
    assert resource.closes == [None]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_producer_that_could_not_start_is_closed() -> None:
    conn = KafkaConnection(bootstrap_servers=f"127.0.0.1:{_closed_port()}")
    sink = RecordSink(conn)
    with pytest.raises(Exception, match="bootstrap"):
        async with sink:
            raise AssertionError("the body must not run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del sink
        gc.collect()
    leaked = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaked, [str(w.message) for w in leaked]
