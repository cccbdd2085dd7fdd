"""Issue 23 items 5, 6 and 8: the delete stream against the emulator and the real broker."""

from __future__ import annotations

from snowsource.core.table_status import TableState
from tests.integration.conftest import Env
from tests.integration.engine import (
    caught_up,
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
