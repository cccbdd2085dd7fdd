"""The Schema Registry stops mid-run and comes back empty (in-memory): the table waits, never
produces a value in an unregistered schema, never moves its offset past an unproduced row, and
loses nothing. Restarts the session's registry, so it lives in a file of its own."""

from __future__ import annotations

import asyncio

from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running, status
from tests.integration.registry_helpers import Reader, add_column
from tests.polling import poll_until
from tests.registry_support import LocalRegistry


def _retries(alias: str) -> float:
    return metrics.REGISTRY.get_sample_value("snowsource_retries_total", {"table": alias}) or 0.0


async def test_a_registry_outage_holds_the_table_and_loses_nothing(
    env: Env, schema_registry: LocalRegistry
) -> None:
    env.emu.create_table("u_widget", {"u_count": "integer"})
    for i in range(3):
        env.emu.insert("u_widget", {"u_count": str(i)})
    settings = env.settings(
        {"widget": {"name": "u_widget", "value.format": "avro"}},
        **{"schema.registry": {"url": schema_registry.url, "request.timeout.ms": 2000}},
    )
    try:
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "widget"))
            await asyncio.to_thread(schema_registry.stop)
            retries = _retries("widget")
            # A new column needs a new version, which the stopped registry cannot register.
            add_column(env, "u_widget", "u_score", "integer")
            new = env.emu.insert("u_widget", {"u_count": "9", "u_score": "42"})
            new_key = (new["sys_updated_on"], new["sys_id"])
            await poll_until(lambda: _retries("widget") >= retries + 2, timeout=60)
            committed = status(daemon, "widget").committed
            assert committed is not None
            assert (committed.timestamp, committed.sys_id) < new_key
            keys = [r.key for r in await read_topic(env.bootstrap, env.topic("widget"))]
            assert new["sys_id"].encode() not in keys
            await asyncio.to_thread(schema_registry.start)  # empty: it knows no schema

            async def arrived() -> bool:
                records = await read_topic(env.bootstrap, env.topic("widget"))
                return new["sys_id"].encode() in [r.key for r in records]

            await poll_until(arrived, timeout=60)
    finally:
        await asyncio.to_thread(schema_registry.start)
    records = await read_topic(env.bootstrap, env.topic("widget"))
    stored = {row["sys_id"].encode() for row in env.emu.rows("u_widget")}
    assert stored <= {r.key for r in records}  # no row lost
    last = records[-1]
    with Reader(schema_registry.url, "avro") as reader:  # the fresh registry's schema
        assert reader.value(env.topic("widget"), last)["u_score"] == 42
