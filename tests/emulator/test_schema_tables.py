"""``sys_db_object`` and ``sys_dictionary`` describe the seeded tables as their rows really are."""

from __future__ import annotations

from typing import Any

import pytest

from snowsource.core.dictionary import (
    DB_OBJECT_FIELDS,
    DICTIONARY_FIELDS,
    columns,
    dictionary_query,
    lineage,
)
from snowsource.core.typed import convert_row
from snowsource.emulator import Emulator
from tests.emulator.conftest import Client, table

SEEDED = ("incident", "change_request", "cmdb_ci", "cmdb_ci_server", "task_sla", "sys_user")


async def _columns(client: Client, name: str, **params: str) -> dict[str, str]:
    """What a typed reader learns about ``name`` through the Table API alone."""
    objects, _ = await table(
        client,
        "sys_db_object",
        sysparm_fields=",".join(DB_OBJECT_FIELDS),
        sysparm_limit="10000",
        **params,
    )
    chain = lineage(name, objects)
    rows, _ = await table(
        client,
        "sys_dictionary",
        sysparm_query=dictionary_query(chain),
        sysparm_fields=",".join(DICTIONARY_FIELDS),
        sysparm_limit="10000",
        **params,
    )
    return columns(chain, rows)


@pytest.fixture
def seeded(emulator: Emulator) -> Emulator:
    emulator.seed(("incident", "change_request", "cmdb_ci", "task_sla"), rows=40)
    return emulator


async def test_super_class_references_build_the_hierarchy(
    seeded: Emulator, emulator_client: Client
) -> None:
    objects, _ = await table(
        emulator_client, "sys_db_object", sysparm_fields="name,super_class.name"
    )
    parents = {o["name"]: o["super_class.name"] for o in objects}
    assert parents["incident"] == "task"
    assert parents["change_request"] == "task"
    assert parents["cmdb_ci_server"] == "cmdb_ci"
    assert parents["task"] == ""
    assert parents["cmdb_ci"] == ""
    for name in ("incident", "change_request"):
        links, _ = await table(
            emulator_client,
            "sys_db_object",
            sysparm_query=f"name={name}",
            sysparm_fields="super_class",
            sysparm_exclude_reference_link="false",
        )
        assert links[0]["super_class"]["link"].endswith(
            f"/api/now/table/sys_db_object/{links[0]['super_class']['value']}"
        )
    # The walk works on link objects as well as on raw sys_ids.
    assert await _columns(
        emulator_client, "incident", sysparm_exclude_reference_link="false"
    ) == await _columns(emulator_client, "incident")


@pytest.mark.parametrize("name", SEEDED)
async def test_dictionary_matches_the_fields_rows_have(
    seeded: Emulator, emulator_client: Client, name: str
) -> None:
    cols = await _columns(emulator_client, name)
    rows, _ = await table(emulator_client, name, sysparm_query=f"sys_class_name={name}")
    assert rows, name
    assert set(rows[0]) == set(cols)


async def test_real_internal_type_names(seeded: Emulator, emulator_client: Client) -> None:
    incident = await _columns(emulator_client, "incident")
    assert {
        k: incident[k]
        for k in (
            "sys_id",
            "number",
            "priority",
            "state",
            "category",
            "active",
            "sys_updated_on",
            "caller_id",
            "work_notes",
            "sys_mod_count",
            "sys_class_name",
            "sys_domain",
            "sys_domain_path",
        )
    } == {
        "sys_id": "GUID",
        "number": "string",
        "priority": "integer",
        "state": "integer",
        "category": "choice",
        "active": "boolean",
        "sys_updated_on": "glide_date_time",
        "caller_id": "reference",
        "work_notes": "journal_input",
        "sys_mod_count": "integer",
        "sys_class_name": "sys_class_name",
        "sys_domain": "domain_id",
        "sys_domain_path": "domain_path",
    }
    server = await _columns(emulator_client, "cmdb_ci_server")
    assert (server["cost"], server["purchase_date"], server["disk_space"], server["ram"]) == (
        "decimal",
        "glide_date",
        "float",
        "integer",
    )
    # A child redefines its parent's column without moving it: the nearest definition wins.
    task_rows, _ = await table(
        emulator_client,
        "sys_dictionary",
        sysparm_query="nameINtask,incident^element=state",
        sysparm_fields="name",
    )
    assert sorted(r["name"] for r in task_rows) == ["incident", "task"]
    # Each table has its collection row, as on an instance.
    collection, _ = await table(
        emulator_client,
        "sys_dictionary",
        sysparm_query="name=incident^internal_type=collection",
        sysparm_fields="element",
    )
    assert collection == [{"element": ""}]


@pytest.mark.parametrize("name", SEEDED)
async def test_every_seeded_value_converts_by_its_type(
    seeded: Emulator, emulator_client: Client, name: str
) -> None:
    cols = await _columns(emulator_client, name)
    rows, _ = await table(emulator_client, name, sysparm_limit="10000")
    converted: dict[str, set[type[Any]]] = {}
    for row in rows:
        typed = convert_row(row, cols)
        assert typed.unparsed == (), (name, {f: row[f] for f in typed.unparsed})
        for field, value in typed.values.items():
            converted.setdefault(cols[field], set()).add(type(value))
    assert converted["integer"] <= {int, type(None)}
    assert int in converted["integer"]
    assert converted["glide_date_time"] <= {str, type(None)}
    if "boolean" in cols.values():
        assert bool in converted["boolean"]


async def test_created_tables_are_described_too(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.create_table("u_parent", {"u_count": "integer"})
    emulator.create_table("u_child", {"u_when": "datetime"}, parent="u_parent")
    assert await _columns(emulator_client, "u_child") == {
        **await _columns(emulator_client, "u_parent"),
        "u_when": "glide_date_time",
    }
    assert (await _columns(emulator_client, "u_parent"))["u_count"] == "integer"
