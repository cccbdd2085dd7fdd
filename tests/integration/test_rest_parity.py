"""REST answers compared with a Kafka Connect 4.1 worker's, request by request.

Every expected answer below is what Connect 4.1 returns for the same request (status and
``{"error_code", "message"}`` body), taken from its REST layer: ``ConnectorsResource``, the
herders' ``NotFoundException`` texts, Jersey's routing and media-type errors as
``ConnectExceptionMapper`` renders them. Where snowsource answers differently on purpose the
case carries ``ours`` and the reason; docs/rest.md lists the same differences.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiohttp import ClientSession

from snowsource import __version__
from snowsource.api.errors import MUST_BE_STOPPED_MESSAGE, NEED_OFFSETS_MESSAGE
from snowsource.engine.supervisor import Daemon
from snowsource.observability.build import find_commit
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, running
from tests.integration.test_rest import rest_of
from tests.polling import poll_until

JSON = {"Content-Type": "application/json"}
NAME = "{name}"  # replaced by the test's connector name
PARTITION = "{partition}"  # replaced by the incident table's partition


@dataclass(frozen=True)
class Case:
    """One request and Connect 4.1's answer (``ours`` when snowsource differs on purpose)."""

    method: str
    path: str
    connect: tuple[int, Any]
    body: bytes | None = None
    headers: dict[str, str] | None = None
    ours: tuple[int, Any] | None = None
    why: str = ""


def err(code: int, message: str) -> tuple[int, dict[str, object]]:
    return code, {"error_code": code, "message": message}


GOOD_PATCH = b'{"offsets":[{"partition":' + PARTITION.encode() + b',"offset":null}]}'

CASES: list[Case] = [
    # Unknown connector: each call words it as its herder method does.
    Case("GET", "/connectors/nope", err(404, "Connector nope not found")),
    Case("GET", "/connectors/nope/status", err(404, "No status found for connector nope")),
    Case("PUT", "/connectors/nope/stop", err(404, "Unknown connector nope")),
    Case("PUT", "/connectors/nope/pause", err(404, "Unknown connector nope")),
    Case("PUT", "/connectors/nope/resume", err(404, "Unknown connector nope")),
    Case("POST", "/connectors/nope/restart", err(404, "Unknown connector: nope")),
    Case(
        "POST",
        "/connectors/nope/restart?includeTasks=true&onlyFailed=true",
        err(404, "Unknown connector: nope"),
    ),
    Case("GET", "/connectors/nope/offsets", err(404, "Connector nope not found")),
    Case("DELETE", "/connectors/nope/offsets", err(404, "Connector nope not found")),
    Case(
        "PATCH",
        "/connectors/nope/offsets",
        err(404, "Connector nope not found"),
        body=GOOD_PATCH,
        headers=JSON,
    ),
    # The body is checked before the connector is looked up.
    Case(
        "PATCH",
        "/connectors/nope/offsets",
        err(400, NEED_OFFSETS_MESSAGE),
        body=b'{"offsets":[]}',
        headers=JSON,
    ),
    # Jersey refuses a body that is not JSON before any resource code runs (unknown connector
    # or not), with its own wording.
    Case(
        "PATCH",
        f"/connectors/{NAME}/offsets",
        err(415, "HTTP 415 Unsupported Media Type"),
        body=GOOD_PATCH,
        headers={"Content-Type": "application/x-www-form-urlencoded"},  # curl -d without -H
    ),
    Case(
        "PATCH",
        f"/connectors/{NAME}/offsets",
        err(415, "HTTP 415 Unsupported Media Type"),
        body=GOOD_PATCH,
        headers={"Content-Type": "text/plain"},
    ),
    Case("PATCH", f"/connectors/{NAME}/offsets", err(415, "HTTP 415 Unsupported Media Type")),
    Case(
        "PATCH",
        "/connectors/nope/offsets",
        err(415, "HTTP 415 Unsupported Media Type"),
        body=GOOD_PATCH,
        headers={"Content-Type": "text/plain"},
    ),
    # A charset parameter is still JSON.
    Case(
        "PATCH",
        f"/connectors/{NAME}/offsets",
        err(400, MUST_BE_STOPPED_MESSAGE.format(name=NAME)),
        body=GOOD_PATCH,
        headers={"Content-Type": "application/json; charset=utf-8"},
    ),
    # Offsets change only while STOPPED.
    Case(
        "PATCH",
        f"/connectors/{NAME}/offsets",
        err(400, MUST_BE_STOPPED_MESSAGE.format(name=NAME)),
        body=GOOD_PATCH,
        headers=JSON,
    ),
    Case(
        "DELETE",
        f"/connectors/{NAME}/offsets",
        err(400, MUST_BE_STOPPED_MESSAGE.format(name=NAME)),
    ),
    Case(
        "PATCH",
        f"/connectors/{NAME}/offsets",
        err(400, NEED_OFFSETS_MESSAGE),
        body=b"{}",
        headers=JSON,
    ),
    # Jackson's parse error surfaces as a 500 from Connect; a client error is a 400.
    Case(
        "PATCH",
        f"/connectors/{NAME}/offsets",
        (500, None),
        body=b'{"offsets": [',
        headers=JSON,
        ours=(400, None),
        why="malformed JSON is the client's mistake",
    ),
    Case(
        "PATCH",
        f"/connectors/{NAME}/offsets",
        (500, None),
        body=b"",
        headers=JSON,
        ours=err(400, NEED_OFFSETS_MESSAGE),
        why="an empty body is the client's mistake too",
    ),
    # Routing errors in Jersey's words.
    Case("GET", "/no/such/route", err(404, "HTTP 404 Not Found")),
    Case("DELETE", f"/connectors/{NAME}/status", err(405, "HTTP 405 Method Not Allowed")),
]


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession() as session:
        yield session


def _fill(text: str, name: str, partition: bytes) -> str:
    return text.replace(NAME, name).replace(PARTITION, partition.decode())


def _expected(answer: tuple[int, Any], name: str) -> tuple[int, Any]:
    status, body = answer
    if isinstance(body, dict):
        body = {k: _fill(v, name, b"") if isinstance(v, str) else v for k, v in body.items()}
    return status, body


async def _ask(
    http: ClientSession, root: str, case: Case, name: str, partition: bytes
) -> tuple[int, Any]:
    body = _fill(case.body.decode(), name, partition).encode() if case.body is not None else None
    # aiohttp adds application/octet-stream to a bytes body that names no type: say nothing.
    headers = case.headers if case.headers is not None else {}
    skip = () if "Content-Type" in headers else ("Content-Type",)
    async with http.request(
        case.method,
        root + _fill(case.path, name, partition),
        data=body,
        headers=headers,
        skip_auto_headers=skip,
    ) as resp:
        payload = await resp.read()
        return resp.status, orjson.loads(payload) if payload else None


async def test_answers_match_kafka_connect(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident",), rows=20)
    settings = env.settings({"incident": {"name": "incident"}}, rest={"enabled": True, "port": 0})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        root = rest_of(daemon).url
        partition = orjson.dumps(daemon.specs[0].partition.as_dict())
        mismatches = []
        for case in CASES:
            expected = _expected(case.ours or case.connect, env.name)
            got = await _ask(http, root, case, env.name, partition)
            if expected[1] is None and got[1] is not None:
                got = (got[0], None)  # only the status is compared for this case
            if got != expected:
                mismatches.append(f"{case.method} {case.path}: expected {expected}, got {got}")
        assert not mismatches, "\n".join(mismatches)
        # Nothing above changed the connector: the PATCHes were all refused.
        assert daemon.target.value == "RUNNING"


async def _status(http: ClientSession, daemon: Daemon) -> Any:
    assert daemon.api is not None
    url = f"{rest_of(daemon).url}/connectors/{daemon.settings.name}/status"
    async with http.get(url) as resp:
        assert resp.status == 200
        return await resp.json()


async def test_status_carries_the_version_of_connector_and_task(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=5)
    settings = env.settings({"incident": {"name": "incident"}}, rest={"enabled": True, "port": 0})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        state = await _status(http, daemon)
        assert state["connector"]["version"] == __version__
        assert [task["version"] for task in state["tasks"]] == [__version__]


async def test_offsets_are_listed_by_table_whatever_the_configuration_order(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident", "change_request", "cmdb_ci"), rows=5)
    # Configuration order is neither alphabetical by alias nor by table.
    tables = {
        "b_incident": {"name": "incident"},
        "c_cmdb": {"name": "cmdb_ci"},
        "a_change": {"name": "change_request"},
    }
    settings = env.settings(tables, rest={"enabled": True, "port": 0})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, *tables))
        await poll_until(
            lambda: all(p.status.committed is not None for p in daemon.pollers.values())
        )
        url = f"{rest_of(daemon).url}/connectors/{env.name}/offsets"
        listings = []
        for _ in range(2):
            async with http.get(url) as resp:
                assert resp.status == 200
                listings.append(await resp.json())
        tables_listed = [item["partition"]["table"] for item in listings[0]["offsets"]]
        assert tables_listed == ["change_request", "cmdb_ci", "incident"]
        assert listings[0] == listings[1]


async def test_root_reports_the_running_code_commit(env: Env, http: ClientSession) -> None:
    settings = env.settings({"incident": {"name": "incident"}}, rest={"enabled": True, "port": 0})
    env.emu.seed(tables=("incident",), rows=1)
    async with running(settings) as daemon, http.get(f"{rest_of(daemon).url}/") as resp:
        root = await resp.json()
    # What the running code is (tests/unit/test_build_info.py covers where it comes from).
    assert root["commit"] == find_commit()
    assert root["version"] == __version__
