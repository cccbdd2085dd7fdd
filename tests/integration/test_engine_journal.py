"""``journal: true`` end to end: comments and work notes from ``sys_journal_field`` on the broker.

The journal stream is a derived keyset stream of the table (``<alias>.journal``) over the
emulator's ``sys_journal_field``; its records go to ``<topic>.journal`` keyed by the journal
row's sys_id, with the record it belongs to and its field as headers.
"""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.offset_store import OffsetStore
from snowsource.core.journal import journal_partition
from snowsource.core.offsets_codec import encode_key
from tests.integration.conftest import Env
from tests.integration.engine import (
    caught_up,
    committed_stream,
    read_offsets,
    read_topic,
    running,
    status,
)
from tests.polling import poll_until

JOURNAL = {"incident": {"name": "incident", "journal": True}}


def _write_journal(env: Env, records: int, entries: int) -> dict[str, tuple[str, str, str]]:
    """``entries`` comments and work notes over the first ``records`` incidents: journal
    sys_id -> (record sys_id, element, value)."""
    parents = [row["sys_id"] for row in env.emu.rows("incident")[:records]]
    written: dict[str, tuple[str, str, str]] = {}
    for i in range(entries):
        parent = parents[i % records]
        element = "comments" if i % 3 else "work_notes"
        value = f"note {i} on {parent[:6]}"
        row = env.emu.add_journal_entry("incident", parent, value, element=element)
        written[row["sys_id"]] = (parent, element, value)
    return written


async def test_two_hundred_journal_rows_arrive_once_each_across_a_restart(env: Env) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=30)
    written = _write_journal(env, records=20, entries=200)
    # Another table's journal rows are not this table's.
    other = env.emu.rows("change_request")[0]["sys_id"]
    env.emu.add_journal_entry("change_request", other, "not an incident's")
    settings = env.settings(JOURNAL, **{"batch.size": 20})
    env.emu.latency_ms = 60
    async with running(settings) as daemon:
        await poll_until(lambda: status(daemon, "incident.journal").rows_emitted >= 60)
        journal = status(daemon, "incident.journal")
    assert journal.rows_emitted < 200, "the first process read every journal row"
    env.emu.latency_ms = 0
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.journal"))
    records = await read_topic(env.bootstrap, env.topic("incident") + ".journal")
    keys = Counter(r.key.decode() for r in records if r.key is not None)
    assert keys == Counter(set(written))  # each journal row exactly once, nothing else
    for record in records:
        assert record.key is not None
        parent, element, value = written[record.key.decode()]
        assert record.headers["snow.parent_sys_id"] == parent.encode()
        assert record.headers["snow.element"] == element.encode()
        assert record.json["value"] == value
        assert record.json["element_id"] == parent
        assert record.json["name"] == "incident"
    # The table's own topic holds only the table's rows.
    table_records = await read_topic(env.bootstrap, env.topic("incident"))
    assert {r.key for r in table_records} == {
        r["sys_id"].encode() for r in env.emu.rows("incident")
    }
    offsets = {r.key for r in await read_topic(env.bootstrap, env.offsets_topic)}
    partition = journal_partition(snow_url=env.url, table="incident", query_domain=True)
    assert encode_key(env.name, partition) in offsets


async def test_journal_topic_can_be_named(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=3)
    written = _write_journal(env, records=3, entries=5)
    named = env.topic("notes")
    tables = {"incident": {"name": "incident", "journal": True, "journal.topic": named}}
    async with running(env.settings(tables)) as daemon:
        await poll_until(caught_up(daemon, "incident.journal"))
    records = await read_topic(env.bootstrap, named)
    assert sorted(r.key.decode() for r in records if r.key) == sorted(written)


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
async def test_a_journal_sweep_whose_rows_were_all_in_kafka_moves_its_offset(
    env: Env, exactly_once: bool
) -> None:
    """Issue 27 for the journal stream: its offset a crash left 30 rows behind the records in
    its topic. The restart suppresses every re-read row and still moves the offset to the last
    journal row, with no new record."""
    env.emu.seed(tables=("incident",), rows=5)
    _write_journal(env, records=5, entries=60)
    top = {"exactly.once": exactly_once, "batch.size": 20}
    async with running(env.settings(JOURNAL, **top)) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.journal"))
        await poll_until(committed_stream(daemon, "incident", "incident.journal"))
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    topic = env.topic("incident") + ".journal"
    before = await read_topic(env.bootstrap, topic, isolation_level=isolation)
    assert len(before) == 60
    ordered = sorted(
        (row["sys_created_on"], row["sys_id"])
        for row in env.emu.rows("sys_journal_field")
        if row["name"] == "incident"
    )
    older, last = ordered[-30], ordered[-1]
    partition = journal_partition(snow_url=env.url, table="incident", query_domain=True)
    journal_key = encode_key(env.name, partition)
    # Every offset as it was, the journal's 30 rows behind: the state a crash between produce
    # and offset write leaves.
    lost_topic = f"{env.offsets_topic}-lost"
    async with OffsetStore(
        KafkaConnection(env.bootstrap), topic=lost_topic, connector=env.name, partitions=1
    ) as store:
        for record in await read_topic(env.bootstrap, env.offsets_topic):
            assert record.key is not None
            value = record.value
            if record.key == journal_key and value is not None:
                value = orjson.dumps(
                    {**orjson.loads(value), "timestamp": older[0], "sys_id": older[1]}
                )
            await store.write_raw(record.key, value)

    settings = env.settings(JOURNAL, **top, **{"offset.storage.topic": lost_topic})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident.journal"))
        journal = status(daemon, "incident.journal")

        def at_last_row() -> bool:
            committed = journal.committed
            return committed is not None and (committed.timestamp, committed.sys_id) == last

        await poll_until(at_last_row, timeout=10)
        assert journal.rows_emitted == 0
        assert journal.rows_suppressed >= 29
    offset = (await read_offsets(env.bootstrap, lost_topic, env.name))["sys_journal_field"]
    assert (offset["timestamp"], offset["sys_id"]) == last
    after = await read_topic(env.bootstrap, topic, isolation_level=isolation)
    assert len(after) == len(before)
