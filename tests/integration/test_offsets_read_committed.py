"""Every reader of the offsets topic reads read_committed (the daemon's store, the offsets
script and REST all load through ``OffsetStore``): an aborted transaction's offset never moves
a table, and an open transaction never shows; the load waits for it to end, because an offset
committed after it began would be hidden otherwise (issue 23 item 4)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.offset_store import OffsetStore
from snowsource.cli.offsets import amain
from snowsource.core.offsets_codec import SourceOffset, encode_key, encode_value, partition_for
from tests.integration.conftest import Env
from tests.integration.engine import write_config


def _value(ts: str, fingerprint: str) -> bytes:
    value = encode_value(SourceOffset(ts, "a1" * 16, "stream", fingerprint))
    assert value is not None
    return value


async def test_aborted_and_open_transactions_are_not_read_and_an_open_one_is_waited_for(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = partition_for(
        snow_url=env.url,
        table="incident",
        query="",
        query_domain=True,
        timestamp_field="sys_updated_on",
    )
    key = encode_key(env.name, partition)
    fp = partition.query_fingerprint
    conn = KafkaConnection(env.bootstrap)
    async with OffsetStore(conn, topic=env.offsets_topic, connector=env.name, partitions=1):
        pass  # creates the topic as the daemon would

    producer = AIOKafkaProducer(
        bootstrap_servers=env.bootstrap, transactional_id=f"{env.name}-tx", acks="all"
    )
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(env.offsets_topic, _value("2026-09-29 06:00:00", fp), key=key)
        await producer.begin_transaction()
        await producer.send(env.offsets_topic, _value("2026-09-29 06:30:00", fp), key=key)
        await producer.abort_transaction()
        # Left open while the readers load: its end offset is where the readers stop.
        await producer.begin_transaction()
        await producer.send(env.offsets_topic, _value("2026-09-29 06:45:00", fp), key=key)
        await producer.flush()

        # Left open, it holds the readers at its first offset until it ends (a killed
        # process's until the broker times it out): what was committed after it must count.
        store = OffsetStore(conn, topic=env.offsets_topic, connector=env.name, partitions=1)
        loading = asyncio.ensure_future(store.start())
        done, _ = await asyncio.wait({loading}, timeout=2)
        assert not done, "the load read past an open transaction's start without waiting"
        await producer.abort_transaction()
        await loading
        assert store.get(partition) == _value("2026-09-29 06:00:00", fp)
        await store.close()

        config = write_config(
            env.tmp_path / "offsets.yaml", env.document({"incident": {"name": "incident"}})
        )
        capsys.readouterr()
        assert await amain(["list", "--json", "--config", str(config)]) == 0
        shown = orjson.loads(capsys.readouterr().out)["offsets"]
        assert [o["offset"]["timestamp"] for o in shown] == ["2026-09-29 06:00:00"]
    finally:
        await producer.stop()
