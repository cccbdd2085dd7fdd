"""Basic, API key, OAuth (password, client_credentials, refresh) and Bearer on the Table API."""

from __future__ import annotations

from typing import Any

import aiohttp

from snowsource.emulator import Emulator, make_app
from tests.emulator.conftest import Client, get_json

LIST = "/api/now/table/incident"
FAILURE = {"error_description": "access_denied", "error": "server_error"}


async def _token(client: Client, form: dict[str, str], status: int = 200) -> Any:
    async with client.post("/oauth_token.do", data=form) as resp:
        assert resp.status == status, await resp.text()
        return await resp.json()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_basic_auth(emulator_client: Client) -> None:
    body, _ = await get_json(emulator_client, LIST, headers={}, status=401)
    assert body == {
        "error": {
            "message": "User Not Authenticated",
            "detail": "Required to provide Auth information",
        },
        "status": "failure",
    }
    bad = {"Authorization": aiohttp.encode_basic_auth("admin", "wrong")}
    await get_json(emulator_client, LIST, headers=bad, status=401)
    await get_json(emulator_client, LIST, headers={"Authorization": "Basic !!!"}, status=401)
    await get_json(emulator_client, LIST)


async def test_api_key(emulator: Emulator, emulator_client: Client) -> None:
    emulator.add_user("svc.reader", "unused", api_key="k-123")
    await get_json(emulator_client, LIST, headers={"x-sn-apikey": "k-123"})
    await get_json(emulator_client, LIST, {"x-sn-apikey": "k-123"}, headers={})
    await get_json(emulator_client, LIST, headers={"x-sn-apikey": "nope"}, status=401)
    assert emulator.journal[0].user == "svc.reader"


async def test_password_grant_expiry_on_the_clock_and_refresh(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.add_oauth_client("cid", "csecret")
    token = await _token(
        emulator_client,
        {
            "grant_type": "password",
            "client_id": "cid",
            "client_secret": "csecret",
            "username": "admin",
            "password": "admin",
        },
    )
    assert token["token_type"] == "Bearer"
    assert token["expires_in"] == 1800
    assert token["scope"] == "useraccount"
    await get_json(emulator_client, LIST, headers=_bearer(token["access_token"]))
    emulator.clock.advance(1799)
    await get_json(emulator_client, LIST, headers=_bearer(token["access_token"]))
    emulator.clock.advance(1)
    body, _ = await get_json(
        emulator_client, LIST, headers=_bearer(token["access_token"]), status=401
    )
    assert body["error"]["message"] == "User Not Authenticated"
    refreshed = await _token(
        emulator_client,
        {
            "grant_type": "refresh_token",
            "client_id": "cid",
            "client_secret": "csecret",
            "refresh_token": token["refresh_token"],
        },
    )
    assert refreshed["access_token"] != token["access_token"]
    assert refreshed["refresh_token"] == token["refresh_token"]
    await get_json(emulator_client, LIST, headers=_bearer(refreshed["access_token"]))
    # The refresh token itself lives 100 days.
    emulator.clock.advance(100 * 86400)
    body = await _token(
        emulator_client,
        {
            "grant_type": "refresh_token",
            "client_id": "cid",
            "client_secret": "csecret",
            "refresh_token": token["refresh_token"],
        },
        status=401,
    )
    assert body == FAILURE


async def test_client_credentials_grant_behind_a_flag(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.add_user("oauth.app", "x", tz="UTC")
    emulator.add_oauth_client("svc", "s3cret", user="oauth.app")
    form = {"grant_type": "client_credentials", "client_id": "svc", "client_secret": "s3cret"}
    token = await _token(emulator_client, form)
    assert "refresh_token" not in token
    await get_json(emulator_client, LIST, headers=_bearer(token["access_token"]))
    assert emulator.journal[-1].user == "oauth.app"
    emulator.client_credentials_enabled = False
    assert await _token(emulator_client, form, status=401) == FAILURE


async def test_token_endpoint_failures_are_generic(
    emulator: Emulator, emulator_client: Client
) -> None:
    emulator.add_oauth_client("cid", "csecret")
    bad_forms = [
        {
            "grant_type": "password",
            "client_id": "cid",
            "client_secret": "wrong",
            "username": "admin",
            "password": "admin",
        },
        {
            "grant_type": "password",
            "client_id": "cid",
            "client_secret": "csecret",
            "username": "admin",
            "password": "wrong",
        },
        {"grant_type": "client_credentials", "client_id": "cid", "client_secret": "csecret"},
        {
            "grant_type": "refresh_token",
            "client_id": "cid",
            "client_secret": "csecret",
            "refresh_token": "made-up",
        },
        {
            "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
            "client_id": "cid",
            "client_secret": "csecret",
        },
    ]
    for form in bad_forms:
        assert await _token(emulator_client, form, status=401) == FAILURE, form
    await get_json(emulator_client, LIST, headers=_bearer("made-up"), status=401)


async def test_auth_disabled() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    emulator = Emulator(user="", user_tz="Asia/Tokyo")
    emulator.insert("incident", {})
    async with TestClient(TestServer(make_app(emulator))) as client:
        body, _ = await get_json(client, LIST, headers={})
        assert len(body["result"]) == 1
        body, _ = await get_json(
            client,
            "/api/now/table/sys_user",
            {"sysparm_query": "user_name=admin", "sysparm_fields": "time_zone"},
            headers={},
        )
        assert body["result"] == [{"time_zone": "Asia/Tokyo"}]
    assert emulator.journal[0].user == "admin"


async def test_non_ascii_password_is_accepted() -> None:
    import base64

    from snowsource.emulator import Emulator, serve

    emu = Emulator(user="admin", password="pässwörd-€")
    async with serve(emu) as url, aiohttp.ClientSession() as session:
        good = "Basic " + base64.b64encode("admin:pässwörd-€".encode()).decode()
        bad = "Basic " + base64.b64encode("admin:passwort-€".encode()).decode()
        for header, expected in ((good, 200), (bad, 401)):
            async with session.get(
                f"{url}/api/now/table/incident", headers={"Authorization": header}
            ) as resp:
                assert resp.status == expected
