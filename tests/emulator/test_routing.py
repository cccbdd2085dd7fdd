"""URL forms, HEAD, envelopes, status codes, the Date header and the request journal."""

from __future__ import annotations

from datetime import timedelta
from email.utils import parsedate_to_datetime

import aiohttp
import orjson
import pytest

from snowsource.emulator import Emulator
from tests.emulator.conftest import AUTH, FIXED_NOW, Client, get_json, table

PATHS = ("/api/now/table", "/api/now/v1/table", "/api/now/v2/table")


@pytest.mark.parametrize("prefix", PATHS)
async def test_list_and_single_record_on_every_url_form(
    emulator: Emulator, emulator_client: Client, prefix: str
) -> None:
    row = emulator.insert("incident", {"short_description": "printer on fire", "priority": "1"})
    body, _ = await get_json(emulator_client, f"{prefix}/incident")
    assert [r["sys_id"] for r in body["result"]] == [row["sys_id"]]
    one, _ = await get_json(emulator_client, f"{prefix}/incident/{row['sys_id']}")
    assert isinstance(one["result"], dict)
    assert one["result"]["short_description"] == "printer on fire"


@pytest.mark.parametrize("suffix", ["", "/{sys_id}"])
async def test_head_has_headers_but_no_body(
    emulator: Emulator, emulator_client: Client, suffix: str
) -> None:
    row = emulator.insert("incident", {"short_description": "x"})
    path = "/api/now/table/incident" + suffix.format(sys_id=row["sys_id"])
    async with emulator_client.head(path, headers=AUTH) as resp:
        assert resp.status == 200
        assert await resp.read() == b""
        assert resp.headers["Content-Type"].startswith("application/json")
        if not suffix:
            assert resp.headers["X-Total-Count"] == "1"
    async with emulator_client.head("/api/now/table/nope", headers=AUTH) as resp:
        assert resp.status == 400


async def test_empty_list_v2_and_latest_200_v1_404(
    emulator: Emulator, emulator_client: Client
) -> None:
    for prefix in ("/api/now/table", "/api/now/v2/table"):
        body, _ = await get_json(emulator_client, f"{prefix}/incident")
        assert body == {"result": []}
    body, _ = await get_json(emulator_client, "/api/now/v1/table/incident", status=404)
    assert body == {
        "error": {
            "message": "No Record found",
            "detail": "Record doesn't exist or ACL restricts the record retrieval",
        },
        "status": "failure",
    }
    emulator.v1_empty_list_404 = False
    body, _ = await get_json(emulator_client, "/api/now/v1/table/incident")
    assert body == {"result": []}


async def test_error_envelopes(emulator_client: Client) -> None:
    body, _ = await get_json(emulator_client, "/api/now/table/u_missing", status=400)
    assert body == {
        "error": {"message": "Invalid table u_missing", "detail": "Table u_missing does not exist"},
        "status": "failure",
    }
    body, _ = await get_json(emulator_client, "/api/now/table/incident/" + "0" * 32, status=404)
    assert body["error"]["message"] == "No Record found"
    assert body["status"] == "failure"
    body, _ = await get_json(emulator_client, "/api/now/nothing/here", status=400)
    assert body["status"] == "failure"
    assert body["error"]["detail"] is None
    body, _ = await get_json(
        emulator_client,
        "/api/now/table/incident",
        {"sysparm_query": "RLQUERYx^ENDRLQUERY"},
        status=400,
    )
    assert body["error"]["message"] == "Invalid query"


async def test_every_value_is_a_string(emulator: Emulator, emulator_client: Client) -> None:
    emulator.seed(tables=("incident",), rows=20)
    rows, _ = await table(emulator_client, "incident", sysparm_exclude_reference_link="true")
    assert len(rows) == 20
    for row in rows:
        assert all(isinstance(v, str) for v in row.values()), row


async def test_date_header_follows_the_emulator_clock(
    emulator: Emulator, emulator_client: Client
) -> None:
    _, headers = await get_json(emulator_client, "/api/now/table/incident")
    assert headers["Date"] == "Tue, 29 Sep 2026 07:00:00 GMT"
    emulator.clock.advance(90.7)
    _, headers = await get_json(emulator_client, "/api/now/table/incident")
    assert parsedate_to_datetime(headers["Date"]) == FIXED_NOW + timedelta(seconds=90)
    # Errors carry it too.
    async with emulator_client.get("/api/now/table/incident") as resp:
        assert resp.status == 401
        assert resp.headers["Date"] == "Tue, 29 Sep 2026 07:01:30 GMT"


async def test_unsupported_accept_is_406(emulator_client: Client) -> None:
    headers = {**AUTH, "Accept": "text/csv"}
    body, _ = await get_json(
        emulator_client, "/api/now/table/incident", status=406, headers=headers
    )
    assert body["status"] == "failure"


async def test_journal_records_requests(emulator: Emulator, emulator_client: Client) -> None:
    await get_json(emulator_client, "/api/now/table/incident", {"sysparm_limit": "5"})
    await get_json(emulator_client, "/api/now/table/incident", headers={}, status=401)
    first, second = emulator.journal
    assert (first.method, first.path, first.status, first.user) == (
        "GET",
        "/api/now/table/incident",
        200,
        "admin",
    )
    assert first.params == {"sysparm_limit": "5"}
    assert first.table == "incident"
    assert first.at == FIXED_NOW
    assert second.status == 401
    assert second.user is None
    assert second.wall >= first.wall
    assert len(emulator.journal.for_table("incident")) == 2
    emulator.journal.clear()
    assert list(emulator.journal) == []


async def test_http_writes_and_view_read_only(emulator: Emulator, emulator_client: Client) -> None:
    async with emulator_client.post(
        "/api/now/table/incident",
        headers=AUTH,
        data=orjson.dumps({"short_description": "via http", "bogus": "ignored"}),
    ) as resp:
        assert resp.status == 201
        created = (await resp.json())["result"]
    assert created["short_description"] == "via http"
    assert created["sys_created_by"] == "admin"
    assert "bogus" not in created
    path = f"/api/now/table/incident/{created['sys_id']}"
    async with emulator_client.patch(path, headers=AUTH, data=orjson.dumps({"state": "2"})) as resp:
        assert resp.status == 200
        assert (await resp.json())["result"]["sys_mod_count"] == "1"
    async with emulator_client.delete(path, headers=AUTH) as resp:
        assert resp.status == 204
    assert emulator.get("incident", created["sys_id"]) is None
    emulator.create_view(
        "incident_sla", {"inc": "incident", "sla": "task_sla"}, join=("inc_sys_id", "sla_task")
    )
    async with emulator_client.post(
        "/api/now/table/incident_sla", headers=AUTH, data=b"{}"
    ) as resp:
        assert resp.status == 403
        assert "read-only" in (await resp.json())["error"]["detail"]


async def test_served_on_a_real_port(emulator: Emulator, emulator_url: str) -> None:
    emulator.insert("incident", {"short_description": "over tcp"})
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{emulator_url}/api/now/v2/table/incident", headers=AUTH) as resp,
    ):
        assert resp.status == 200
        body = await resp.json()
    assert body["result"][0]["short_description"] == "over tcp"
    assert body["result"][0]["sys_domain"]["link"].startswith(emulator_url + "/api/now/table/")
