"""Writes and time: deletes with audit rows, bursts, late visibility, replica lag, schema tables."""

from __future__ import annotations

from datetime import timedelta

import pytest

from snowsource.emulator import Emulator
from tests.emulator.conftest import FIXED_NOW, Client, get_json, table


async def test_delete_writes_sys_audit_delete(emulator: Emulator, emulator_client: Client) -> None:
    row = emulator.insert("incident", {"short_description": "bye"})
    emulator.clock.advance(30)
    emulator.delete("incident", row["sys_id"])
    rows, _ = await table(emulator_client, "incident")
    assert rows == []
    await get_json(emulator_client, f"/api/now/table/incident/{row['sys_id']}", status=404)
    audit, _ = await table(
        emulator_client,
        "sys_audit_delete",
        sysparm_query="tablename=incident^ORDERBYsys_created_on",
        sysparm_fields="tablename,documentkey,sys_created_on,display_value",
    )
    assert audit == [
        {
            "tablename": "incident",
            "documentkey": row["sys_id"],
            "sys_created_on": "2026-09-29 07:00:30",
            "display_value": row["number"],
        }
    ]
    with pytest.raises(KeyError):
        emulator.delete("incident", row["sys_id"])
    # Tables flagged no_audit_delete leave no trace.
    emulator.create_table("u_scratch", {"u_name": "string"}, no_audit_delete=True)
    scratch = emulator.insert("u_scratch", {"u_name": "tmp"})
    emulator.delete("u_scratch", scratch["sys_id"])
    assert len(emulator.rows("sys_audit_delete")) == 1


async def test_same_second_burst(emulator: Emulator, emulator_client: Client) -> None:
    at = FIXED_NOW - timedelta(seconds=10, microseconds=-250_000)
    burst = emulator.burst("incident", n=2500, at=at)
    assert len({r["sys_id"] for r in burst}) == 2500
    assert {r["sys_updated_on"] for r in burst} == {"2026-09-29 06:59:50"}
    _, headers = await table(
        emulator_client,
        "incident",
        sysparm_query="sys_updated_on=2026-09-29 06:59:50",
        sysparm_limit="1",
        sysparm_fields="sys_id",
    )
    assert headers["X-Total-Count"] == "2500"
    # Updates can burst too: many rows moved into one second.
    for row in burst[:100]:
        emulator.update("incident", row["sys_id"], {"state": "2"}, at=FIXED_NOW)
    _, headers = await table(
        emulator_client,
        "incident",
        sysparm_query="sys_updated_on=2026-09-29 07:00:00",
        sysparm_limit="1",
    )
    assert headers["X-Total-Count"] == "100"


async def test_late_visible_rows(emulator: Emulator, emulator_client: Client) -> None:
    t0 = FIXED_NOW - timedelta(seconds=5)
    late = emulator.insert(
        "incident",
        {"short_description": "long transaction"},
        at=t0,
        visible_at=FIXED_NOW + timedelta(seconds=20),
    )
    assert emulator.rows("incident")[0]["sys_id"] == late["sys_id"]  # stored, just not visible
    rows, _ = await table(emulator_client, "incident")
    assert rows == []
    await get_json(emulator_client, f"/api/now/table/incident/{late['sys_id']}", status=404)
    emulator.clock.advance(19)
    assert (await table(emulator_client, "incident"))[0] == []
    emulator.clock.advance(1)
    rows, _ = await table(emulator_client, "incident", sysparm_fields="sys_updated_on")
    assert rows == [{"sys_updated_on": "2026-09-29 06:59:55"}]  # stamped at t0, seen at t0+25
    # A late-visible update: the old version stays visible until then.
    emulator.update(
        "incident",
        late["sys_id"],
        {"short_description": "v2"},
        visible_at=emulator.clock.now() + timedelta(seconds=10),
    )
    rows, _ = await table(emulator_client, "incident", sysparm_fields="short_description")
    assert rows == [{"short_description": "long transaction"}]
    emulator.clock.advance(10)
    rows, _ = await table(emulator_client, "incident", sysparm_fields="short_description")
    assert rows == [{"short_description": "v2"}]


async def test_query_category_reads_a_lagging_replica(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.replica_lag(30)
    row = emulator.insert("incident", {"short_description": "v1"})
    emulator.clock.advance(40)
    emulator.update("incident", row["sys_id"], {"short_description": "v2"})
    emulator.insert("incident", {"short_description": "new"})
    primary, _ = await table(
        emulator_client,
        "incident",
        sysparm_query="ORDERBYshort_description",
        sysparm_fields="short_description",
    )
    assert [r["short_description"] for r in primary] == ["new", "v2"]
    replica, _ = await table(
        emulator_client,
        "incident",
        sysparm_query_category="replica",
        sysparm_fields="short_description",
    )
    assert replica == [{"short_description": "v1"}]
    emulator.clock.advance(30)
    replica, _ = await table(
        emulator_client,
        "incident",
        sysparm_query_category="replica",
        sysparm_query="ORDERBYshort_description",
        sysparm_fields="short_description",
    )
    assert [r["short_description"] for r in replica] == ["new", "v2"]


async def test_append_only_table_has_no_update_fields(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.insert(
        "sys_audit",
        {"tablename": "incident", "fieldname": "state", "oldvalue": "1", "newvalue": "2"},
    )
    rows, _ = await table(emulator_client, "sys_audit")
    assert "sys_created_on" in rows[0]
    assert "sys_updated_on" not in rows[0]
    assert "sys_mod_count" not in rows[0]


async def test_parent_table_reads_children_and_schema_tables(
    emulator: Emulator, emulator_client: Client
) -> None:
    inc = emulator.insert("incident", {"short_description": "i"})
    chg = emulator.insert("change_request", {"short_description": "c"})
    rows, _ = await table(
        emulator_client,
        "task",
        sysparm_query="ORDERBYnumber",
        sysparm_fields="number,sys_class_name,caller_id",
    )
    assert rows == [
        {"number": chg["number"], "sys_class_name": "change_request"},
        {"number": inc["number"], "sys_class_name": "incident"},
    ]
    objects, _ = await table(
        emulator_client,
        "sys_db_object",
        sysparm_query="name=incident",
        sysparm_fields="name,super_class.name",
    )
    assert objects == [{"name": "incident", "super_class.name": "task"}]
    columns, _ = await table(
        emulator_client,
        "sys_dictionary",
        sysparm_query="nameINincident,task^element=number^ORelement=caller_id",
        sysparm_fields="name,element",
    )
    assert sorted((c["name"], c["element"]) for c in columns) == [
        ("incident", "caller_id"),
        ("task", "number"),
    ]


async def test_create_table_and_write_validation(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.create_table(
        "u_thing",
        fields={"u_name": "string", "u_count": "integer", "u_owner": "reference:sys_user"},
    )
    emulator.insert("u_thing", {"u_name": "a", "u_count": 9})
    emulator.insert("u_thing", {"u_name": "b", "u_count": 10})
    rows, _ = await table(
        emulator_client,
        "u_thing",
        sysparm_query="u_count>9",
        sysparm_fields="u_name,u_count,u_owner",
    )
    assert rows == [{"u_name": "b", "u_count": "10", "u_owner": ""}]
    with pytest.raises(ValueError, match="unknown field"):
        emulator.insert("u_thing", {"u_nmae": "typo"})
    with pytest.raises(KeyError):
        emulator.insert("u_nothing", {})
