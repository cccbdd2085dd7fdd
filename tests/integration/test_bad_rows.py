"""Rows whose id could never be a cursor FAIL their table before anything past them is sent.

The same rule as every offset (``cursor_id_problem``): a sys_id field holds 32 lowercase hex
characters, any other id field at most 255 characters without ``^`` or control characters.
Emitting such a row would commit an offset that no restart could load. Real daemon, real Kafka,
rows planted in the emulator.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from snowsource.core.table_status import TableState
from snowsource.engine.supervisor import Daemon
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, keys_of, read_offsets, read_topic, running, status
from tests.polling import poll_until


def failed(daemon: Daemon, alias: str) -> Callable[[], bool]:
    return lambda: status(daemon, alias).state == TableState.FAILED


async def test_unusable_ids_fail_the_table_and_nothing_past_them_is_committed(
    env: Env, past: Callable[[float], datetime]
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
        }
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

    assert keys_of(await read_topic(env.bootstrap, env.topic("incident"))) == [good["sys_id"]]
    assert keys_of(await read_topic(env.bootstrap, env.topic("things"))) == [thing_good["u_key"]]
    assert after["sys_id"] not in huge_error
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    assert offsets["incident"]["sys_id"] == good["sys_id"]
    assert offsets["u_thing"]["sys_id"] == "k1"
