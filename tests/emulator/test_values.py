"""Value shapes: references, display values in the user's zone and format, choices, projection."""

from __future__ import annotations

import re
from datetime import timedelta

import aiohttp

from snowsource.emulator import Emulator
from tests.emulator.conftest import FIXED_NOW, Client, get_json, table

HEX32 = re.compile(r"[0-9a-f]{32}")


def _incident(emulator: Emulator) -> tuple[dict[str, str], dict[str, str]]:
    caller = emulator.insert("sys_user", {"user_name": "fred.luddy", "name": "Fred Luddy"})
    row = emulator.insert(
        "incident",
        {
            "short_description": "disk full",
            "priority": "1",
            "state": "2",
            "caller_id": caller["sys_id"],
            "assigned_to": "",
            "sys_mod_count": "1234",
        },
        at=FIXED_NOW - timedelta(hours=3),  # 04:00:00 UTC
    )
    return caller, row


async def test_reference_shapes_for_every_display_mode(
    emulator: Emulator, emulator_client: Client
) -> None:
    caller, row = _incident(emulator)
    uid = caller["sys_id"]
    base = str(emulator_client.make_url("/")).rstrip("/")
    link = f"{base}/api/now/table/sys_user/{uid}"
    fields = "caller_id,assigned_to,priority,sys_updated_on"
    cases = {
        ("false", "false"): ({"link": link, "value": uid}, "", "1", "2026-09-29 04:00:00"),
        ("false", "true"): (uid, "", "1", "2026-09-29 04:00:00"),
        ("true", "false"): (
            {"display_value": "Fred Luddy", "link": link},
            "",
            "1 - Critical",
            "09/28/2026 09:00:00 PM",
        ),
        ("true", "true"): ("Fred Luddy", "", "1 - Critical", "09/28/2026 09:00:00 PM"),
        ("all", "false"): (
            {"display_value": "Fred Luddy", "link": link, "value": uid},
            {"display_value": "", "value": ""},
            {"display_value": "1 - Critical", "value": "1"},
            {"display_value": "09/28/2026 09:00:00 PM", "value": "2026-09-29 04:00:00"},
        ),
        ("all", "true"): (
            {"display_value": "Fred Luddy", "value": uid},
            {"display_value": "", "value": ""},
            {"display_value": "1 - Critical", "value": "1"},
            {"display_value": "09/28/2026 09:00:00 PM", "value": "2026-09-29 04:00:00"},
        ),
    }
    for (mode, exclude), expected in cases.items():
        rows, _ = await table(
            emulator_client,
            "incident",
            sysparm_display_value=mode,
            sysparm_exclude_reference_link=exclude,
            sysparm_fields=fields,
        )
        got = rows[0]
        assert (
            got["caller_id"],
            got["assigned_to"],
            got["priority"],
            got["sys_updated_on"],
        ) == expected, (mode, exclude)
    assert row["sys_id"] == (await table(emulator_client, "incident"))[0][0]["sys_id"]


async def test_display_values_use_each_users_zone_and_format(
    emulator: Emulator, emulator_client: Client
) -> None:
    _incident(emulator)
    emulator.add_user("berlin.user", "pw", tz="Europe/Berlin")  # yyyy-MM-dd HH:mm:ss
    headers = {"Authorization": aiohttp.encode_basic_auth("berlin.user", "pw")}
    body, _ = await get_json(
        emulator_client,
        "/api/now/table/incident",
        {"sysparm_display_value": "true", "sysparm_fields": "sys_created_on,state,sys_mod_count"},
        headers=headers,
    )
    # 04:00 UTC is 06:00 CEST; state 2 on incident is "In Progress"; integers are grouped.
    assert body["result"] == [
        {"sys_created_on": "2026-09-29 06:00:00", "state": "In Progress", "sys_mod_count": "1,234"}
    ]
    # Changing the user's preference on its sys_user row changes the display at once.
    berlin = emulator.user("berlin.user")
    emulator.update(
        "sys_user", berlin.sys_id, {"time_zone": "Asia/Kolkata", "date_format": "dd.MM.yyyy"}
    )
    body, _ = await get_json(
        emulator_client,
        "/api/now/table/incident",
        {"sysparm_display_value": "true", "sysparm_fields": "sys_created_on"},
        headers=headers,
    )
    assert body["result"] == [{"sys_created_on": "29.09.2026 09:30:00"}]


async def test_choice_labels_differ_per_table(emulator: Emulator, emulator_client: Client) -> None:
    emulator.insert("change_request", {"state": "-1", "type": "emergency"})
    rows, _ = await table(
        emulator_client, "change_request", sysparm_display_value="all", sysparm_fields="state,type"
    )
    assert rows == [
        {
            "state": {"display_value": "Implement", "value": "-1"},
            "type": {"display_value": "Emergency", "value": "emergency"},
        }
    ]


async def test_fields_projection_unknown_ignored_and_dot_walk(
    emulator: Emulator, emulator_client: Client
) -> None:
    caller, _ = _incident(emulator)
    emulator.insert("incident", {"short_description": "no caller"})
    rows, _ = await table(
        emulator_client,
        "incident",
        sysparm_fields="number, caller_id.name,caller_id.user_name,u_typo,caller_id.nope",
        sysparm_query="ORDERBYshort_description",
    )
    assert [list(r) for r in rows] == [["number", "caller_id.name", "caller_id.user_name"]] * 2
    assert rows[0]["caller_id.name"] == "Fred Luddy"
    assert rows[0]["caller_id.user_name"] == "fred.luddy"
    assert rows[1]["caller_id.name"] == ""
    # Dot-walks work in queries too.
    rows, _ = await table(
        emulator_client,
        "incident",
        sysparm_query="caller_id.name=Fred Luddy",
        sysparm_fields="caller_id",
    )
    assert rows == [
        {"caller_id": {"link": rows[0]["caller_id"]["link"], "value": caller["sys_id"]}}
    ]


async def test_field_acl_hides_fields(emulator: Emulator, emulator_client: Client) -> None:
    row = emulator.insert("incident", {"short_description": "secret", "description": "hush"})
    emulator.hide_field("incident", "description")
    rows, _ = await table(emulator_client, "incident")
    assert "description" not in rows[0]
    assert rows[0]["short_description"] == "secret"
    rows, _ = await table(emulator_client, "incident", sysparm_fields="description,number")
    assert rows == [{"number": row["number"]}]
    single, _ = await get_json(emulator_client, f"/api/now/table/incident/{row['sys_id']}")
    assert "description" not in single["result"]


async def test_integration_user_time_zone_is_readable(emulator_client: Client) -> None:
    rows, _ = await table(
        emulator_client,
        "sys_user",
        sysparm_query="user_name=admin",
        sysparm_fields="time_zone,date_format,time_format",
    )
    assert rows == [
        {
            "time_zone": "America/Los_Angeles",
            "date_format": "MM/dd/yyyy",
            "time_format": "hh:mm:ss a",
        }
    ]


async def test_system_fields(emulator: Emulator, emulator_client: Client) -> None:
    row = emulator.insert("incident", {"short_description": "a"}, by="fred")
    assert HEX32.fullmatch(row["sys_id"])
    assert row["sys_created_on"] == row["sys_updated_on"] == "2026-09-29 07:00:00"
    assert row["sys_mod_count"] == "0"
    assert row["sys_class_name"] == "incident"
    assert row["number"].startswith("INC")
    emulator.clock.advance(5.9)
    emulator.update("incident", row["sys_id"], {"state": "2"}, by="beth")
    emulator.update("incident", row["sys_id"], {"state": "3"}, by="beth")
    got, _ = await get_json(emulator_client, f"/api/now/table/incident/{row['sys_id']}")
    result = got["result"]
    assert result["sys_mod_count"] == "2"
    assert result["sys_updated_on"] == "2026-09-29 07:00:05"
    assert result["sys_created_on"] == "2026-09-29 07:00:00"
    assert (result["sys_created_by"], result["sys_updated_by"]) == ("fred", "beth")
    assert result["sys_domain"]["value"] == "global"
    assert result["sys_domain"]["link"].endswith("/api/now/table/sys_user_group/global")
    # autoSysFields(false): nothing a timestamp reader could notice.
    emulator.clock.advance(60)
    emulator.update("incident", row["sys_id"], {"state": "6"}, auto_sys_fields=False)
    again = emulator.get("incident", row["sys_id"])
    assert again is not None
    assert (again["state"], again["sys_mod_count"], again["sys_updated_on"]) == (
        "6",
        "2",
        "2026-09-29 07:00:05",
    )
