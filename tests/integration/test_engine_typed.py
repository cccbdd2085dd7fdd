"""``value.format: typed`` and ``value.schema: connect`` end to end on the real broker.

The daemon reads each table's columns from the emulator's ``sys_db_object``/``sys_dictionary``
through the Table API and converts every value by its internal type; the expectations here are
computed from the emulator's stored rows and its dictionary, independently of the daemon.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from snowsource.core.dictionary import columns, lineage
from snowsource.core.typed import convert_row
from snowsource.emulator.schema import Field
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import Record, caught_up, read_topic, running
from tests.polling import poll_until

ISO_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
TABLES = {"incident": {"name": "incident"}, "server": {"name": "cmdb_ci_server"}}


def _columns(env: Env, table: str) -> dict[str, str]:
    chain = lineage(table, env.emu.rows("sys_db_object"))
    return columns(chain, env.emu.rows("sys_dictionary"))


def _unparsed(alias: str) -> float:
    value = metrics.REGISTRY.get_sample_value("snowsource_values_unparsed_total", {"table": alias})
    return value or 0.0


def _expected(env: Env, table: str, record: Record, value: dict[str, Any]) -> dict[str, Any]:
    assert record.key is not None
    stored = env.emu.get(table, record.key.decode())
    assert stored is not None
    raw = {name: stored.get(name, "") for name in value}
    return convert_row(raw, _columns(env, table)).values


def _by_type(cols: dict[str, str], internal_type: str) -> list[str]:
    return [name for name, kind in cols.items() if kind == internal_type]


async def test_typed_records_convert_each_internal_type(env: Env) -> None:
    env.emu.seed(tables=("incident", "cmdb_ci"), rows=25)
    odd = env.emu.insert(
        "incident", {"priority": "n/a", "description": "", "impact": "2", "active": "true"}
    )
    empty = env.emu.insert("cmdb_ci_server", {"name": "bare", "cost": "", "purchase_date": ""})
    before = _unparsed("incident")
    settings = env.settings(TABLES, **{"value.format": "typed"})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "server"))

    for alias, table in (("incident", "incident"), ("server", "cmdb_ci_server")):
        cols = _columns(env, table)
        records = await read_topic(env.bootstrap, env.topic(alias))
        assert records
        for record in records:
            value = record.json
            assert value == _expected(env, table, record, value)
            # The cursor and the headers stay raw: only the value is converted.
            assert re.fullmatch(
                r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", record.headers["snow.timestamp"].decode()
            )
            assert record.headers["snow.operation"] == b"upsert"
            for name in _by_type(cols, "integer"):
                if record.key != odd["sys_id"].encode() or name != "priority":
                    assert value[name] is None or type(value[name]) is int, (name, value[name])
            for name in _by_type(cols, "boolean"):
                assert value[name] is None or type(value[name]) is bool, name
            for name in _by_type(cols, "glide_date_time"):
                assert value[name] is None or ISO_DATE_TIME.fullmatch(value[name]), name
            for name in _by_type(cols, "glide_date"):
                assert value[name] is None or ISO_DATE.fullmatch(value[name]), name
            for name in [*_by_type(cols, "decimal"), *_by_type(cols, "float")]:
                assert value[name] is None or type(value[name]) is float, name
            for name in _by_type(cols, "reference"):
                assert value[name] is None or re.fullmatch(r"[0-9a-f]{32}", value[name]), name
    incidents = {r.key: r.json for r in await read_topic(env.bootstrap, env.topic("incident"))}
    odd_value = incidents[odd["sys_id"].encode()]
    assert odd_value["priority"] == "n/a"  # did not parse: stays the string it was
    assert odd_value["description"] == ""  # an empty string column stays empty
    assert odd_value["impact"] == 2
    assert odd_value["active"] is True
    assert _unparsed("incident") == before + 1
    servers = {r.key: r.json for r in await read_topic(env.bootstrap, env.topic("server"))}
    bare = servers[empty["sys_id"].encode()]
    assert (bare["cost"], bare["purchase_date"]) == (None, None)  # empty non-string -> null
    assert any(type(v["cost"]) is float for v in servers.values())


def _schema_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        return "struct"
    return "string"


async def test_connect_envelope_schema_matches_its_payload(env: Env) -> None:
    env.emu.seed(tables=("incident", "cmdb_ci"), rows=15)
    odd = env.emu.insert("cmdb_ci_server", {"name": "odd", "ram": "lots"})
    settings = env.settings(TABLES, **{"value.format": "typed", "value.schema": "connect"})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "server"))
    for alias, table in (("incident", "incident"), ("server", "cmdb_ci_server")):
        for record in await read_topic(env.bootstrap, env.topic(alias)):
            document = record.json
            assert set(document) == {"schema", "payload"}
            schema, payload = document["schema"], document["payload"]
            assert schema["type"] == "struct"
            assert schema["optional"] is False
            assert schema["name"] == f"servicenow.{table}"
            assert [f["field"] for f in schema["fields"]] == list(payload)
            for field in schema["fields"]:
                assert field["optional"] is True
                value = payload[field["field"]]
                if value is not None:
                    assert field["type"] == _schema_type(value), (field, value)
            assert payload == _expected(env, table, record, payload)
            if record.key == odd["sys_id"].encode():
                ram = next(f for f in schema["fields"] if f["field"] == "ram")
                assert (ram["type"], payload["ram"]) == ("string", "lots")
            else:
                types = {f["field"]: f["type"] for f in schema["fields"]}
                if table == "cmdb_ci_server":
                    assert (types["ram"], types["cost"], types["disk_space"]) == (
                        "int64",
                        "double",
                        "double",
                    )
                    assert types["purchase_date"] == "string"


async def test_a_new_column_is_typed_after_the_dictionary_is_read_again(env: Env) -> None:
    widget = env.emu.create_table("u_widget", {"u_count": "integer"})
    for i in range(3):
        env.emu.insert("u_widget", {"u_count": str(i)})
    settings = env.settings({"widget": {"name": "u_widget", "value.format": "typed"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "widget"))
        # An administrator adds a column: rows and dictionary have it from now on.
        grown = dataclasses.replace(
            widget, own_fields=(*widget.own_fields, Field("u_score", "integer"))
        )
        env.emu.tables["u_widget"] = grown
        env.emu.store.add_table(grown)
        env.emu.insert(
            "sys_dictionary",
            {
                "name": "u_widget",
                "element": "u_score",
                "internal_type": "integer",
                "active": "true",
            },
        )
        new = env.emu.insert("u_widget", {"u_count": "9", "u_score": "42"})

        async def arrived() -> bool:
            keys = [r.key for r in await read_topic(env.bootstrap, env.topic("widget"))]
            return new["sys_id"].encode() in keys

        await poll_until(arrived)
    records = {r.key: r.json for r in await read_topic(env.bootstrap, env.topic("widget"))}
    assert records[new["sys_id"].encode()]["u_score"] == 42
    assert records[new["sys_id"].encode()]["u_count"] == 9
    assert {type(v["u_count"]) for v in records.values()} == {int}


async def test_the_clock_probe_and_the_dictionary_read_leave_together(env: Env) -> None:
    """Neither waits for the other: a table's first page leaves a round trip sooner. With a
    second added to every request, one after the other would put a second between them."""
    env.emu.seed(tables=("incident",), rows=3)
    env.emu.latency_ms = 1000
    settings = env.settings({"incident": {"name": "incident"}}, **{"value.format": "typed"})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    journal = env.emu.journal
    probe = next(r for r in journal if r.table == "incident" and "sysparm_query" not in r.params)
    schema = next(r for r in journal if r.table == "sys_db_object")
    first_page = next(r for r in journal if r.table == "incident" and "sysparm_query" in r.params)
    assert abs(schema.wall - probe.wall) < 0.5
    # The first page still waits for both: HI comes from the probe's Date header.
    assert first_page.wall - probe.wall >= 1.0
