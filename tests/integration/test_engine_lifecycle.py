"""The lifecycle against a real broker: supervision, REST racing shutdown, the stop contract
(SPEC §1, §5, §8)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import ClientSession
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from snowsource.adapters.sink import RecordSink
from snowsource.cli.run import compose
from snowsource.core.errors import SnowsourceError
from snowsource.core.outbound import Headers, PageAck, PageRecordLike
from snowsource.core.table_status import TableState
from snowsource.engine import wiring
from snowsource.engine.facade import ShuttingDownError
from snowsource.engine.poller import Poller
from snowsource.runtime.deadline import Deadline
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running
from tests.integration.test_rest import base_url, call, rest_settings
from tests.polling import poll_until


@pytest.fixture
async def http() -> Any:
    async with ClientSession() as session:
        yield session


class CountingSink(RecordSink):
    """The real producer; counts this process's unacknowledged records per topic."""

    outstanding: dict[str, int]
    most: dict[str, int]

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        counts = self.__dict__.setdefault("outstanding", {})
        most = self.__dict__.setdefault("most", {})
        counts[topic] = counts.get(topic, 0) + len(records)
        most[topic] = max(most.get(topic, 0), counts[topic])
        future = await super().send_page(topic, records, headers=headers)
        future.add_done_callback(lambda _: counts.__setitem__(topic, counts[topic] - len(records)))
        return future


class SlowAckSink(RecordSink):
    """The real producer, whose acknowledgements reach the poller ``delay`` seconds late."""

    delay = 1.0

    async def send_page(
        self, topic: str, records: Sequence[PageRecordLike], *, headers: Headers | None = None
    ) -> asyncio.Future[PageAck]:
        acked = await super().send_page(topic, records, headers=headers)
        loop = asyncio.get_running_loop()
        late: asyncio.Future[PageAck] = loop.create_future()

        def relay(done: asyncio.Future[PageAck]) -> None:
            if late.done():
                return
            if done.cancelled():
                late.cancel()
            elif (error := done.exception()) is not None:
                late.set_exception(error)
            else:
                late.set_result(done.result())

        acked.add_done_callback(lambda done: loop.call_later(self.delay, relay, done))
        return late


@pytest.mark.parametrize("slices", [1, 3])
async def test_at_most_one_page_of_records_per_slice_is_unacknowledged(
    env: Env, monkeypatch: pytest.MonkeyPatch, slices: int
) -> None:
    monkeypatch.setattr(wiring, "RecordSink", CountingSink)
    env.emu.seed(tables=("incident", "change_request"), rows=300)
    batch = 25
    settings = env.settings(
        {"incident": {"name": "incident"}, "change": {"name": "change_request"}},
        **{"batch.size": batch, "backfill.slices": slices},
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "change"), timeout=60)
        sink = daemon.sink
        assert isinstance(sink, CountingSink)
        most = dict(sink.most)
    assert set(most) == {env.topic("incident"), env.topic("change")}
    # One pager: one page; a sliced backfill produces a page per slice as they arrive.
    for topic, peak in most.items():
        assert 0 < peak <= batch * slices, f"{topic}: {peak} records unacknowledged at once"
    assert len(await read_topic(env.bootstrap, env.topic("incident"))) == 300


async def test_a_cancelled_committer_fails_its_table_within_a_second(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=20)
    settings = env.settings({"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        committer = next(t for t in asyncio.all_tasks() if t.get_name() == "committer:incident")
        committer.cancel()
        began = time.monotonic()
        status = daemon.pollers["incident"].status
        await poll_until(lambda: status.state == TableState.FAILED, timeout=5, interval=0.01)
        assert time.monotonic() - began < 1.0
        assert "committer was cancelled" in (status.last_error or "")


async def test_restart_racing_sigterm_starts_nothing_after_shutdown_began(
    env: Env, http: ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Late acks make every drain take a second, so the restart's own stop is still draining
    # when SIGTERM arrives: shutdown then waits for the supervisor and must win.
    monkeypatch.setattr(wiring, "RecordSink", SlowAckSink)
    env.emu.seed(tables=("incident",), rows=400)
    settings = rest_settings(env, {"incident": {"name": "incident"}}, **{"batch.size": 20})
    daemon = compose(settings)
    shutdown = asyncio.Event()
    run = asyncio.create_task(daemon.run(shutdown))
    await poll_until(daemon.ready.is_set, timeout=60)
    await poll_until(lambda: daemon.pollers["incident"].status.rows_emitted > 0)
    url = base_url(daemon)
    restart = asyncio.create_task(call(http, "POST", f"{url}/restart"))
    await poll_until(lambda: daemon.pollers == {}, interval=0.005)  # its stop is draining
    shutdown.set()
    status, body = await restart
    assert status == 503, body
    assert body["message"] == "snowsource is shutting down"
    assert await asyncio.wait_for(run, 30) == 0
    assert daemon.pollers == {}
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("poller")]


async def test_resume_racing_sigterm_starts_nothing_after_shutdown_began(
    env: Env, http: ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A PUT stop drains for a second (late acks); a PUT resume queues behind it, and SIGTERM
    # arrives meanwhile. Whatever order the locks hand out, the resume must start nothing.
    monkeypatch.setattr(wiring, "RecordSink", SlowAckSink)
    env.emu.seed(tables=("incident",), rows=400)
    settings = rest_settings(env, {"incident": {"name": "incident"}}, **{"batch.size": 20})
    daemon = compose(settings)
    shutdown = asyncio.Event()
    run = asyncio.create_task(daemon.run(shutdown))
    await poll_until(daemon.ready.is_set, timeout=60)
    await poll_until(lambda: daemon.pollers["incident"].status.rows_emitted > 0)
    url = base_url(daemon)
    stopping = asyncio.create_task(call(http, "PUT", f"{url}/stop"))
    await poll_until(lambda: daemon.pollers == {}, interval=0.005)  # the stop is draining
    resuming = asyncio.create_task(call(http, "PUT", f"{url}/resume"))
    shutdown.set()
    await poll_until(lambda: daemon.closing, interval=0.005)
    status, body = await resuming
    assert status == 503, body
    assert body["message"] == "snowsource is shutting down"
    assert (await stopping)[0] == 204
    assert await asyncio.wait_for(run, 30) == 0
    assert daemon.pollers == {}
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("poller")]


async def test_every_action_is_refused_once_shutdown_began(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident",), rows=10)
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        url = base_url(daemon)
        await daemon.stop_pollers(Deadline.after(5))
        daemon._closing = True  # the flag shutdown sets under the supervisor's lock
        try:
            for method, path in (("PUT", "resume"), ("POST", "restart"), ("PUT", "stop")):
                status, body = await call(http, method, f"{url}/{path}")
                assert (status, body["error_code"]) == (503, 503), (path, body)
            with pytest.raises(ShuttingDownError):
                await daemon.start_pollers()
        finally:
            daemon._closing = False
        assert daemon.pollers == {}


async def test_stop_answers_500_when_final_offsets_could_not_be_written(
    env: Env, http: ClientSession, kafka_admin: AIOKafkaAdminClient
) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    settings = rest_settings(
        env, {"incident": {"name": "incident"}}, **{"shutdown.timeout.seconds": 3}
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        # The offsets topic disappears (auto-creation is off): records still reach Kafka,
        # their offsets cannot be written.
        await kafka_admin.delete_topics([env.offsets_topic])
        before = daemon.pollers["incident"].status.rows_emitted
        for i in range(3):
            env.emu.insert("incident", {"short_description": f"after the topic went {i}"})
        await poll_until(lambda: daemon.pollers["incident"].status.rows_emitted >= before + 3)
        began = time.monotonic()
        status, body = await call(http, "PUT", f"{base_url(daemon)}/stop")
        assert time.monotonic() - began < 3 + 2
        assert status == 500, body
        assert body["error_code"] == 500
        assert "final offset" in body["message"]
        assert "table alias 'incident'" in body["message"]
        # No poller runs any more: the connector is STOPPED all the same.
        _, state = await call(http, "GET", f"{base_url(daemon)}/status")
        assert state["connector"]["state"] == "STOPPED"
        assert daemon.pollers == {}


async def test_restart_checks_a_missing_topic_again(
    env: Env, http: ClientSession, kafka_admin: AIOKafkaAdminClient
) -> None:
    env.emu.seed(tables=("incident",), rows=15)
    settings = rest_settings(
        env, {"incident": {"name": "incident"}}, **{"topic.creation.enable": False}
    )
    async with running(settings) as daemon:
        status = daemon.pollers["incident"].status
        assert status.state == TableState.FAILED
        assert "does not exist" in (status.last_error or "")
        await kafka_admin.create_topics([NewTopic(env.topic("incident"), 1, 1)])
        code, _ = await call(http, "POST", f"{base_url(daemon)}/restart")
        assert code == 204
        await poll_until(caught_up(daemon, "incident"), timeout=30)
        assert daemon.pollers["incident"].status.state == TableState.RUNNING
    assert len(await read_topic(env.bootstrap, env.topic("incident"))) == 15


async def test_a_poller_that_crashes_surfaces_through_its_group_and_ends_the_process(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tables fail on their own for every error they know; what escapes a poller is a bug, and
    # it must end the process (exit 1) rather than leave a table silently gone.
    async def crash(self: Poller) -> None:
        raise RuntimeError("a bug outside any table's error handling")

    monkeypatch.setattr(Poller, "run", crash)
    env.emu.seed(tables=("incident",), rows=5)
    daemon = compose(env.settings({"incident": {"name": "incident"}}))
    with pytest.raises(SnowsourceError, match="the pollers crashed") as raised:
        await asyncio.wait_for(daemon.run(asyncio.Event()), 60)
    assert str(raised.value) == (
        'the pollers crashed: RuntimeError("a bug outside any table\'s error handling")'
    )
