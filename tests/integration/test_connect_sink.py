"""A real Kafka Connect sink reads typed records in the JsonConverter envelope, and Avro ones.

The worker is Apache Kafka Connect itself (``scripts/connect.sh``, standalone mode, the
JsonConverter with ``value.converter.schemas.enable=true``) running the FileStreamSink connector.
The records are built with the core functions from emulator rows read through the Table API, one
of them with a value that does not parse as its column's type, and then produced by the daemon
itself (``value.format: typed``, ``value.schema: connect``). A schema that disagreed with its
payload would make the converter throw and the task FAIL.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from snowsource.core.connect_schema import envelope
from snowsource.core.dictionary import (
    DB_OBJECT_FIELDS,
    DICTIONARY_FIELDS,
    columns,
    dictionary_query,
    lineage,
)
from snowsource.core.typed import convert_row
from snowsource.emulator import Emulator, serve
from tests.conftest import TopicFactory
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running
from tests.kafka_support import REPO, LocalConnect, unique
from tests.polling import poll_until
from tests.registry_support import LocalRegistry

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
AVRO_FIELDS = ["sys_id", "sys_updated_on", "sys_mod_count", "name", "ram", "cost", "cpu_count"]


@pytest.fixture(scope="module")
def connect_worker(kafka_bootstrap: str) -> Iterator[LocalConnect]:
    if shutil.which("java") is None:
        pytest.skip("Java is missing: the Kafka Connect worker needs a JRE 17+ on PATH")
    kafka_port = int(os.environ.get("KAFKA_PORT", "9092"))
    port = int(os.environ.get("CONNECT_PORT", str(kafka_port + 2000)))
    worker = LocalConnect(kafka_bootstrap, port, REPO / ".kafka" / f"connect-{port}")
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def _table(
    http: aiohttp.ClientSession, url: str, name: str, **params: str
) -> list[dict[str, Any]]:
    async with http.get(
        f"{url}/api/now/v2/table/{name}",
        params={"sysparm_limit": "10000", **params},
        headers={"Authorization": aiohttp.encode_basic_auth("admin", "admin")},
    ) as resp:
        assert resp.status == 200, await resp.text()
        result = orjson.loads(await resp.read())["result"]
        assert isinstance(result, list)
        return result


def _struct_text(value: Any) -> str:
    """What Connect's ``Struct.toString()`` prints for a decoded value (null fields left out)."""
    if isinstance(value, dict):
        inner = ",".join(f"{k}={_struct_text(v)}" for k, v in value.items() if v is not None)
        return f"Struct{{{inner}}}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float) and 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Java's Double.toString agrees with repr in this range
    raise AssertionError(f"no Java rendering for {value!r} in this test")


# incident: integers, booleans, dates, reference structs and a value that does not parse;
# cmdb_ci_server: doubles (decimal and float columns) and a date-only column as well.
@pytest.mark.parametrize("case", [("incident", "priority"), ("cmdb_ci_server", "ram")])
async def test_file_sink_reads_typed_envelopes(
    case: tuple[str, str],
    connect_worker: LocalConnect,
    topic_factory: TopicFactory,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    name, odd_field = case
    emu = Emulator(seed=5)
    emu.seed(("incident", "cmdb_ci"), rows=25)
    odd = emu.insert(name, {odd_field: "n/a"})
    async with serve(emu) as url:
        objects = await _table(
            http, url, "sys_db_object", sysparm_fields=",".join(DB_OBJECT_FIELDS)
        )
        chain = lineage(name, objects)
        dictionary = await _table(
            http,
            url,
            "sys_dictionary",
            sysparm_query=dictionary_query(chain),
            sysparm_fields=",".join(DICTIONARY_FIELDS),
        )
        rows = await _table(http, url, name, sysparm_query=f"sys_class_name={name}^ORDERBYsys_id")
    cols = columns(chain, dictionary)
    typed = [convert_row(row, cols) for row in rows]
    assert [t.unparsed for t in typed if t.unparsed] == [(odd_field,)]

    topic = await topic_factory("typed")
    producer = AIOKafkaProducer(bootstrap_servers=connect_worker.bootstrap, acks="all")
    await producer.start()
    try:
        for row, value in zip(rows, typed, strict=True):
            await producer.send_and_wait(
                topic,
                orjson.dumps(envelope(value, f"servicenow.{name}")),
                key=row["sys_id"].encode(),
            )
    finally:
        await producer.stop()

    connector = unique("sink")
    out = tmp_path / "sink.txt"
    config = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "file": str(out),
    }
    async with http.post(
        f"{connect_worker.url}/connectors", json={"name": connector, "config": config}
    ) as resp:
        assert resp.status == 201, await resp.text()
    try:

        async def lines() -> list[str]:
            if not out.exists():
                return []
            found = out.read_text(encoding="utf-8").splitlines()
            return found if len(found) >= len(rows) else []

        written = await poll_until(
            lines, what=f"{len(rows)} lines in {out}", timeout=60, interval=0.2
        )
        async with http.get(f"{connect_worker.url}/connectors/{connector}/status") as resp:
            status = await resp.json()
        assert status["connector"]["state"] == "RUNNING", status
        assert [t["state"] for t in status["tasks"]] == ["RUNNING"], status
        # FileStreamSink writes each value's toString(): the Struct Connect decoded, so every
        # typed value reached the sink as its type (and the odd value as the text it was).
        assert written == [_struct_text(value.values) for value in typed]
        odd_line = written[[r["sys_id"] for r in rows].index(odd["sys_id"])]
        assert re.search(f"[{{,]{odd_field}=n/a[,}}]", odd_line), odd_line
    finally:
        async with http.delete(f"{connect_worker.url}/connectors/{connector}") as resp:
            assert resp.status == 204, await resp.text()


@pytest.mark.parametrize("case", [("incident", "priority"), ("cmdb_ci_server", "ram")])
async def test_file_sink_reads_what_the_daemon_produced_with_the_connect_envelope(
    case: tuple[str, str],
    connect_worker: LocalConnect,
    env: Env,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    name, odd_field = case
    env.emu.seed(("incident", "cmdb_ci"), rows=20)
    odd = env.emu.insert(name, {odd_field: "n/a"})
    settings = env.settings(
        {"typed": {"name": name, "value.format": "typed", "value.schema": "connect"}}
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "typed"))
    records = await read_topic(env.bootstrap, env.topic("typed"))
    assert odd["sys_id"].encode() in [r.key for r in records]
    assert len(records) > 1
    payloads = [r.json["payload"] for r in records]

    connector = unique("sink")
    out = tmp_path / "daemon-sink.txt"
    config = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1",
        "topics": env.topic("typed"),
        "file": str(out),
    }
    async with http.post(
        f"{connect_worker.url}/connectors", json={"name": connector, "config": config}
    ) as resp:
        assert resp.status == 201, await resp.text()
    try:

        async def lines() -> list[str]:
            if not out.exists():
                return []
            found = out.read_text(encoding="utf-8").splitlines()
            return found if len(found) >= len(records) else []

        written = await poll_until(
            lines, what=f"{len(records)} lines in {out}", timeout=60, interval=0.2
        )
        async with http.get(f"{connect_worker.url}/connectors/{connector}/status") as resp:
            status = await resp.json()
        assert status["connector"]["state"] == "RUNNING", status
        assert [t["state"] for t in status["tasks"]] == ["RUNNING"], status
        # The converter decoded every envelope the daemon wrote into the Struct it describes.
        assert written == [_struct_text(payload) for payload in payloads]
        odd_line = written[[r.key for r in records].index(odd["sys_id"].encode())]
        assert re.search(f"[{{,]{odd_field}=n/a[,}}]", odd_line), odd_line
    finally:
        async with http.delete(f"{connect_worker.url}/connectors/{connector}") as resp:
            assert resp.status == 204, await resp.text()


# Apicurio's AvroConverter (scripts/connect.sh puts it on the plugin path) reads what the daemon
# wrote with value.format: avro from the project's registry, in Confluent's framing.
async def test_connect_avro_converter_sinks_every_record(
    env: Env, schema_registry: LocalRegistry, connect_worker: LocalConnect, tmp_path: Path
) -> None:
    rows = [
        env.emu.insert(
            "cmdb_ci_server",
            {"name": f"srv{i}", "ram": str(2048 * i), "cost": f"{i}.25", "cpu_count": ""},
        )
        for i in range(1, 6)
    ]
    odd = env.emu.insert("cmdb_ci_server", {"name": "odd", "ram": "lots", "cost": "1.5"})
    settings = env.settings(
        {"server": {"name": "cmdb_ci_server", "fields": AVRO_FIELDS, "value.format": "avro"}},
        **{"schema.registry": {"url": schema_registry.url}},
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "server"))
    records = await read_topic(env.bootstrap, env.topic("server"))
    assert len(records) == len(rows) + 1

    out = tmp_path / "avro-sink.txt"
    prefix = "value.converter"
    config = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1",
        "topics": env.topic("server"),
        "file": str(out),
        prefix: "io.apicurio.registry.utils.converter.AvroConverter",
        f"{prefix}.apicurio.registry.url": schema_registry.apicurio_url,
        f"{prefix}.apicurio.registry.as-confluent": "true",
        f"{prefix}.apicurio.registry.headers.enabled": "false",
    }
    connector = unique("avro-sink")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.post(
            f"{connect_worker.url}/connectors", json={"name": connector, "config": config}
        ) as resp:
            assert resp.status == 201, await resp.text()
        try:

            def lines() -> list[str]:
                found = out.read_text(encoding="utf-8").splitlines() if out.exists() else []
                return found if len(found) >= len(records) else []

            written = await poll_until(lines, what=f"lines in {out}", timeout=90, interval=0.2)
            async with http.get(f"{connect_worker.url}/connectors/{connector}/status") as resp:
                status = await resp.json()
            assert [t["state"] for t in status["tasks"]] == ["RUNNING"], status
        finally:
            async with http.delete(f"{connect_worker.url}/connectors/{connector}") as resp:
                assert resp.status == 204, await resp.text()
    assert len(written) == len(records)
    by_id = {
        row["sys_id"]: line for row in [*rows, odd] for line in written if row["sys_id"] in line
    }
    for i, row in enumerate(rows, start=1):
        line = by_id[row["sys_id"]]
        assert line.startswith("Struct{"), line
        # Connect decoded each field as its Avro type: an int, a double, a string.
        for part in (f"ram={2048 * i}", f"cost={i}.25", f"name=srv{i}", "sys_mod_count=0"):
            assert part in line, (part, line)
        assert "cpu_count=" not in line  # null: Struct.toString leaves it out
        assert "__unparsed={}" in line
    odd_line = by_id[odd["sys_id"]]
    assert "ram=" not in odd_line.replace("ram=lots", "")
    assert "__unparsed={ram=lots}" in odd_line
