"""Issue 23 items 5, 6 and 8: the delete stream against the emulator and the real broker."""

from __future__ import annotations

from collections import Counter

import pytest
from structlog.testing import capture_logs

from snowsource.core.table_status import TableState
from tests.integration.conftest import Env
from tests.integration.engine import (
    caught_up,
    read_offsets,
    read_topic,
    running,
    status,
    sweeps_after,
)
from tests.polling import poll_until

INCIDENT = {"incident": {"name": "incident", "deletes": "audit"}}


async def test_a_row_deleted_and_re_created_between_two_sweeps_ends_as_its_upsert(
    env: Env,
) -> None:
    """Item 5. Both the delete and the re-insert with the same sys_id (an import coalescing on
    sys_id) land before the table's next sweep, so that sweep emits the re-created row and only
    then may the delete stream read the audit row: its tombstone came after the upsert and a
    compacted consumer lost a live row. Now the tombstone of a row that exists again is left
    out; a row deleted for good still gets one."""
    env.emu.seed(tables=("incident",), rows=10)
    rows = env.emu.rows("incident")
    again, gone = rows[0]["sys_id"], rows[1]["sys_id"]
    async with running(env.settings(INCIDENT)) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.deletes"))
        # No await in between: no sweep of either stream can run between these writes.
        env.emu.delete("incident", again)
        env.emu.insert("incident", {"sys_id": again, "short_description": "re-imported"})
        env.emu.delete("incident", gone)
        await poll_until(lambda: status(daemon, "incident.deletes").rows_emitted >= 1)
        await sweeps_after(daemon, "incident.deletes", 2)
        assert status(daemon, "incident.deletes").state == TableState.RUNNING
        assert status(daemon, "incident.deletes").rows_emitted == 1

    records = await read_topic(env.bootstrap, env.topic("incident"))
    last = {r.key: r for r in records}
    assert last[gone.encode()].value is None
    survivor = last[again.encode()]
    assert survivor.value is not None, "the re-created row's last record is a tombstone"
    assert b"re-imported" in survivor.value


RE_CHECKED = "deleted rows exist again (re-created with the same id)"


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
async def test_re_created_rows_move_the_delete_streams_offset_and_are_asked_about_once(
    env: Env, exactly_once: bool
) -> None:
    """Issue 27 (SPEC §15.4): five rows deleted and re-created with the same sys_id, each
    between sweeps. Every audit row is superseded, so the delete stream emits nothing; its
    offset still reaches the last audit row, and the "do these rows exist again?" request and
    its log line come once per audit row, although every sweep re-reads the rows of its
    overlap window (10 s, longer than this test). Sweeps that move nothing write no offset."""
    env.emu.seed(tables=("incident",), rows=10)
    again = [row["sys_id"] for row in env.emu.rows("incident")[:5]]
    settings = env.settings(INCIDENT, **{"exactly.once": exactly_once})
    with capture_logs() as logs:
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident", "incident.deletes"))
            for sys_id in again:
                env.emu.delete("incident", sys_id)
                env.emu.insert("incident", {"sys_id": sys_id, "short_description": "re-imported"})
                await sweeps_after(daemon, "incident.deletes")
            audit = sorted(
                (row["sys_created_on"], row["sys_id"])
                for row in env.emu.rows("sys_audit_delete")
                if row["tablename"] == "incident"
            )
            assert len(audit) == 5
            deletes = status(daemon, "incident.deletes")

            def at_last_audit_row() -> bool:
                committed = deletes.committed
                return (
                    committed is not None and (committed.timestamp, committed.sys_id) == (audit[-1])
                )

            await poll_until(at_last_audit_row)
            writes = len(await read_topic(env.bootstrap, env.offsets_topic))
            await sweeps_after(daemon, "incident.deletes", 5)
            assert len(await read_topic(env.bootstrap, env.offsets_topic)) == writes
            assert deletes.rows_emitted == 0
            assert deletes.state == TableState.RUNNING

    rechecks = [
        request.params.get("sysparm_query", "")
        for request in env.emu.journal.for_table("incident")
        if "sys_idIN" in request.params.get("sysparm_query", "")
    ]
    assert Counter(key for query in rechecks for key in again if key in query) == dict.fromkeys(
        again, 1
    )
    logged = Counter(
        key for e in logs if e["event"].startswith(RE_CHECKED) for key in e["documentkeys"]
    )
    assert logged == dict.fromkeys(again, 1)
    offset = (await read_offsets(env.bootstrap, env.offsets_topic, env.name))["sys_audit_delete"]
    assert (offset["timestamp"], offset["sys_id"], offset["phase"]) == (*audit[-1], "stream")
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    records = await read_topic(env.bootstrap, env.topic("incident"), isolation_level=isolation)
    assert all(record.value is not None for record in records), "no tombstone"
