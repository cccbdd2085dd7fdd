"""Database views: prefixed columns, left-join blanks, no plain sys_id, read-only."""

from __future__ import annotations

from datetime import timedelta

import pytest

from snowsource.emulator import Emulator
from tests.emulator.conftest import FIXED_NOW, Client, get_json, table


def _setup(emulator: Emulator) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    with_sla = emulator.insert(
        "incident",
        {"short_description": "has sla", "priority": "1"},
        at=FIXED_NOW - timedelta(minutes=2),
    )
    without = emulator.insert(
        "incident", {"short_description": "no sla"}, at=FIXED_NOW - timedelta(minutes=1)
    )
    sla = emulator.insert(
        "task_sla", {"task": with_sla["sys_id"], "stage": "in_progress", "sla": "P1 resolution"}
    )
    emulator.create_view(
        "incident_sla", {"inc": "incident", "sla": "task_sla"}, join=("inc_sys_id", "sla_task")
    )
    return with_sla, without, sla


async def test_view_columns_and_left_join(emulator: Emulator, emulator_client: Client) -> None:
    with_sla, without, sla = _setup(emulator)
    rows, headers = await table(
        emulator_client,
        "incident_sla",
        sysparm_query="inc_sys_updated_on>2026-09-29 06:00:00^ORDERBYinc_sys_updated_on",
        sysparm_display_value="all",
    )
    assert headers["X-Total-Count"] == "2"
    first, second = rows
    assert "sys_id" not in first
    assert all(key.startswith(("inc_", "sla_")) for key in first)
    assert first["inc_sys_id"]["value"] == with_sla["sys_id"]
    assert first["sla_sys_id"]["value"] == sla["sys_id"]
    assert first["inc_priority"] == {"display_value": "1 - Critical", "value": "1"}
    assert first["sla_stage"] == {"display_value": "In progress", "value": "in_progress"}
    assert first["sla_task"]["value"] == with_sla["sys_id"]
    # Left join: the incident without an SLA has blank sla_ columns.
    assert second["inc_sys_id"]["value"] == without["sys_id"]
    assert second["sla_sys_id"] == {"display_value": "", "value": ""}
    assert second["sla_task"] == {"display_value": "", "value": ""}
    single, _ = await get_json(
        emulator_client,
        f"/api/now/table/incident_sla/{with_sla['sys_id']}",
        {"sysparm_fields": "inc_number,sla_sla"},
    )
    assert single["result"] == {"inc_number": with_sla["number"], "sla_sla": "P1 resolution"}


async def test_view_is_read_only_and_tracks_underlying_tables(
    emulator: Emulator, emulator_client: Client
) -> None:
    with_sla, _, _ = _setup(emulator)
    with pytest.raises(ValueError, match="read-only"):
        emulator.insert("incident_sla", {})
    emulator.update("incident", with_sla["sys_id"], {"short_description": "renamed"})
    rows, _ = await table(
        emulator_client,
        "incident_sla",
        sysparm_query="sla_sys_idISNOTEMPTY",
        sysparm_fields="inc_short_description,inc_sys_mod_count",
    )
    assert rows == [{"inc_short_description": "renamed", "inc_sys_mod_count": "1"}]
    emulator.create_view(
        "incident_sla_inner",
        {"inc": "incident", "sla": "task_sla"},
        join=[("inc_sys_id", "sla_task")],
        left_join=False,
    )
    rows, _ = await table(emulator_client, "incident_sla_inner")
    assert len(rows) == 1
    emulator.create_view(
        "incident_sla_capped",
        {"inc": "incident", "sla": "task_sla"},
        join=("sla_task", "inc_sys_id"),
        max_records=1,
    )
    rows, headers = await table(emulator_client, "incident_sla_capped")
    assert len(rows) == 1
    assert headers["X-Total-Count"] == "1"


async def test_sys_db_view_table_lists_each_views_tables_and_prefixes(
    emulator: Emulator, emulator_client: Client
) -> None:
    _setup(emulator)
    objects, _ = await table(
        emulator_client,
        "sys_db_object",
        sysparm_query="name=incident_sla",
        sysparm_fields="sys_id,sys_class_name",
    )
    assert objects == [{"sys_id": objects[0]["sys_id"], "sys_class_name": "sys_db_view"}]
    rows, _ = await table(
        emulator_client,
        "sys_db_view_table",
        sysparm_query=f"view={objects[0]['sys_id']}^ORDERBYorder",
        sysparm_fields="view,table,variable_prefix,order,left_join",
        sysparm_exclude_reference_link="true",
    )
    view = objects[0]["sys_id"]
    assert rows == [
        {
            "view": view,
            "table": "incident",
            "variable_prefix": "inc",
            "order": "100",
            "left_join": "false",
        },
        {
            "view": view,
            "table": "task_sla",
            "variable_prefix": "sla",
            "order": "200",
            "left_join": "true",
        },
    ]
    # A view has no dictionary rows of its own: its columns are its tables'.
    entries, _ = await table(emulator_client, "sys_dictionary", sysparm_query="name=incident_sla")
    assert entries == []
