"""``sys_audit_delete``: every delete recorded, served through the Table API like any table."""

from __future__ import annotations

from datetime import timedelta

import orjson

from snowsource.core.cursor import Position, page_query
from snowsource.core.deletes import AUDIT_FIELDS, audit_query, tombstone
from snowsource.emulator import Emulator
from tests.emulator.conftest import AUTH, FIXED_NOW, Client, get_json, table


async def _read_deletes(client: Client, name: str, hi: str, limit: int) -> list[dict[str, str]]:
    """Every audit row of ``name`` up to ``hi``, paged with the keyset cursor."""
    after = Position("1970-01-01 00:00:00", "")
    out: list[dict[str, str]] = []
    while True:
        query = page_query(audit_query(name), "sys_created_on", "sys_id", after, hi)
        rows, _ = await table(
            client,
            "sys_audit_delete",
            sysparm_query=query,
            sysparm_limit=str(limit),
            sysparm_fields=",".join(AUDIT_FIELDS),
        )
        out.extend(rows)
        if len(rows) < limit:
            return out
        after = Position(rows[-1]["sys_created_on"], rows[-1]["sys_id"])


async def test_deletes_page_by_created_on_and_sys_id(
    emulator: Emulator, emulator_client: Client
) -> None:
    incidents = emulator.burst("incident", 12, at=FIXED_NOW - timedelta(minutes=5))
    changes = emulator.burst("change_request", 3, at=FIXED_NOW - timedelta(minutes=5))
    deleted_at: dict[str, str] = {}
    # Seven deletes in one second (the case a timestamp-only cursor loses), then one per second.
    for row in incidents[:7]:
        emulator.delete("incident", row["sys_id"])
        deleted_at[row["sys_id"]] = "2026-09-29 07:00:00"
    for row in incidents[7:]:
        emulator.clock.advance(1)
        emulator.delete("incident", row["sys_id"])
        deleted_at[row["sys_id"]] = emulator.clock.now().strftime("%Y-%m-%d %H:%M:%S")
    for row in changes:
        emulator.delete("change_request", row["sys_id"])

    audit = await _read_deletes(emulator_client, "incident", "2026-09-29 07:00:05", limit=3)
    assert {tombstone(r, "incident").key: r["sys_created_on"] for r in audit} == deleted_at
    positions = [(r["sys_created_on"], r["sys_id"]) for r in audit]
    assert positions == sorted(positions)
    assert len(set(positions)) == 12
    assert {r["tablename"] for r in audit} == {"incident"}
    # The HI bounds the window like any keyset read: the later deletes are not read yet.
    early = await _read_deletes(emulator_client, "incident", "2026-09-29 07:00:02", limit=3)
    assert len(early) == 9
    changes_audit = await _read_deletes(
        emulator_client, "change_request", "2026-09-29 07:00:05", limit=2
    )
    assert {r["documentkey"] for r in changes_audit} == {r["sys_id"] for r in changes}


async def test_audit_row_carries_the_deleted_record(
    emulator: Emulator, emulator_client: Client
) -> None:
    row = emulator.insert("incident", {"short_description": "gone", "priority": "2"})
    emulator.clock.advance(42)
    # Deleting through the parent table records the row's own class, as the platform does.
    emulator.delete("task", row["sys_id"], by="itil.user")
    rows, _ = await table(
        emulator_client, "sys_audit_delete", sysparm_query=audit_query("incident")
    )
    assert len(rows) == 1
    audit = rows[0]
    assert audit["tablename"] == "incident"
    assert audit["documentkey"] == row["sys_id"]
    assert audit["sys_created_on"] == "2026-09-29 07:00:42"
    assert audit["sys_created_by"] == "itil.user"
    assert audit["display_value"] == row["number"]
    assert len(audit["sys_id"]) == 32
    assert audit["sys_id"] != row["sys_id"]
    assert orjson.loads(audit["payload"]) == row
    # Nothing about the delete is left on the table itself.
    assert (await table(emulator_client, "task"))[0] == []


async def test_delete_over_http_is_audited(emulator: Emulator, emulator_client: Client) -> None:
    row = emulator.insert("incident", {})
    async with emulator_client.delete(
        f"/api/now/table/incident/{row['sys_id']}", headers=AUTH
    ) as resp:
        assert resp.status == 204
    rows, _ = await table(emulator_client, "sys_audit_delete", tablename="incident")
    assert [(r["documentkey"], r["sys_created_by"]) for r in rows] == [(row["sys_id"], "admin")]


async def test_no_audit_delete_tables_leave_no_trace(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.create_table("u_scratch", {"u_name": "string"}, no_audit_delete=True)
    emulator.create_table("u_kept", {"u_name": "string"})
    scratch = emulator.insert("u_scratch", {"u_name": "tmp"})
    kept = emulator.insert("u_kept", {"u_name": "keep"})
    emulator.delete("u_scratch", scratch["sys_id"])
    emulator.delete("u_kept", kept["sys_id"])
    rows, _ = await table(emulator_client, "sys_audit_delete", sysparm_fields="tablename")
    assert rows == [{"tablename": "u_kept"}]
    # The audit table itself is never audited: it would record its own rows forever.
    assert emulator.tables["sys_audit_delete"].no_audit_delete


async def test_403_on_the_audit_table_only(emulator: Emulator, emulator_client: Client) -> None:
    row = emulator.insert("incident", {})
    emulator.delete("incident", row["sys_id"])
    emulator.insert("incident", {})
    emulator.deny_table("admin", "sys_audit_delete")
    body, _ = await get_json(emulator_client, "/api/now/table/sys_audit_delete", status=403)
    assert body["error"]["message"] == "Insufficient rights to query records"
    assert len((await table(emulator_client, "incident"))[0]) == 1
    emulator.clear_acls()
    assert len((await table(emulator_client, "sys_audit_delete"))[0]) == 1
    # A per-table fault gives the same answer for a fixed number of requests.
    emulator.faults.add(status=403, table="sys_audit_delete", times=2)
    for _ in range(2):
        await get_json(emulator_client, "/api/now/table/sys_audit_delete", status=403)
    await get_json(emulator_client, "/api/now/table/incident")
    await get_json(emulator_client, "/api/now/table/sys_audit_delete")
