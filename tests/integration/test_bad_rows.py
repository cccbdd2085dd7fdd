"""Rows whose id could never be a cursor FAIL their table before anything past them is sent.

The same rule as every offset (``cursor_id_problem``): a sys_id field holds 32 lowercase hex
characters, any other id field at most 255 characters without ``^`` or control characters.
Emitting such a row would commit an offset that no restart could load. Real daemon, real Kafka,
rows planted in the emulator.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from snowsource.core.table_status import TableState
from snowsource.core.timestamps import format_ts
from snowsource.engine.supervisor import Daemon
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, keys_of, read_offsets, read_topic, running, status
from tests.polling import poll_until


def failed(daemon: Daemon, alias: str) -> Callable[[], bool]:
    return lambda: status(daemon, alias).state == TableState.FAILED


@pytest.mark.parametrize("slices", [1, 4])
async def test_unusable_ids_fail_the_table_and_nothing_past_them_is_committed(
    env: Env, past: Callable[[float], datetime], slices: int
) -> None:
    good = env.emu.insert("incident", {"short_description": "good"}, at=past(120))
    env.emu.insert("incident", {"sys_id": "f" * 10_000}, at=past(60))
    after = env.emu.insert("incident", {"short_description": "after"}, at=past(30))
    env.emu.create_table("u_thing", {"u_key": "string"})
    thing_good = env.emu.insert("u_thing", {"u_key": "k1"}, at=past(120))
    env.emu.insert("u_thing", {"u_key": "k2^NQactive=true"}, at=past(60))
    env.emu.insert("u_thing", {"u_key": "k3"}, at=past(30))
    settings = env.settings(
        {
            "incident": {"name": "incident", "batch.size": 1},
            "things": {"name": "u_thing", "id.field": "u_key", "batch.size": 1},
            "change_request": {"name": "change_request"},
        },
        **{"backfill.slices": slices},
    )
    async with running(settings) as daemon:
        await poll_until(failed(daemon, "incident"))
        await poll_until(failed(daemon, "things"))
        await poll_until(caught_up(daemon, "change_request"))  # the others are unaffected
        huge_error = status(daemon, "incident").last_error
        caret_error = status(daemon, "things").last_error

    assert huge_error is not None
    assert "is not a sys_id" in huge_error
    assert "(10000 characters)" in huge_error
    assert len(huge_error) < 2000  # the 10 kB value is quoted shortly
    assert caret_error is not None
    assert "contains '^'" in caret_error
    assert "u_key" in caret_error

    incident_keys = keys_of(await read_topic(env.bootstrap, env.topic("incident")))
    thing_keys = keys_of(await read_topic(env.bootstrap, env.topic("things")))
    if slices == 1:
        assert incident_keys == [good["sys_id"]]
        assert thing_keys == [thing_good["u_key"]]
    else:
        # Slices produce their ranges as they read them: a row after the bad one may be in
        # Kafka ahead of the committed prefix (a restart's dedup rebuild covers it). The bad
        # rows never are, and the offsets below never pass them.
        assert good["sys_id"] in incident_keys
        assert set(incident_keys) <= {good["sys_id"], after["sys_id"]}
        assert thing_good["u_key"] in thing_keys
        assert set(thing_keys) <= {"k1", "k3"}
    assert after["sys_id"] not in huge_error
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    assert offsets["incident"]["sys_id"] == good["sys_id"]
    assert offsets["u_thing"]["sys_id"] == "k1"


async def test_bad_rows_in_many_ranges_of_a_sliced_backfill_fail_it_at_the_first(
    env: Env, past: Callable[[float], datetime]
) -> None:
    # Every slice meets a bad row in a range of its own and holds its failure until the rows
    # before are acknowledged: the table FAILs (no slice waits for ever on another) with the
    # committed offset right before the first bad row.
    env.emu.create_table("u_thing", {"u_key": "string"})
    good = [
        env.emu.insert("u_thing", {"u_key": f"g{i}"}, at=past(4000 - i * 400)) for i in range(8)
    ]
    for i in range(8):
        env.emu.insert("u_thing", {"u_key": f"b{i}^bad"}, at=past(3990 - i * 400))
    settings = env.settings(
        {"things": {"name": "u_thing", "id.field": "u_key", "batch.size": 1}},
        **{"backfill.slices": 4},
    )
    async with running(settings) as daemon:
        await poll_until(failed(daemon, "things"))
        error = status(daemon, "things").last_error
    assert error is not None
    assert "contains '^'" in error
    keys = set(keys_of(await read_topic(env.bootstrap, env.topic("things"))))
    assert good[0]["u_key"] in keys
    assert not any("^" in key for key in keys)
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    assert offsets["u_thing"]["sys_id"] == good[0]["u_key"]


async def test_a_slice_failing_the_table_gives_back_every_page_slot(
    env: Env, past: Callable[[float], datetime]
) -> None:
    # A record Kafka can never take (over max.request.size) in a later range: its slice holds
    # the failure until the rows before it are acknowledged, while its next page arrives. That
    # page's slot of the process's page budget must come back, or every other table would
    # lose it for the rest of the run.
    for i in range(120):
        env.emu.insert("incident", {"short_description": f"row {i}"}, at=past(3600 - i * 30))
    big = env.emu.insert("incident", {"short_description": "x" * 1_200_000}, at=past(1500))
    # The pages before the big row's range are slow: its slice surely waits with a page on
    # the way (its own pages are not slowed).
    env.emu.faults.add(
        kind="slow", delay=0.3, times=None, table="incident",
        window=(format_ts(past(3700)), format_ts(past(1700))),
    )  # fmt: skip
    settings = env.settings(
        {"incident": {"name": "incident", "batch.size": 5}, "changes": {"name": "change_request"}},
        **{"backfill.slices": 4},
    )
    async with running(settings) as daemon:
        await poll_until(failed(daemon, "incident"))
        await poll_until(caught_up(daemon, "changes"))
        pages = daemon.pollers["incident"]._pages  # the process-wide budget itself
        assert pages is not None
        await poll_until(lambda: pages.free == pages.slots, timeout=10)
        assert big["sys_id"] in (status(daemon, "incident").last_error or "")


async def test_a_range_whose_last_page_kafka_took_only_in_part_holds_the_prefix(
    env: Env, past: Callable[[float], datetime]
) -> None:
    # 16 ranges of about 225 s over the hour. The first range's last page holds three rows and a
    # record Kafka can never take, the range's last row; the second range's pages are
    # acknowledged long before (the first range's pages are slow). The committed prefix may
    # reach the rows before the refused one, but never the second range's rows past it: a
    # restart would resume after them and the first range's rest would be lost.
    rows = [
        env.emu.insert("incident", {"short_description": f"row {i}"}, at=past(3600 - i * 30))
        for i in range(120)
    ]
    huge = env.emu.insert("incident", {"short_description": "x" * 1_200_000}, at=past(3385))
    env.emu.faults.add(
        kind="slow", delay=0.5, times=None, table="incident",
        window=(format_ts(past(3700)), format_ts(past(3380))),
    )  # fmt: skip
    settings = env.settings(
        {"incident": {"name": "incident", "batch.size": 5}}, **{"backfill.slices": 4}
    )
    async with running(settings) as daemon:
        await poll_until(failed(daemon, "incident"))
        assert huge["sys_id"] in (status(daemon, "incident").last_error or "")
    stored = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["incident"]
    assert (stored["timestamp"], stored["sys_id"]) < (huge["sys_updated_on"], huge["sys_id"])
    before = [r for r in rows if r["sys_updated_on"] < huge["sys_updated_on"]]
    assert (stored["timestamp"], stored["sys_id"]) >= (before[0]["sys_updated_on"], "")
