"""``value.format: avro`` keeps the delivery promises: exactly-once transactions, and group
mode where members share tables (and register the same schema, idempotently)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from snowsource.runtime.deadline import Deadline
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running, status
from tests.integration.registry_helpers import Reader
from tests.integration.test_rest import group_settled, rest_settings
from tests.polling import poll_until
from tests.registry_support import LocalRegistry

# Eight tables: the group plan is a rendezvous hash over random member keys, and with four a
# member was left without any table one run in eight (the test needs both to hold some).
ALIASES = [f"ends{digit}" for digit in range(1, 9)]


async def test_exactly_once_with_avro_emits_nothing_twice(
    env: Env, schema_registry: LocalRegistry
) -> None:
    base = env.emu.clock.now() - timedelta(minutes=30)
    for i in range(60):
        env.emu.insert(
            "incident", {"short_description": f"row {i}"}, at=base + timedelta(seconds=i)
        )
    settings = env.settings(
        {"incident": {"name": "incident", "value.format": "avro"}},
        **{"exactly.once": True, "batch.size": 20, "overlap.seconds": 3600},
        **{"schema.registry": {"url": schema_registry.url}},
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=60)
        assert await daemon.stop_pollers(Deadline.after(10)) == []
        await daemon.start_pollers(reload=True)
        await poll_until(caught_up(daemon, "incident"), timeout=60)
        # Everything re-read and recognised: the same schema, so the same bytes.
        assert status(daemon, "incident").rows_emitted == 0
    committed = await read_topic(
        env.bootstrap, env.topic("incident"), isolation_level="read_committed"
    )
    assert len(committed) == 60
    with Reader(schema_registry.url, "avro") as reader:
        texts = Counter(
            reader.value(env.topic("incident"), r)["short_description"] for r in committed
        )
    assert texts == Counter(f"row {i}" for i in range(60))


async def test_group_members_share_avro_tables(env: Env, schema_registry: LocalRegistry) -> None:
    env.emu.seed(tables=("incident",), rows=40)
    tables = {
        alias: {"name": "incident", "query": f"numberENDSWITH{alias[-1]}"} for alias in ALIASES
    }
    settings = rest_settings(
        env,
        tables,
        **{"tasks.assignment": "group", "group.session.timeout.ms": 6000},
        **{"value.format": "avro", "schema.registry": {"url": schema_registry.url}},
    )
    async with running(settings) as a, running(settings) as b:
        await poll_until(lambda: group_settled(a, b, ALIASES), timeout=60, interval=0.1)

        def all_caught_up() -> bool:
            return caught_up(a, *a.pollers)() and caught_up(b, *b.pollers)()

        await poll_until(all_caught_up, timeout=60)
    numbers = set()
    with Reader(schema_registry.url, "avro") as reader:
        for alias in ALIASES:
            for record in await read_topic(env.bootstrap, env.topic(alias)):
                value = reader.value(env.topic(alias), record)
                assert value["number"].endswith(alias[-1])
                numbers.add(value["number"])
    expected = {r["number"] for r in env.emu.rows("incident") if r["number"][-1] in "12345678"}
    assert numbers == expected


async def test_the_journal_stream_has_its_own_fixed_schema(
    env: Env, schema_registry: LocalRegistry
) -> None:
    env.emu.seed(tables=("incident",), rows=5)
    parent = env.emu.rows("incident")[0]["sys_id"]
    for i in range(4):
        env.emu.add_journal_entry("incident", parent, f"note {i}", element="comments")
    settings = env.settings(
        {"incident": {"name": "incident", "journal": True, "value.format": "avro"}},
        **{"schema.registry": {"url": schema_registry.url}},
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.journal"))
    topic = env.topic("incident") + ".journal"
    records = await read_topic(env.bootstrap, topic)
    assert len(records) == 4
    with Reader(schema_registry.url, "avro") as reader:
        values = [reader.value(topic, r) for r in records]
        schema = reader.client.get_latest_version(f"{topic}-value").schema.schema_str
    assert sorted(v["value"] for v in values) == [f"note {i}" for i in range(4)]
    assert {v["element_id"] for v in values} == {parent}
    assert all(v["sys_created_on"].tzinfo is not None for v in values)  # timestamp-millis
    assert schema is not None
    assert '"name":"sys_journal_field"' in schema.replace(" ", "")
