"""Table, row and field ACLs, and domain separation."""

from __future__ import annotations

import aiohttp

from snowsource.emulator import Emulator
from tests.emulator.conftest import Client, get_json, table


def _sid(n: int) -> str:
    return f"{n:032x}"


async def test_deny_table_is_403(emulator: Emulator, emulator_client: Client) -> None:
    row = emulator.insert("incident", {})
    emulator.deny_table("admin", "incident")
    body, _ = await get_json(emulator_client, "/api/now/table/incident", status=403)
    assert body == {
        "error": {"message": "Insufficient rights to query records", "detail": None},
        "status": "failure",
    }
    await get_json(emulator_client, f"/api/now/table/incident/{row['sys_id']}", status=403)
    await get_json(emulator_client, "/api/now/table/change_request")


async def test_row_acl_applies_after_the_limit(emulator: Emulator, emulator_client: Client) -> None:
    for n in range(30):
        emulator.insert("incident", {"sys_id": _sid(n), "priority": "1" if n < 12 else "3"})
    emulator.hide_rows("incident", lambda row: row["priority"] == "1")
    pages = []
    links = []
    for offset in (0, 10, 20):
        rows, headers = await table(
            emulator_client,
            "incident",
            sysparm_query="ORDERBYsys_id",
            sysparm_limit="10",
            sysparm_offset=str(offset),
            sysparm_fields="sys_id",
        )
        assert headers["X-Total-Count"] == "30"  # counted before the ACL
        pages.append([r["sys_id"] for r in rows])
        links.append(headers["Link"])
    assert pages[0] == []  # empty page although more readable rows follow
    assert 'rel="next"' in links[0]  # ...and the Link header says so
    assert pages[1] == [_sid(n) for n in range(12, 20)]  # short page
    assert pages[2] == [_sid(n) for n in range(20, 30)]
    await get_json(emulator_client, f"/api/now/table/incident/{_sid(0)}", status=404)
    await get_json(emulator_client, f"/api/now/table/incident/{_sid(12)}")


async def test_row_and_field_acls_can_target_one_user(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.insert("incident", {"priority": "1", "description": "d"})
    emulator.add_user("itil", "pw")
    emulator.hide_rows("incident", lambda row: True, user="itil")
    emulator.hide_field("incident", "description", user="admin")
    itil = {"Authorization": aiohttp.encode_basic_auth("itil", "pw")}
    body, headers = await get_json(emulator_client, "/api/now/table/incident", headers=itil)
    assert body["result"] == []
    assert headers["X-Total-Count"] == "1"
    rows, _ = await table(emulator_client, "incident")
    assert len(rows) == 1
    assert "description" not in rows[0]
    emulator.clear_acls()
    rows, _ = await table(emulator_client, "incident")
    assert rows[0]["description"] == "d"


async def test_domain_separation_and_query_no_domain(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.insert("incident", {"sys_id": _sid(1), "sys_domain": "global"})
    emulator.insert("incident", {"sys_id": _sid(2), "sys_domain": "TOP/ACME"})
    emulator.insert("incident", {"sys_id": _sid(3), "sys_domain": "TOP/ACME/EMEA"})
    emulator.insert("incident", {"sys_id": _sid(4), "sys_domain": "TOP/OTHER"})
    emulator.set_domains("admin", ("TOP/ACME",))
    rows, headers = await table(
        emulator_client, "incident", sysparm_query="ORDERBYsys_id", sysparm_fields="sys_id"
    )
    assert [r["sys_id"] for r in rows] == [_sid(1), _sid(2), _sid(3)]
    assert headers["X-Total-Count"] == "3"  # excluded rows are not counted either
    await get_json(emulator_client, f"/api/now/table/incident/{_sid(4)}", status=404)
    # An admin may lift the restriction.
    rows, _ = await table(emulator_client, "incident", sysparm_query_no_domain="true")
    assert len(rows) == 4
    await get_json(
        emulator_client, f"/api/now/table/incident/{_sid(4)}", {"sysparm_query_no_domain": "true"}
    )
    # A plain user's request for it is ignored; the dedicated role honours it.
    emulator.add_user("plain", "pw", domains=("TOP/ACME",))
    emulator.add_user("integ", "pw", domains=("TOP/ACME",), roles=("query_no_domain_table_api",))
    for name, expected in (("plain", 3), ("integ", 4)):
        headers = {"Authorization": aiohttp.encode_basic_auth(name, "pw")}
        body, _ = await get_json(
            emulator_client,
            "/api/now/table/incident",
            {"sysparm_query_no_domain": "true"},
            headers=headers,
        )
        assert len(body["result"]) == expected, name
