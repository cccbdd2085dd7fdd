"""``journal: true`` end to end: comments and work notes from ``sys_journal_field`` on the broker.

The journal stream is a derived keyset stream of the table (``<alias>.journal``) over the
emulator's ``sys_journal_field``; its records go to ``<topic>.journal`` keyed by the journal
row's sys_id, with the record it belongs to and its field as headers.
"""

from __future__ import annotations

from collections import Counter

from snowsource.core.journal import journal_partition
from snowsource.core.offsets_codec import encode_key
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running, status
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
