"""Stored offsets end to end: refusal, migration, key spellings and SPEC §7's restart promises.

Offsets are written into the offsets topic before a daemon starts (the way an older worker, the
Java connector or an operator left them), then the daemon's behaviour is read back from its
status, the emulator's request journal, the output topics and the offsets topic itself.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from snowsource.adapters.offset_store import OffsetStore
from snowsource.config.models import Settings
from snowsource.core.assignment import assign
from snowsource.core.offsets_codec import SourceOffset, encode_key, encode_value
from snowsource.core.table import TableSpec
from snowsource.core.table_status import TableState
from snowsource.emulator.clock import stamp
from snowsource.engine.table_specs import table_spec
from snowsource.engine.wiring import kafka_connection
from tests.integration.conftest import Env
from tests.integration.engine import (
    Record,
    caught_up,
    committed_stream,
    keys_of,
    read_topic,
    running,
    status,
)
from tests.polling import poll_until

Past = Callable[[float], datetime]
Row = dict[str, str]


def spec_of(settings: Settings, alias: str) -> TableSpec:
    """The table's spec exactly as the daemon resolves it."""
    return table_spec(settings, alias, settings.snow.tables[alias])


def offset_bytes(row: Row, fingerprint: str, *, phase: str = "stream") -> bytes:
    """An offset value whose cursor is ``row``."""
    value = encode_value(
        SourceOffset(
            timestamp=row["sys_updated_on"],
            sys_id=row["sys_id"],
            phase=phase,
            fingerprint=fingerprint,
        )
    )
    assert value is not None
    return value


async def write_offsets(settings: Settings, records: list[tuple[bytes, bytes | None]]) -> None:
    """Write raw records into the settings' offsets topic (created compacted when missing)."""
    async with OffsetStore(
        kafka_connection(settings, client_id="test-writer"),
        topic=settings.offset_storage_topic,
        connector=settings.name,
        partitions=settings.offset_storage_partitions,
    ) as store:
        for key, value in records:
            await store.write_raw(key, value)


async def offset_history(env: Env) -> dict[bytes, list[bytes | None]]:
    """Every value written per key of the offsets topic, oldest first."""
    out: dict[bytes, list[bytes | None]] = {}
    for record in await read_topic(env.bootstrap, env.offsets_topic):
        assert record.key is not None
        out.setdefault(record.key, []).append(record.value)
    return out


async def run_until_caught_up(settings: Settings, *aliases: str) -> None:
    """Run one daemon until every named table caught up and committed a ``stream`` offset."""
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, *aliases), timeout=20)
        await poll_until(committed_stream(daemon, *aliases))


def spaced(env: Env, table: str, past: Past, start: float, n: int, **values: str) -> list[Row]:
    """``n`` rows a minute apart from ``start`` seconds before T0 (so an overlap of 10 s
    re-reads only the newest one)."""
    return [env.emu.insert(table, {**values}, at=past(start - 60 * i)) for i in range(n)]


def new_since(before: list[Record], after: list[Record]) -> list[Record]:
    """Records of ``after`` that were not in ``before`` (same topic read twice)."""
    seen = {(r.partition, r.offset) for r in before}
    return [r for r in after if (r.partition, r.offset) not in seen]


def foreign_spelling(connector: str, spec: TableSpec) -> bytes:
    """The table's offsets key with its partition keys in reverse order (not canonical)."""
    reordered = dict(reversed(list(spec.partition.as_dict().items())))
    return orjson.dumps([connector, reordered])


def by_cursor(rows: list[Row]) -> list[Row]:
    """Rows in cursor order."""
    return sorted(rows, key=lambda r: (r["sys_updated_on"], r["sys_id"]))


# ------------------------------------------------------------------ refused offsets (§4)


def _valid(spec: TableSpec) -> dict[str, Any]:
    return {
        "version": "1",
        "timestamp": "2026-09-29 06:00:00",
        "sys_id": "",
        "phase": "stream",
        "fingerprint": spec.partition.query_fingerprint,
    }


def _bad_version(spec: TableSpec) -> bytes:
    return orjson.dumps({**_valid(spec), "version": "2"})


def _bad_fingerprint(spec: TableSpec) -> bytes:
    return orjson.dumps({**_valid(spec), "fingerprint": "sha256:" + "0" * 64})


def _missing_field(spec: TableSpec) -> bytes:
    value = _valid(spec)
    del value["phase"]
    return orjson.dumps(value)


def _malformed_json(spec: TableSpec) -> bytes:
    return orjson.dumps(_valid(spec))[:-9]


def _bad_timestamp(spec: TableSpec) -> bytes:
    return orjson.dumps({**_valid(spec), "timestamp": "2026-09-29T06:00:00Z"})


BAD_OFFSETS = [
    pytest.param(_bad_version, "version", id="unknown-version"),
    pytest.param(_bad_fingerprint, "fingerprint", id="wrong-fingerprint"),
    pytest.param(_missing_field, "'phase'", id="missing-field"),
    pytest.param(_malformed_json, "JSON", id="malformed-json"),
    pytest.param(_bad_timestamp, "timestamp", id="malformed-timestamp"),
]


@pytest.mark.parametrize(("make", "reason"), BAD_OFFSETS)
async def test_an_unusable_offset_fails_only_its_table_and_stays_in_the_topic(
    env: Env, make: Callable[[TableSpec], bytes], reason: str
) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=20)
    settings = env.settings(
        {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}}
    )
    spec = spec_of(settings, "incident")
    key = encode_key(settings.name, spec.partition)
    bad = make(spec)
    await write_offsets(settings, [(key, bad)])

    async with running(settings) as daemon:
        await poll_until(lambda: status(daemon, "incident").state == TableState.FAILED)
        await poll_until(caught_up(daemon, "change_request"))
        error = status(daemon, "incident").last_error

    assert error is not None
    assert spec.describe in error  # names the partition
    assert reason in error
    assert "snowsource offsets delete incident" in error  # and how to reset it
    # Never guessed at: the table did not ask for a single page (the process's one clock probe,
    # a cursor-fields-only request, may go to any owned table, this one included).
    pages = [r for r in env.emu.journal.for_table("incident") if "sysparm_query" in r.params]
    assert pages == []
    assert await read_topic(env.bootstrap, env.topic("incident")) == []
    chg = {r["sys_id"] for r in env.emu.rows("change_request")}
    assert set(keys_of(await read_topic(env.bootstrap, env.topic("change_request")))) == chg
    # Never deleted, never overwritten.
    history = await offset_history(env)
    assert history[key] == [bad]


# ----------------------------------------------------------------- migration fallback (§4)


async def test_a_legacy_fingerprint_offset_is_adopted_under_the_new_partition(
    env: Env, past: Past
) -> None:
    rows = spaced(env, "incident", past, 900, 10, priority="1", active="true")
    settings = env.settings({"incident": {"name": "incident", "query": "priority<=2^active=true"}})
    spec = spec_of(settings, "incident")
    # The Java connector does not reorder terms: its fingerprint differs from ours.
    assert spec.legacy_partition != spec.partition
    legacy_key = encode_key(settings.name, spec.legacy_partition)
    new_key = encode_key(settings.name, spec.partition)
    resume_at = rows[4]
    legacy = offset_bytes(resume_at, spec.legacy_partition.query_fingerprint)
    await write_offsets(settings, [(legacy_key, legacy)])

    await run_until_caught_up(settings, "incident")

    # Resumed from the legacy cursor minus the overlap: rows older than that never re-emitted.
    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    assert keys == [r["sys_id"] for r in rows[4:]]
    history = await offset_history(env)
    assert history[legacy_key] == [legacy]  # the legacy record is left in place
    assert history[new_key][0] == offset_bytes(resume_at, spec.partition.query_fingerprint)
    final = history[new_key][-1]
    assert final is not None
    assert orjson.loads(final)["fingerprint"] == spec.partition.query_fingerprint
    assert orjson.loads(final)["sys_id"] == rows[-1]["sys_id"]


async def test_a_legacy_offset_is_not_used_when_the_table_has_its_own(env: Env, past: Past) -> None:
    rows = spaced(env, "incident", past, 900, 10, priority="1", active="true")
    settings = env.settings({"incident": {"name": "incident", "query": "priority<=2^active=true"}})
    spec = spec_of(settings, "incident")
    legacy_key = encode_key(settings.name, spec.legacy_partition)
    new_key = encode_key(settings.name, spec.partition)
    legacy = offset_bytes(rows[2], spec.legacy_partition.query_fingerprint)
    own = offset_bytes(rows[6], spec.partition.query_fingerprint)
    await write_offsets(settings, [(legacy_key, legacy), (new_key, own)])

    await run_until_caught_up(settings, "incident")

    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    assert keys == [r["sys_id"] for r in rows[6:]]
    assert (await offset_history(env))[legacy_key] == [legacy]


# ------------------------------------------------------------------- key spellings (§4)


async def test_a_foreign_key_spelling_is_used_rewritten_and_tombstoned(
    env: Env, past: Past
) -> None:
    rows = spaced(env, "incident", past, 900, 10)
    settings = env.settings({"incident": {"name": "incident"}})
    spec = spec_of(settings, "incident")
    canonical = encode_key(settings.name, spec.partition)
    foreign = foreign_spelling(settings.name, spec)
    assert foreign != canonical
    stored = offset_bytes(rows[5], spec.partition.query_fingerprint)
    await write_offsets(settings, [(foreign, stored)])

    await run_until_caught_up(settings, "incident")

    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    assert keys == [r["sys_id"] for r in rows[5:]]  # resumed from the foreign-spelled offset
    history = await offset_history(env)
    assert history[foreign] == [stored, None]  # old spelling tombstoned
    assert history[canonical][0] == stored  # rewritten canonically first
    final = history[canonical][-1]
    assert final is not None
    assert orjson.loads(final)["sys_id"] == rows[-1]["sys_id"]


async def test_a_foreign_key_spelling_is_ignored_when_the_canonical_key_exists(
    env: Env, past: Past
) -> None:
    rows = spaced(env, "incident", past, 900, 10)
    settings = env.settings({"incident": {"name": "incident"}})
    spec = spec_of(settings, "incident")
    canonical = encode_key(settings.name, spec.partition)
    foreign = foreign_spelling(settings.name, spec)
    old = offset_bytes(rows[1], spec.partition.query_fingerprint)
    own = offset_bytes(rows[7], spec.partition.query_fingerprint)
    await write_offsets(settings, [(foreign, old), (canonical, own)])

    await run_until_caught_up(settings, "incident")

    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    assert keys == [r["sys_id"] for r in rows[7:]]
    assert (await offset_history(env))[foreign] == [old]


async def test_a_foreign_spelling_of_an_unusable_offset_is_refused_and_left_alone(
    env: Env,
) -> None:
    settings = env.settings({"incident": {"name": "incident"}})
    spec = spec_of(settings, "incident")
    canonical = encode_key(settings.name, spec.partition)
    foreign = foreign_spelling(settings.name, spec)
    bad = _bad_fingerprint(spec)
    await write_offsets(settings, [(foreign, bad)])

    async with running(settings) as daemon:
        await poll_until(lambda: status(daemon, "incident").state == TableState.FAILED)
        error = status(daemon, "incident").last_error

    assert error is not None
    assert "fingerprint" in error
    assert spec.describe in error
    history = await offset_history(env)
    assert history[foreign] == [bad]  # not tombstoned
    assert canonical not in history  # not copied under the canonical key either


# --------------------------------------------------------------- restart promises (§7)


async def test_a_table_added_starts_from_its_start_timestamp_while_the_other_resumes(
    env: Env, past: Past
) -> None:
    incidents = spaced(env, "incident", past, 3600, 10)
    first = env.settings({"incident": {"name": "incident"}})
    await run_until_caught_up(first, "incident")
    before = await read_topic(env.bootstrap, env.topic("incident"))
    assert keys_of(before) == [r["sys_id"] for r in incidents]

    fresh = [env.emu.insert("incident", {"short_description": f"new {i}"}) for i in range(3)]
    too_old = env.emu.insert("change_request", {"short_description": "old"}, at=past(7200))
    changes = spaced(env, "change_request", past, 1800, 5)
    second = env.settings(
        {
            "incident": {"name": "incident"},
            "change_request": {
                "name": "change_request",
                "start.timestamp": stamp(past(3600)),
            },
        }
    )
    await run_until_caught_up(second, "incident", "change_request")

    after = await read_topic(env.bootstrap, env.topic("incident"))
    resumed = keys_of(new_since(before, after))
    # Only the new rows: the overlap re-read finds the first run's rows already in the topic.
    assert sorted(resumed) == sorted(r["sys_id"] for r in fresh)
    added = keys_of(await read_topic(env.bootstrap, env.topic("change_request")))
    assert added == [r["sys_id"] for r in changes]
    assert too_old["sys_id"] not in added


async def test_a_removed_table_keeps_its_offset_and_resumes_when_re_added(
    env: Env, past: Past
) -> None:
    spaced(env, "incident", past, 3600, 5)
    changes = spaced(env, "change_request", past, 3600, 8)
    both = {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}}
    settings = env.settings(both)
    chg_key = encode_key(settings.name, spec_of(settings, "change_request").partition)
    await run_until_caught_up(settings, "incident", "change_request")
    chg_before = await read_topic(env.bootstrap, env.topic("change_request"))
    assert keys_of(chg_before) == [r["sys_id"] for r in changes]
    committed = (await offset_history(env))[chg_key][-1]
    assert committed == offset_bytes(
        changes[-1], spec_of(settings, "change_request").partition.query_fingerprint
    )

    # Removed: its offset stays in the topic, untouched.
    new_changes = [
        env.emu.insert("change_request", {"short_description": f"n{i}"}) for i in range(3)
    ]
    env.emu.insert("incident", {"short_description": "more"})
    await run_until_caught_up(env.settings({"incident": {"name": "incident"}}), "incident")
    assert (await offset_history(env))[chg_key][-1] == committed
    assert len(await read_topic(env.bootstrap, env.topic("change_request"))) == len(chg_before)

    # Re-added with the same table and query: resumes from it, no second backfill.
    await run_until_caught_up(env.settings(both), "incident", "change_request")
    chg_after = await read_topic(env.bootstrap, env.topic("change_request"))
    resumed = keys_of(new_since(chg_before, chg_after))
    assert sorted(resumed) == sorted(r["sys_id"] for r in new_changes)


async def test_tasks_max_change_reassigns_tables_and_nothing_is_backfilled_again(
    env: Env, past: Past
) -> None:
    aliases = ("incident", "change_request", "cmdb_ci", "task_sla")
    tables = {alias: {"name": alias} for alias in aliases}
    rows = {alias: spaced(env, alias, past, 3600, 3) for alias in aliases}
    split = [env.settings(tables, **{"tasks.max": 2, "task.id": task}) for task in (0, 1)]
    owners = assign(list(aliases), 2)
    owned = [{alias for alias, task in owners.items() if task == t} for t in (0, 1)]
    assert owned[0]
    assert owned[1]

    async with running(split[0]) as task0, running(split[1]) as task1:
        assert set(task0.pollers) == owned[0]
        assert set(task1.pollers) == owned[1]
        await poll_until(caught_up(task0, *owned[0]), timeout=20)
        await poll_until(caught_up(task1, *owned[1]), timeout=20)
        await poll_until(committed_stream(task0, *owned[0]))
        await poll_until(committed_stream(task1, *owned[1]))
    before = {alias: await read_topic(env.bootstrap, env.topic(alias)) for alias in aliases}
    for alias in aliases:
        assert keys_of(before[alias]) == [r["sys_id"] for r in rows[alias]]

    fresh = {alias: env.emu.insert(alias, {}) for alias in aliases}
    single = env.settings(tables, **{"tasks.max": 1, "task.id": 0})
    async with running(single) as daemon:
        assert set(daemon.pollers) == set(aliases)
        await poll_until(caught_up(daemon, *aliases), timeout=20)

    for alias in aliases:
        after = await read_topic(env.bootstrap, env.topic(alias))
        resumed = keys_of(new_since(before[alias], after))
        assert resumed == [fresh[alias]["sys_id"]]


async def test_after_a_long_outage_each_row_arrives_once_in_its_latest_state(
    env: Env, past: Past
) -> None:
    rows = spaced(env, "incident", past, 3600, 20)
    settings = env.settings({"incident": {"name": "incident"}})
    await run_until_caught_up(settings, "incident")
    before = await read_topic(env.bootstrap, env.topic("incident"))

    env.emu.clock.advance(3 * 3600)  # the daemon is down for three hours
    now = env.emu.clock.now()
    busy, quiet = rows[3], rows[10]
    for hours_ago, text in ((2.5, "first"), (1.5, "second"), (0.5, "third")):
        env.emu.update(
            "incident",
            busy["sys_id"],
            {"short_description": text},
            at=now - timedelta(hours=hours_ago),
        )
    for hours_ago, text in ((2.0, "one"), (1.0, "two")):
        env.emu.update(
            "incident",
            quiet["sys_id"],
            {"short_description": text},
            at=now - timedelta(hours=hours_ago),
        )
    # Enough activity during the outage for several full pages (batch.size 100).
    created = [
        env.emu.insert(
            "incident",
            {"short_description": f"outage {i}"},
            at=now - timedelta(seconds=10000 - 40 * i),
        )
        for i in range(250)
    ]
    await run_until_caught_up(settings, "incident")

    after = await read_topic(env.bootstrap, env.topic("incident"))
    resumed = new_since(before, after)
    keys = keys_of(resumed)
    assert len(keys) == len(set(keys))  # every row once
    # The overlap re-read after the restart finds rows[-1] already in the topic: not again.
    assert set(keys) == {
        busy["sys_id"],
        quiet["sys_id"],
        *(r["sys_id"] for r in created),
    }
    final = {r.key.decode(): r.json for r in resumed if r.key is not None}
    assert final[busy["sys_id"]]["short_description"] == "third"
    assert final[busy["sys_id"]]["sys_mod_count"] == str(int(busy["sys_mod_count"]) + 3)
    assert final[quiet["sys_id"]]["short_description"] == "two"
    assert final[quiet["sys_id"]]["sys_mod_count"] == str(int(quiet["sys_mod_count"]) + 2)
    # Caught up at full page rate: full pages back to back, then the short one.
    pages = [
        r
        for r in env.emu.journal.for_table("incident")
        if "sysparm_query" in r.params and r.at > now - timedelta(seconds=1)
    ]
    assert len(pages) >= 3


async def test_unparseable_keys_and_other_connectors_are_ignored(env: Env, past: Past) -> None:
    rows = spaced(env, "incident", past, 900, 6)
    settings = env.settings({"incident": {"name": "incident"}})
    spec = spec_of(settings, "incident")
    mine = offset_bytes(rows[2], spec.partition.query_fingerprint)
    other_connector = encode_key("someone-else", spec.partition)
    await write_offsets(
        settings,
        [
            (b"not json at all", b"{}"),
            (b'["just-a-name"]', b"{}"),
            (b'[42, {"a": "b"}]', b"{}"),
            (other_connector, offset_bytes(rows[4], spec.partition.query_fingerprint)),
            (encode_key(settings.name, spec.partition), mine),
        ],
    )
    with capture_logs() as logs:
        await run_until_caught_up(settings, "incident")
    # Resumed from this connector's offset, not the other connector's.
    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    assert keys == [r["sys_id"] for r in rows[2:]]
    warned = [e for e in logs if e["event"] == "ignoring offsets record with unparseable key"]
    assert {e["key"] for e in warned} == {
        b"not json at all",
        b'["just-a-name"]',
        b'[42, {"a": "b"}]',
    }
    history = await offset_history(env)
    assert history[b"not json at all"] == [b"{}"]  # never touched by the daemon
    assert len(history[other_connector]) == 1
