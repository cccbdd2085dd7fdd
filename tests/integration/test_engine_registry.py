"""``value.format: avro | json_schema`` end to end: the real broker, the emulator, the real
Schema Registry of ``scripts/registry.sh``, and confluent-kafka's own deserializers."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from snowsource.cli.check import Status, run_checks
from snowsource.config.loader import load_config
from snowsource.core.table_status import TableState
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running, status, write_config
from tests.integration.registry_helpers import Reader, add_column, expected_avro
from tests.polling import poll_until
from tests.registry_support import LocalRegistry

SERVER_FIELDS = [
    "sys_id",
    "sys_updated_on",
    "sys_mod_count",
    "name",
    "cost",
    "disk_space",
    "ram",
    "purchase_date",
    "last_discovered",
    "assigned_to",
]
INCIDENT_FIELDS = ["sys_id", "sys_updated_on", "sys_mod_count", "number", "active"]
INCIDENT_FIELDS += ["reassignment_count", "caller_id", "caller_id.name", "opened_at"]


def _registry(url: str, **extra: Any) -> dict[str, Any]:
    return {"schema.registry": {"url": url, **extra}}


def _versions(url: str, subject: str) -> list[int]:
    try:
        with urllib.request.urlopen(f"{url}/subjects/{subject}/versions", timeout=5) as resp:
            return list(orjson.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise


def _register(url: str, subject: str, schema: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{url}/subjects/{subject}/versions",
        data=orjson.dumps({"schema": orjson.dumps(schema).decode()}),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=5):
        pass


def _sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


async def test_avro_records_decode_to_the_typed_rows(
    env: Env, schema_registry: LocalRegistry
) -> None:
    env.emu.seed(tables=("incident", "cmdb_ci"), rows=12)
    odd = env.emu.insert("incident", {"reassignment_count": "n/a", "active": "true"})
    bare = env.emu.insert("cmdb_ci_server", {"name": "bare", "cost": "", "purchase_date": ""})
    tables = {
        "incident": {"name": "incident", "fields": INCIDENT_FIELDS},
        "server": {"name": "cmdb_ci_server", "fields": SERVER_FIELDS},
    }
    before = _sample("snowsource_values_unparsed_total", table="incident")
    settings = env.settings(tables, **{"value.format": "avro"}, **_registry(schema_registry.url))
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "server"))
    with Reader(schema_registry.url, "avro") as reader:
        await _check_avro(env, reader, odd, bare)
    assert _sample("snowsource_values_unparsed_total", table="incident") == before + 1
    assert _versions(schema_registry.url, f"{env.topic('server')}-value") == [1]


async def _check_avro(env: Env, reader: Reader, odd: dict[str, Any], bare: dict[str, Any]) -> None:
    for alias, table, fields in (
        ("incident", "incident", INCIDENT_FIELDS),
        ("server", "cmdb_ci_server", SERVER_FIELDS),
    ):
        records = await read_topic(env.bootstrap, env.topic(alias))
        assert records
        for record in records:
            assert record.key is not None
            assert record.value is not None
            assert record.value[:1] == b"\x00"  # Confluent's framing
            value = reader.value(env.topic(alias), record)
            assert value == expected_avro(env, table, record.key, fields), record.key
    incidents = {
        r.key: reader.value(env.topic("incident"), r)
        for r in await read_topic(env.bootstrap, env.topic("incident"))
    }
    odd_value = incidents[odd["sys_id"].encode()]
    assert odd_value["reassignment_count"] is None
    assert odd_value["__unparsed"] == {"reassignment_count": "n/a"}
    assert odd_value["active"] is True
    assert any(v["caller_id__name"] for v in incidents.values())  # the dot-walk is there
    servers = {
        r.key: reader.value(env.topic("server"), r)
        for r in await read_topic(env.bootstrap, env.topic("server"))
    }
    assert (
        servers[bare["sys_id"].encode()]["cost"],
        servers[bare["sys_id"].encode()]["purchase_date"],
    ) == (None, None)


async def test_json_schema_records_decode_and_validate(
    env: Env, schema_registry: LocalRegistry
) -> None:
    for i in range(3):
        env.emu.insert("cmdb_ci_server", {"name": f"s{i}", "ram": str(1024 * i), "cost": "9.5"})
    odd = env.emu.insert("cmdb_ci_server", {"name": "odd", "ram": "lots"})
    tables = {"server": {"name": "cmdb_ci_server", "fields": SERVER_FIELDS}}
    settings = env.settings(
        tables, **{"value.format": "json_schema"}, **_registry(schema_registry.url)
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "server"))
    records = await read_topic(env.bootstrap, env.topic("server"))
    with Reader(schema_registry.url, "json_schema") as reader:  # validates every value
        values = {r.key: reader.value(env.topic("server"), r) for r in records}
    assert len(values) == len(env.emu.rows("cmdb_ci_server"))
    assert values[odd["sys_id"].encode()]["ram"] is None
    assert values[odd["sys_id"].encode()]["__unparsed"] == {"ram": "lots"}
    assert any(isinstance(v["ram"], int) for v in values.values())
    assert any(isinstance(v["cost"], float) for v in values.values())
    assert all(
        v["last_discovered"] is None or v["last_discovered"].endswith("Z") for v in values.values()
    )


async def test_a_new_column_registers_version_two_once(
    env: Env, schema_registry: LocalRegistry
) -> None:
    env.emu.create_table("u_widget", {"u_count": "integer"})
    for i in range(3):
        env.emu.insert("u_widget", {"u_count": str(i)})
    settings = env.settings(
        {"widget": {"name": "u_widget", "value.format": "avro"}},
        **_registry(schema_registry.url),
    )
    registered = _sample("snowsource_schema_versions_registered_total", table="widget")
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "widget"))
        add_column(env, "u_widget", "u_score", "integer")
        new = env.emu.insert("u_widget", {"u_count": "9", "u_score": "42"})

        async def arrived() -> bool:
            keys = [r.key for r in await read_topic(env.bootstrap, env.topic("widget"))]
            return new["sys_id"].encode() in keys

        await poll_until(arrived)
        env.emu.insert("u_widget", {"u_count": "10", "u_score": "43"})
        await poll_until(arrived)
    subject = f"{env.topic('widget')}-value"
    assert _versions(schema_registry.url, subject) == [1, 2]
    # One registration per version, however many pages and rows.
    assert _sample("snowsource_schema_versions_registered_total", table="widget") == registered + 2
    records = await read_topic(env.bootstrap, env.topic("widget"))
    with Reader(schema_registry.url, "avro") as reader:
        decoded = [
            (r.value[1:5], r.key, reader.value(env.topic("widget"), r)) for r in records if r.value
        ]
    first_id = decoded[0][0]
    # Version-1 records still decode, without the new field. (A row re-read in the overlap
    # window after the change is written again in version 2: its bytes differ.)
    old = {key: value for schema_id, key, value in decoded if schema_id == first_id}
    assert len(old) == 3
    assert all("u_score" not in v for v in old.values())
    latest = {key: value for _, key, value in decoded}
    assert latest[new["sys_id"].encode()]["u_score"] == 42


async def test_a_refused_version_keeps_the_table_writing(
    env: Env, schema_registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    env.emu.create_table("u_widget", {"u_count": "integer"})
    for i in range(30):
        env.emu.insert("u_widget", {"u_count": str(i)})
    subject = f"{env.topic('widget')}-value"
    # u_count as a string: an int field cannot read it back, so BACKWARD refuses ours (409).
    theirs = {
        "type": "record",
        "name": "u_widget",
        "namespace": "servicenow",
        "fields": [{"name": "u_count", "type": ["null", "string"], "default": None}],
    }
    _register(schema_registry.url, subject, theirs)
    refused = _sample("snowsource_schemas_refused_total", table="widget")
    settings = env.settings(
        {"widget": {"name": "u_widget", "value.format": "avro", "batch.size": 5}},
        **_registry(schema_registry.url),
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "widget"))
        assert status(daemon, "widget").state is TableState.RUNNING
    # Six pages, one refusal: the refused version is asked for and WARNed about once.
    assert _sample("snowsource_schemas_refused_total", table="widget") == refused + 1
    assert capsys.readouterr().out.count("refused the table's new schema version") == 1
    assert _versions(schema_registry.url, subject) == [1]
    records = await read_topic(env.bootstrap, env.topic("widget"))
    with Reader(schema_registry.url, "avro") as reader:
        values = [reader.value(env.topic("widget"), r) for r in records]
    # Their schema (u_count a string, no __unparsed), every row.
    assert sorted(v["u_count"] for v in values) == sorted(str(i) for i in range(30))


@pytest.fixture
async def refusing_registry() -> AsyncIterator[str]:
    """A registry that answers 401 to everything, as one with wrong credentials does."""

    async def refuse(request: web.Request) -> web.Response:
        del request
        body = {"error_code": 40101, "message": "Unauthorized: bad credentials for svc-snow"}
        return web.json_response(body, status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    async with TestServer(app) as server:
        yield str(server.make_url("")).rstrip("/")


async def test_a_401_fails_the_table_with_the_registrys_message(
    env: Env, refusing_registry: str
) -> None:
    env.emu.create_table("u_widget", {"u_count": "integer"})
    env.emu.insert("u_widget", {"u_count": "1"})
    settings = env.settings(
        {"widget": {"name": "u_widget", "value.format": "avro"}}, **_registry(refusing_registry)
    )
    async with running(settings) as daemon:
        await poll_until(lambda: status(daemon, "widget").state is TableState.FAILED)
        assert "bad credentials for svc-snow" in (status(daemon, "widget").last_error or "")
        assert "401" in (status(daemon, "widget").last_error or "")
    assert await read_topic(env.bootstrap, env.topic("widget")) == []


async def test_check_says_which_version_each_table_would_register(
    env: Env, schema_registry: LocalRegistry, refusing_registry: str
) -> None:
    env.emu.create_table("u_widget", {"u_count": "integer"})
    env.emu.create_table("u_gadget", {"u_count": "integer"})
    subject = f"{env.topic('gadget')}-value"
    theirs = {
        "type": "record",
        "name": "u_gadget",
        "namespace": "servicenow",
        "fields": [{"name": "u_count", "type": ["null", "string"], "default": None}],
    }
    _register(schema_registry.url, subject, theirs)
    tables = {
        "widget": {"name": "u_widget", "value.format": "avro"},
        "gadget": {"name": "u_gadget", "value.format": "avro"},
    }
    path = write_config(
        env.tmp_path / "check.yaml", env.document(tables, **_registry(schema_registry.url))
    )
    results = {r.name: r for r in await run_checks(load_config(path, env={}))}
    assert results["schema registry reachable"].status is Status.PASS
    # The dictionary the schema comes from is checked like a typed table's.
    assert results["table widget dictionary readable (value.format: avro)"].status is Status.PASS
    widget = results["widget schema"]
    assert (widget.status, widget.detail) == (
        Status.PASS,
        f"would register as version 1 of {env.topic('widget')}-value",
    )
    assert results["gadget schema"].status is Status.WARN
    assert "would refuse" in results["gadget schema"].detail
    assert _versions(schema_registry.url, subject) == [1]  # check registers nothing

    path = write_config(
        env.tmp_path / "check401.yaml", env.document(tables, **_registry(refusing_registry))
    )
    results = {r.name: r for r in await run_checks(load_config(path, env={}))}
    reachable = results["schema registry reachable"]
    assert reachable.status is Status.FAIL
    assert "bad credentials for svc-snow" in reachable.detail


async def test_without_auto_register_the_schema_is_looked_up_or_the_table_fails(
    env: Env, schema_registry: LocalRegistry
) -> None:
    env.emu.create_table("u_widget", {"u_count": "integer"})
    env.emu.insert("u_widget", {"u_count": "1"})
    tables = {"widget": {"name": "u_widget", "value.format": "avro"}}
    subject = f"{env.topic('widget')}-value"
    lookups = _sample(
        "snowsource_schema_registry_requests_total", operation="lookup", outcome="not_found"
    )
    settings = env.settings(tables, **_registry(schema_registry.url, **{"auto.register": False}))
    async with running(settings) as daemon:
        await poll_until(lambda: status(daemon, "widget").state is TableState.FAILED)
        error = status(daemon, "widget").last_error or ""
        assert subject in error
        assert "auto.register" in error
    assert _versions(schema_registry.url, subject) == []  # nothing registered
    assert (
        _sample(
            "snowsource_schema_registry_requests_total", operation="lookup", outcome="not_found"
        )
        == lookups + 1
    )
    # Registered by someone else (here: a daemon that may register), it is found and used.
    async with running(env.settings(tables, **_registry(schema_registry.url))) as daemon:
        await poll_until(caught_up(daemon, "widget"))
    async with running(settings) as daemon:
        env.emu.insert("u_widget", {"u_count": "2"})
        await poll_until(caught_up(daemon, "widget"))
        assert status(daemon, "widget").state is TableState.RUNNING
    assert _versions(schema_registry.url, subject) == [1]
