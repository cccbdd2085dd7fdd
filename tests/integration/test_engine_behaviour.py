"""End-to-end behaviour of the engine against the emulator and the real broker (SPEC §3, §5, §9).

Each test builds its world in the emulator, runs one daemon in-process until a status or the
request journal says what it waits for, then reads Kafka back and checks the contract.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from snowsource.core.cursor import Position
from snowsource.core.offsets_codec import encode_key, kafka_partition_for_key
from snowsource.core.table_status import TableState
from snowsource.core.timestamps import format_ts
from snowsource.emulator.clock import parse_stamp
from snowsource.engine.supervisor import Daemon
from snowsource.observability import metrics
from tests.conftest import TopicFactory
from tests.integration.conftest import Env
from tests.integration.engine import (
    caught_up,
    committed_stream,
    keys_of,
    latest_by_key,
    read_offsets,
    read_topic,
    running,
    status,
)
from tests.polling import poll_until

Past = Callable[[float], datetime]


def failed(daemon: Daemon, alias: str) -> Callable[[], bool]:
    """Predicate: the table is FAILED."""
    return lambda: status(daemon, alias).state == TableState.FAILED


def stamp_of(row: dict[str, str], field: str = "sys_updated_on") -> datetime:
    """A stored row's timestamp as an aware datetime."""
    return parse_stamp(row[field])


async def offsets_by_key(env: Env) -> dict[bytes, bytes | None]:
    """The last value per key of the offsets topic (tombstones as None)."""
    out: dict[bytes, bytes | None] = {}
    for record in await read_topic(env.bootstrap, env.offsets_topic):
        assert record.key is not None
        out[record.key] = record.value
    return out


# --------------------------------------------------------------------------------- cursor (§5)


async def test_same_second_burst_larger_than_three_pages_is_read_exactly_once(
    env: Env, past: Past
) -> None:
    before = env.emu.insert("incident", {"short_description": "before"}, at=past(180))
    burst = env.emu.burst("incident", n=350, at=past(120))
    after = env.emu.insert("incident", {"short_description": "after"}, at=past(60))
    settings = env.settings({"incident": {"name": "incident"}})  # batch.size 100
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=15)
        st = status(daemon, "incident")
        assert st.rows_emitted == 352

    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    expected = [before["sys_id"], *(r["sys_id"] for r in burst), after["sys_id"]]
    assert len(keys) == len(expected)  # nothing twice ...
    assert set(keys) == set(expected)  # ... nothing missing
    # The burst second was walked by (ts, id) keyset pages, never by sysparm_offset.
    second = burst[0]["sys_updated_on"]
    pages = [r for r in env.emu.journal.for_table("incident") if "sysparm_query" in r.params]
    assert all("sysparm_offset" not in r.params for r in pages)
    inside = [r for r in pages if f"sys_updated_on={second}^sys_id>" in r.params["sysparm_query"]]
    assert len(inside) >= 3


async def test_late_committed_rows_in_the_overlap_window_are_emitted_and_counted(
    env: Env, past: Past
) -> None:
    env.emu.insert("incident", {"short_description": "old"}, at=past(300))
    settings = env.settings({"incident": {"name": "incident"}}, **{"overlap.seconds": 10})
    async with running(settings) as daemon:
        st = status(daemon, "incident")
        await poll_until(caught_up(daemon, "incident"))
        anchor = env.emu.insert("incident", {"short_description": "anchor"})
        anchor_pos = Position(anchor["sys_updated_on"], anchor["sys_id"])
        await poll_until(lambda: st.cursor == anchor_pos, timeout=10)
        assert st.rows_late == 0
        # Committed after the table moved past it: stamped 3 s below the cursor.
        late = env.emu.insert(
            "incident", {"short_description": "late"}, at=stamp_of(anchor) - timedelta(seconds=3)
        )
        # Stamped below the cursor and only visible a moment later (a long transaction).
        hidden = env.emu.insert(
            "incident",
            {"short_description": "long transaction"},
            at=stamp_of(anchor) - timedelta(seconds=4),
            visible_at=env.emu.clock.now() + timedelta(seconds=1.5),
        )
        await poll_until(lambda: st.rows_late >= 2, timeout=10)
        # A late row never moves the cursor back.
        assert st.cursor == anchor_pos
        await poll_until(
            lambda: (
                st.committed is not None
                and (st.committed.timestamp, st.committed.sys_id) == (anchor_pos.ts, anchor_pos.id)
            )
        )
        # Re-reading the window later suppresses them; they are not counted again.
        sweeps = st.sweeps
        await poll_until(lambda: st.sweeps >= sweeps + 2)
        assert st.rows_late == 2

    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    assert keys.count(late["sys_id"]) == 1
    assert keys.count(hidden["sys_id"]) == 1
    assert keys.count(anchor["sys_id"]) == 1


async def test_an_update_inside_the_same_second_is_emitted_and_a_re_read_is_suppressed(
    env: Env,
) -> None:
    settings = env.settings({"incident": {"name": "incident"}}, **{"overlap.seconds": 10})
    async with running(settings) as daemon:
        st = status(daemon, "incident")
        await poll_until(caught_up(daemon, "incident"))
        row = env.emu.insert("incident", {"short_description": "v1"})
        position = Position(row["sys_updated_on"], row["sys_id"])
        await poll_until(lambda: st.cursor == position, timeout=10)
        # The overlap re-read of an unchanged row is suppressed, not produced again.
        await poll_until(lambda: st.rows_suppressed >= 1, timeout=10)
        emitted = st.rows_emitted
        # Same second, no system field moves (like a view without sys_mod_count): only the
        # value differs, and that alone must get it emitted.
        env.emu.update(
            "incident", row["sys_id"], {"short_description": "v2"}, auto_sys_fields=False
        )
        await poll_until(lambda: st.rows_emitted > emitted, timeout=10)
        assert st.cursor == position

    records = await read_topic(env.bootstrap, env.topic("incident"))
    versions = [r.json["short_description"] for r in records if r.key == row["sys_id"].encode()]
    assert versions == ["v1", "v2"]


async def test_row_updated_twice_during_backfill_ends_in_its_latest_state(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=600)
    rows = sorted(env.emu.rows("incident"), key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    read_early, read_late = rows[5], rows[-5]
    env.emu.latency_ms = 200  # makes the backfill last a few pages' worth of round trips
    settings = env.settings({"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        st = status(daemon, "incident")
        await poll_until(lambda: st.rows_emitted >= 100, timeout=15)
        assert not st.caught_up
        assert st.phase == "backfill"
        for n in (1, 2):
            for row in (read_early, read_late):
                env.emu.update("incident", row["sys_id"], {"short_description": f"edit {n}"})
        await poll_until(caught_up(daemon, "incident"), timeout=15)
        wanted = {
            row["sys_id"]: str(int(row["sys_mod_count"]) + 2) for row in (read_early, read_late)
        }

        async def latest_seen() -> bool:
            latest = latest_by_key(await read_topic(env.bootstrap, env.topic("incident")))
            return all(
                latest.get(sys_id, {}).get("sys_mod_count") == count
                for sys_id, count in wanted.items()
            )

        await poll_until(latest_seen, timeout=10, interval=0.3)

    latest = latest_by_key(await read_topic(env.bootstrap, env.topic("incident")))
    assert set(latest) == {r["sys_id"] for r in rows}
    for row in (read_early, read_late):
        final = latest[row["sys_id"]]
        assert final["short_description"] == "edit 2"
        assert final == env.emu.get("incident", row["sys_id"])


# ----------------------------------------------------------------------- record shapes (§3)


async def test_display_values_shape_records_while_the_cursor_stays_raw(
    env: Env, past: Past
) -> None:
    caller = env.emu.add_user("beth.luddy", "pw")
    row = env.emu.insert(
        "incident",
        {
            "caller_id": caller.sys_id,
            "priority": "2",
            "short_description": "display test",
            "sys_mod_count": "1234",
        },
        at=past(60),
    )
    raw_ts = row["sys_updated_on"]
    assert raw_ts == "2026-09-29 06:59:00"
    link = f"{env.url}/api/now/table/sys_user/{caller.sys_id}"
    # Three aliases of one table need three partitions: the queries differ but match every row.
    settings = env.settings(
        {
            "dv_true": {
                "name": "incident",
                "display.value": "true",
                "exclude.reference.link": False,
            },
            "dv_true_bare": {
                "name": "incident",
                "query": "numberISNOTEMPTY",
                "display.value": "true",
                "exclude.reference.link": True,
            },
            "dv_all": {
                "name": "incident",
                "query": "sys_idISNOTEMPTY",
                "display.value": "all",
                "exclude.reference.link": False,
            },
        }
    )
    aliases = ("dv_true", "dv_true_bare", "dv_all")
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, *aliases))
        specs = {a: daemon.pollers[a].spec for a in aliases}
        await poll_until(committed_stream(daemon, *aliases))

    values = {}
    for alias in aliases:
        records = await read_topic(env.bootstrap, env.topic(alias))
        assert len(records) == 1
        assert records[0].headers["snow.timestamp"] == raw_ts.encode()
        values[alias] = records[0].json

    # true: display strings, references {"display_value","link"}; cursor fields and
    # sys_mod_count raw.
    shown = values["dv_true"]
    assert shown["caller_id"] == {"display_value": "Beth Luddy", "link": link}
    assert shown["priority"] == "2 - High"
    assert shown["sys_created_on"] == "09/28/2026 11:59:00 PM"  # the user's zone, not UTC
    assert shown["sys_updated_on"] == raw_ts
    assert shown["sys_id"] == row["sys_id"]
    assert shown["sys_mod_count"] == "1234"
    # true with exclude.reference.link: bare display strings.
    bare = values["dv_true_bare"]
    assert bare["caller_id"] == "Beth Luddy"
    assert bare["priority"] == "2 - High"
    assert bare["sys_updated_on"] == raw_ts
    assert bare["sys_mod_count"] == "1234"
    # all: {"display_value","value"[,"link"]} for every field, cursor fields included.
    both = values["dv_all"]
    assert both["caller_id"] == {
        "display_value": "Beth Luddy",
        "link": link,
        "value": caller.sys_id,
    }
    assert both["priority"] == {"display_value": "2 - High", "value": "2"}
    assert both["sys_updated_on"] == {"display_value": "09/28/2026 11:59:00 PM", "value": raw_ts}
    assert both["sys_mod_count"] == {"display_value": "1,234", "value": "1234"}

    # The cursor is raw UTC whatever the display mode, and display values are requested as all.
    stored = await offsets_by_key(env)
    for alias in aliases:
        value = stored[encode_key(env.name, specs[alias].partition)]
        assert value is not None
        offset = orjson.loads(value)
        assert (offset["timestamp"], offset["sys_id"]) == (raw_ts, row["sys_id"])
    pages = [r for r in env.emu.journal.for_table("incident") if "sysparm_query" in r.params]
    assert pages
    assert {r.params["sysparm_display_value"] for r in pages} == {"all"}


async def test_database_view_with_prefixed_cursor_fields(env: Env, past: Past) -> None:
    incidents = [
        env.emu.insert("incident", {"short_description": f"inc {i}"}, at=past(100 - 10 * i))
        for i in range(5)
    ]
    for inc in incidents[:3]:
        env.emu.insert("task_sla", {"task": inc["sys_id"], "sla": "P2 resolution"}, at=past(30))
    env.emu.create_view(
        "incident_sla", {"inc": "incident", "sla": "task_sla"}, join=("inc_sys_id", "sla_task")
    )
    settings = env.settings(
        {
            "incident_sla": {
                "name": "incident_sla",
                "timestamp.field": "inc_sys_updated_on",
                "id.field": "inc_sys_id",
            }
        }
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident_sla"))
        spec = daemon.pollers["incident_sla"].spec
        st = status(daemon, "incident_sla")
        last = incidents[-1]
        await poll_until(lambda: st.committed is not None and st.committed.sys_id == last["sys_id"])

    assert spec.partition.timestamp_field == "inc_sys_updated_on"
    assert spec.partition.table == "incident_sla"
    records = await read_topic(env.bootstrap, env.topic("incident_sla"))
    # Sliced, the ranges are produced side by side: put them in cursor order to compare.
    records.sort(key=lambda r: (r.headers["snow.timestamp"], r.key or b""))
    assert keys_of(records) == [i["sys_id"] for i in incidents]
    for record, inc in zip(records, incidents, strict=True):
        assert record.json["inc_sys_id"] == inc["sys_id"]
        assert record.json["inc_short_description"] == inc["short_description"]
        assert record.headers["snow.timestamp"] == inc["sys_updated_on"].encode()
        assert record.headers["snow.table"] == b"incident_sla"
    assert [r.json["sla_task"] for r in records] == [i["sys_id"] for i in incidents[:3]] + [
        "",
        "",
    ]
    stored = await offsets_by_key(env)
    value = stored[encode_key(env.name, spec.partition)]
    assert value is not None
    assert b'"timestamp_field":"inc_sys_updated_on"' in encode_key(env.name, spec.partition)
    offset = orjson.loads(value)
    assert (offset["timestamp"], offset["sys_id"]) == (last["sys_updated_on"], last["sys_id"])
    pages = [r for r in env.emu.journal.for_table("incident_sla") if "sysparm_query" in r.params]
    assert pages
    assert all(
        r.params["sysparm_query"].endswith("^ORDERBYinc_sys_updated_on^ORDERBYinc_sys_id")
        for r in pages
    )


@pytest.mark.parametrize("slices", [1, 4])
async def test_record_contract_key_value_headers_timestamp_and_partition(
    env: Env, slices: int
) -> None:
    env.emu.seed(tables=("incident",), rows=150)
    rows = {r["sys_id"]: r for r in env.emu.rows("incident")}
    ordered = sorted(rows.values(), key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    settings = env.settings(
        {"incident": {"name": "incident"}},
        **{"topic.creation.partitions": 3, "backfill.slices": slices},
    )
    started_ms = time.time() * 1000
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    ended_ms = time.time() * 1000

    records = await read_topic(env.bootstrap, env.topic("incident"))
    assert sorted(keys_of(records)) == sorted(rows)
    assert {r.partition for r in records} == {0, 1, 2}
    instance = env.url.split("://", 1)[1].encode()
    first_page = {r["sys_id"] for r in ordered[:100]}  # batch.size 100: a full page, then 50
    for record in records:
        assert record.key is not None
        assert record.value is not None
        sys_id = record.key.decode("utf-8")
        row = rows[sys_id]
        assert record.json == row  # the row as the Table API returned it (raw, no links)
        assert record.value == orjson.dumps(record.json)  # compact UTF-8 JSON, field order kept
        assert record.headers == {
            "snow.instance": instance,
            "snow.table": b"incident",
            "snow.timestamp": row["sys_updated_on"].encode(),
            # A sliced backfill's records all say backfill: its last range's short page is
            # not the end while other ranges are unread (the stream phase follows it).
            "snow.phase": b"backfill" if slices > 1 or sys_id in first_page else b"stream",
            "snow.operation": b"upsert",
        }
        # Produce time, not the row's (days old) timestamp.
        assert started_ms - 1000 <= record.timestamp <= ended_ms + 1000
        assert record.partition == kafka_partition_for_key(record.key, 3)


# -------------------------------------------------------------------------- domains (§5)


async def test_query_domain_false_reads_every_domain_and_true_does_not(env: Env) -> None:
    env.emu.set_domains("admin", ("TOP/ACME",))
    acme = env.emu.insert("incident", {"short_description": "acme", "sys_domain": "TOP/ACME"})
    other = env.emu.insert("incident", {"short_description": "other", "sys_domain": "TOP/OTHER"})
    shared = env.emu.insert("incident", {"short_description": "global", "sys_domain": "global"})
    # Different batch sizes tell the two aliases' requests apart in the journal.
    settings = env.settings(
        {
            "all_domains": {"name": "incident", "query.domain": False, "batch.size": 100},
            "own_domain": {"name": "incident", "query.domain": True, "batch.size": 90},
        }
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "all_domains", "own_domain"))

    every = set(keys_of(await read_topic(env.bootstrap, env.topic("all_domains"))))
    own = set(keys_of(await read_topic(env.bootstrap, env.topic("own_domain"))))
    assert every == {acme["sys_id"], other["sys_id"], shared["sys_id"]}
    assert own == {acme["sys_id"], shared["sys_id"]}
    pages = [r for r in env.emu.journal.for_table("incident") if "sysparm_query" in r.params]
    no_domain = [r for r in pages if r.params["sysparm_limit"] == "100"]
    domain = [r for r in pages if r.params["sysparm_limit"] == "90"]
    assert no_domain
    assert domain
    assert all(r.params.get("sysparm_query_no_domain") == "true" for r in no_domain)
    assert all("sysparm_query_no_domain" not in r.params for r in domain)


# --------------------------------------------------------------------------- errors (§9)


async def test_a_403_fails_only_that_table(env: Env) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=40)
    env.emu.deny_table("admin", "change_request")
    expected = {r["sys_id"] for r in env.emu.rows("incident")}
    settings = env.settings(
        {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}}
    )
    async with running(settings) as daemon:
        await poll_until(failed(daemon, "change_request"))
        await poll_until(caught_up(daemon, "incident"))
        error = status(daemon, "change_request").last_error
        assert status(daemon, "incident").state == TableState.RUNNING

    assert error is not None
    assert "change_request" in error
    assert "403" in error
    # A 403 is not retried.
    assert len(env.emu.journal.for_table("change_request")) == 1
    assert set(keys_of(await read_topic(env.bootstrap, env.topic("incident")))) == expected
    assert await read_topic(env.bootstrap, env.topic("change_request")) == []


async def test_429_waits_out_retry_after(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    env.emu.faults.add(status=429, retry_after=2, times=1, table="incident")
    settings = env.settings({"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=15)

    requests = env.emu.journal.for_table("incident")
    throttled = [i for i, r in enumerate(requests) if r.status == 429]
    assert len(throttled) == 1
    index = throttled[0]
    after = requests[index + 1 :]
    assert after
    assert all(r.wall >= requests[index].wall + 2.0 for r in after)
    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    assert sorted(keys) == sorted(r["sys_id"] for r in env.emu.rows("incident"))


async def test_5xx_malformed_bodies_and_execution_time_are_retried(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=200)
    expected = sorted(r["sys_id"] for r in env.emu.rows("incident"))
    env.emu.faults.add(status=503, html=True, times=1, table="incident")
    env.emu.faults.add(status=500, times=1, table="incident")
    env.emu.faults.add(kind="malformed", times=1, table="incident")
    env.emu.faults.add(kind="truncated", times=1, table="incident")
    env.emu.max_page_cost = 30  # a page of more than 30 rows is "too expensive"
    # One pager: the sizes below count on fewer than 20 pages after the last halving (slices
    # read more, smaller pages, and the size grows back after 20 successes).
    settings = env.settings({"incident": {"name": "incident"}}, **{"backfill.slices": 1})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"), timeout=15)

    assert len(env.emu.faults) == 0
    pages = [
        r
        for r in env.emu.journal.for_table("incident")
        if "sysparm_query" in r.params and r.params["sysparm_no_count"] == "true"
    ]
    limits = [int(r.params["sysparm_limit"]) for r in pages]
    assert limits[0] == 100
    assert 50 in limits
    assert 25 in limits
    assert limits.index(50) < limits.index(25)
    assert [r.status for r in pages if int(r.params["sysparm_limit"]) > 25].count(500) >= 2
    assert limits[-1] == 25
    assert sorted(keys_of(await read_topic(env.bootstrap, env.topic("incident")))) == expected


@pytest.mark.parametrize("slices", [1, 4])
async def test_a_page_hidden_by_row_acls_fails_the_table_instead_of_spinning(
    env: Env, past: Past, slices: int
) -> None:
    visible = [
        env.emu.insert("incident", {"short_description": "visible"}, at=past(600 - i))
        for i in range(100)
    ]
    # A whole page of hidden rows (batch.size is 100) in one second: a second never spans two
    # slices, so with slices too one range meets a page it cannot read past. (Fewer hidden
    # rows than a page in a range are just a short range: nothing readable lies behind them.)
    for _ in range(100):
        env.emu.insert("incident", {"short_description": "secret"}, at=past(400))
    later = env.emu.insert("incident", {"short_description": "visible later"}, at=past(100))
    env.emu.hide_rows("incident", lambda row: row.get("short_description") == "secret")
    # The count that follows the hidden range's empty page is slow, so the other slices read
    # on while it is in flight: the prefix must still wait for its verdict. Sixteen ranges cut
    # the 600 s from the first row: the hidden range starts at most 600 // 16 s before it.
    hidden_range = (format_ts(past(400 + 600 // 16)), format_ts(past(399)))
    env.emu.faults.add(
        kind="slow", delay=2.0, times=None, table="incident", window=hidden_range, counting=True
    )
    settings = env.settings({"incident": {"name": "incident"}}, **{"backfill.slices": slices})
    async with running(settings) as daemon:
        await poll_until(failed(daemon, "incident"))
        st = status(daemon, "incident")
        error = st.last_error
        # What was read before the hidden page is committed; the cursor never jumped over it.
        last = max(visible, key=lambda r: (r["sys_updated_on"], r["sys_id"]))
        committed = (st.committed.timestamp, st.committed.sys_id) if st.committed else None
        if slices == 1:
            assert committed == (last["sys_updated_on"], last["sys_id"])
        else:
            # Slices fail the table when one of them meets the hidden page, wherever the
            # others are: the prefix never passes the hidden rows.
            assert committed is None or committed <= (last["sys_updated_on"], last["sys_id"])

    assert error is not None
    assert "ACL" in error
    assert "incident" in error
    requests = env.emu.journal.for_table("incident")
    counting = [r for r in requests if r.params.get("sysparm_no_count") == "false"]
    counts = [r for r in counting if r.params["sysparm_limit"] == "1"]
    # One pager asks once, after its full page; each slice asks after a range's first page
    # came back empty (ranges without any row cost one count each).
    assert len(counts) == 1 if slices == 1 else len(counts) >= 1
    # Besides, a sliced backfill's first page counts the rows its ranges are cut by: once.
    assert len(counting) - len(counts) == (0 if slices == 1 else 1)
    # probe, full page, empty page, count: no loop (slices: a few such per range, once)
    assert len(requests) <= (5 if slices == 1 else 5 * 4 * 4)
    keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    if slices == 1:
        assert sorted(keys) == sorted(r["sys_id"] for r in visible)
    else:
        # A slice past the hidden range may have produced its row ahead of the prefix (a
        # restart's dedup rebuild covers it); the committed offset above never counts it.
        assert sorted(set(keys) - {later["sys_id"]}) == sorted(r["sys_id"] for r in visible)
        assert len(keys) == len(set(keys))


async def test_rows_without_id_or_with_a_bad_timestamp_fail_their_table(
    env: Env, past: Past
) -> None:
    good = env.emu.insert("incident", {"short_description": "good"}, at=past(120))
    bad_value = "2026-09-29 06:59:00.5"
    bad = env.emu.insert("incident", {"sys_updated_on": bad_value}, at=past(60))
    env.emu.create_table("u_thing", {"u_key": "string", "u_name": "string"})
    thing_good = env.emu.insert("u_thing", {"u_key": "k1", "u_name": "a"}, at=past(120))
    keyless = env.emu.insert("u_thing", {"u_key": "", "u_name": "b"}, at=past(60))
    settings = env.settings(
        {
            "incident": {"name": "incident"},
            "things": {"name": "u_thing", "id.field": "u_key"},
            "change_request": {"name": "change_request"},
        }
    )
    async with running(settings) as daemon:
        await poll_until(failed(daemon, "incident"))
        await poll_until(failed(daemon, "things"))
        await poll_until(caught_up(daemon, "change_request"))
        ts_error = status(daemon, "incident").last_error
        id_error = status(daemon, "things").last_error

    assert ts_error is not None
    assert bad["sys_id"] in ts_error
    assert "sys_updated_on" in ts_error
    assert bad_value in ts_error
    assert id_error is not None
    assert keyless["sys_id"] in id_error
    assert "u_key" in id_error
    assert "''" in id_error
    # The bad rows never reach Kafka (their page's good rows may or may not have).
    assert set(keys_of(await read_topic(env.bootstrap, env.topic("incident")))) <= {good["sys_id"]}
    assert set(keys_of(await read_topic(env.bootstrap, env.topic("things")))) <= {
        thing_good["u_key"]
    }


async def test_missing_topic_without_topic_creation_fails_that_table(
    env: Env, topic_factory: TopicFactory, kafka_admin: AIOKafkaAdminClient
) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=20)
    existing = await topic_factory("existing")
    missing = f"{env.name}.missing"
    settings = env.settings(
        {
            "incident": {"name": "incident", "topic": existing},
            "change_request": {"name": "change_request", "topic": missing},
        },
        **{"topic.creation.enable": False},
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        st = status(daemon, "change_request")
        assert st.state == TableState.FAILED
        error = st.last_error

    assert error is not None
    assert missing in error
    assert "topic.creation.enable" in error
    assert missing not in await kafka_admin.list_topics()
    assert not env.emu.journal.for_table("change_request")
    keys = keys_of(await read_topic(env.bootstrap, existing))
    assert sorted(keys) == sorted(r["sys_id"] for r in env.emu.rows("incident"))


async def test_a_backfill_longer_than_the_dedup_cap_evicts_nothing_by_cap(env: Env) -> None:
    # Rows one per second: the dedup window slides with the cursor during the backfill, so a
    # cap below the table size (but above one page) is never reached: no WARN, no metric.
    base = env.emu.clock.now() - timedelta(hours=2)
    for i in range(300):
        env.emu.insert("incident", {"short_description": f"r{i}"}, at=base + timedelta(seconds=i))
    before = (
        metrics.REGISTRY.get_sample_value("snowsource_dedup_evictions_total", {"table": "incident"})
        or 0.0
    )
    settings = env.settings(
        {"incident": {"name": "incident"}}, **{"dedup.max.entries": 150, "batch.size": 100}
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        assert daemon.pollers["incident"].status.rows_emitted == 300
    after = (
        metrics.REGISTRY.get_sample_value("snowsource_dedup_evictions_total", {"table": "incident"})
        or 0.0
    )
    assert after == before


@pytest.mark.parametrize("slices", [1, 4])
async def test_a_record_larger_than_max_request_size_fails_the_table_naming_the_row(
    env: Env, slices: int
) -> None:
    base = env.emu.clock.now() - timedelta(hours=1)
    small = [
        env.emu.insert("incident", {"short_description": f"ok {i}"}, at=base + timedelta(seconds=i))
        for i in range(5)
    ]
    huge = env.emu.insert("incident", {"description": "x" * 20000}, at=base + timedelta(seconds=10))
    settings = env.settings(
        {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}},
        kafka={"bootstrap.servers": env.bootstrap, "max.request.size": 8000},
        **{"backfill.slices": slices},
    )
    env.emu.insert("change_request", {"short_description": "fine"}, at=base)
    async with running(settings) as daemon:
        status = daemon.pollers["incident"].status
        await poll_until(lambda: status.state == TableState.FAILED)
        await poll_until(caught_up(daemon, "change_request"))
        assert huge["sys_id"] in (status.last_error or "")
        assert "incident" in (status.last_error or "")
    records = await read_topic(env.bootstrap, env.topic("incident"))
    emitted = {r.key.decode() for r in records if r.key}
    stored = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    last_small = max(small, key=lambda r: r["sys_updated_on"])
    if slices == 1:
        assert emitted == {r["sys_id"] for r in small}
        assert stored["incident"]["sys_id"] == last_small["sys_id"]
    else:
        # The slices reading other ranges stop with the table, wherever they are; the
        # committed prefix never passes the refused row.
        assert emitted <= {r["sys_id"] for r in small}
        if "incident" in stored:
            assert stored["incident"]["timestamp"] <= last_small["sys_updated_on"]
