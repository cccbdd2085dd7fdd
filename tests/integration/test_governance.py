"""Field governance end to end (SPEC §15.2) on the real broker and the emulator.

``sys_user`` in the emulator has a ``password2`` column (``user_password``) and a
``glide_encrypted`` one (``u_recovery_code``) in its dictionary, with values. The daemon runs as
a process at DEBUG level; its records and everything it wrote are searched for the raw values
of every excluded, sensitive, hashed and masked column.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from snowsource.cli.check import CheckResult, Status, exit_code, run_checks
from snowsource.cli.main import main
from snowsource.config.loader import load_config
from snowsource.core.governance import MASK, hmac_hex
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running, write_config
from tests.integration.processes import start_run
from tests.integration.registry_helpers import Reader
from tests.polling import poll_until
from tests.registry_support import LocalRegistry

pytestmark = [pytest.mark.kafka]

KEY = "governance-test-hmac-key-0123456789"
SENSITIVE = ("user_password", "u_recovery_code")
# One user whose every governed value is unmistakable in any output.
SPECIAL = {
    "user_name": "zed.quill",
    "name": "Zed Quill",
    "first_name": "Xyzzyfirst",
    "last_name": "Plughlast",
    "email": "zed.quill.hashme@example.org",
    "title": "Frobnicator",
    "user_password": "Sup3rS3cretPassw0rd!",
    "u_recovery_code": "RC-ENCRYPTED-777-QQ",
}


def _governed_tables() -> dict[str, dict[str, Any]]:
    return {
        "users_string": {"name": "sys_user"},
        "users_typed": {
            "name": "sys_user",
            "query": "active=true",
            "value.format": "typed",
            "value.schema": "connect",
            # A table's own list replaces the top-level one.
            "fields.mask": ["last_name", "title"],
        },
    }


def _governed_top() -> dict[str, Any]:
    return {
        "fields.exclude": ["first_*"],
        "fields.hash": ["email"],
        "fields.mask": ["last_name"],
        "governance": {"hash.key": KEY},
    }


def _sweeps_logged(log: Path, *aliases: str) -> bool:
    seen: set[str] = set()
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "sweep":
                seen.add(str(event.get("table")))
    return seen >= set(aliases)


async def _run_to_first_sweeps(env: Env, document: dict[str, Any], *aliases: str) -> str:
    """Run ``snowsource run`` until every alias logged a sweep, SIGTERM it; all it wrote."""
    config = write_config(env.tmp_path / "governed.yaml", document)
    log = env.tmp_path / "governed.log"
    proc = await start_run(config, log)
    try:
        await poll_until(lambda: _sweeps_logged(log, *aliases), timeout=60)
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(40):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return log.read_text(errors="replace")


def _payload(value: Any) -> dict[str, Any]:
    payload: dict[str, Any] = value.get("payload", value)
    return payload


async def test_excluded_sensitive_hashed_and_masked_in_string_and_typed(env: Env) -> None:
    env.emu.seed(tables=("sys_user",), rows=250)  # pages through the slices
    special = env.emu.insert("sys_user", {**SPECIAL, "active": "true"})
    stored = {row["sys_id"]: row for row in env.emu.rows("sys_user")}
    assert {stored[special["sys_id"]][name] for name in SENSITIVE} == {
        SPECIAL["user_password"],
        SPECIAL["u_recovery_code"],
    }
    document = env.document(
        _governed_tables(), log={"format": "json", "level": "DEBUG"}, **_governed_top()
    )
    output = await _run_to_first_sweeps(env, document, "users_string", "users_typed")

    for alias, masked in (("users_string", {"last_name"}), ("users_typed", {"last_name", "title"})):
        records = await read_topic(env.bootstrap, env.topic(alias))
        assert records, alias
        for record in records:
            assert record.key is not None
            row = stored[record.key.decode()]
            value = _payload(record.json)
            assert not set(value) & {*SENSITIVE, "first_name"}, (alias, sorted(value))
            # Cursor fields and sys_mod_count untouched.
            stamp = row["sys_updated_on"]
            assert record.headers["snow.timestamp"].decode() == stamp
            typed_stamp = stamp.replace(" ", "T") + "Z"  # typed converts it, governance does not
            assert value["sys_updated_on"] == (stamp if alias == "users_string" else typed_stamp)
            assert value["sys_id"] == row["sys_id"]
            assert str(value["sys_mod_count"]) == row["sys_mod_count"]
            assert value["email"] == (hmac_hex(KEY.encode(), row["email"]) if row["email"] else "")
            for name in masked:
                assert value[name] == (MASK if row[name] else ""), (alias, name)
            assert value["user_name"] == row["user_name"]  # ungoverned columns as they are
        if alias == "users_typed":
            schema = records[0].json["schema"]
            types = {f["field"]: f["type"] for f in schema["fields"]}
            assert types["email"] == types["last_name"] == "string"
            assert not set(types) & {*SENSITIVE, "first_name"}
    # Nothing the process wrote at DEBUG holds a governed value, nor does any record.
    secrets = [SPECIAL[name] for name in (*SENSITIVE, "first_name", "last_name", "email")]
    for secret in secrets:
        assert secret not in output, secret
    assert KEY not in output  # the hash key is a secret like the others
    assert '"hash.key": "***"' in output or "'hash.key': '***'" in output
    records = [
        record
        for alias in ("users_string", "users_typed")
        for record in await read_topic(env.bootstrap, env.topic(alias))
    ]
    every_record = b"".join(record.value or b"" for record in records)
    for secret in secrets:
        assert secret.encode() not in every_record, secret
    for row in stored.values():
        for name in SENSITIVE:
            if row.get(name):
                assert row[name] not in output
                assert row[name].encode() not in every_record


async def test_sensitive_include_sends_them(env: Env) -> None:
    env.emu.seed(tables=("sys_user",), rows=5)
    settings = env.settings({"users": {"name": "sys_user", "sensitive.fields": "include"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "users"))
    records = await read_topic(env.bootstrap, env.topic("users"))
    assert any(record.json.get("user_password") for record in records)


async def test_unreadable_dictionary_warns_once_and_the_table_runs(env: Env) -> None:
    env.emu.seed(tables=("sys_user",), rows=250)  # three pages at batch.size 100
    env.emu.deny_table("admin", "sys_dictionary")
    settings = env.settings({"users": {"name": "sys_user"}})
    with capture_logs() as logs:
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "users"))
    warnings = [e for e in logs if "sensitive columns" in str(e.get("event"))]
    assert len(warnings) == 1, warnings
    assert warnings[0]["log_level"] == "warning"
    records = await read_topic(env.bootstrap, env.topic("users"))
    # Not verified: they are sent, which is what the WARN says.
    assert any(record.json.get("user_password") for record in records)


async def test_excluded_columns_are_not_requested_with_an_explicit_projection(env: Env) -> None:
    env.emu.seed(tables=("sys_user",), rows=5)
    settings = env.settings(
        {
            "users": {
                "name": "sys_user",
                "fields": ["user_name", "first_name", "email", "user_password"],
                "fields.exclude": ["first_*"],
            }
        }
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "users"))
    asked = [
        request.params["sysparm_fields"].split(",")
        for request in env.emu.journal
        if request.table == "sys_user" and "sysparm_fields" in request.params
    ]
    # Page requests ask for the projection; probes (the clock, hidden rows) for less.
    pages = [fields for fields in asked if "user_name" in fields]
    assert pages
    assert all("first_name" not in fields for fields in asked)
    for fields in pages:
        assert {"email", "user_password", "sys_updated_on", "sys_id", "sys_mod_count"} <= set(
            fields
        )
    for record in await read_topic(env.bootstrap, env.topic("users")):
        # Asked for by name, still sensitive: dropped on arrival.
        assert set(record.json) == {
            "user_name",
            "email",
            "sys_updated_on",
            "sys_id",
            "sys_mod_count",
        }


@pytest.mark.parametrize("key", ["fields.exclude", "fields.hash", "fields.mask"])
def test_governing_a_cursor_field_exits_2_naming_the_key(
    env: Env, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    document = env.document(
        {"incident": {"name": "incident", key: ["sys_updated_on"]}},
        governance={"hash.key": KEY},
    )
    config = write_config(env.tmp_path / "cursor.yaml", document)
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"snow.tables.incident.{key}" in err
    assert f"remove 'sys_updated_on' from {key}" in err
    assert not env.emu.journal  # nothing was contacted


async def test_the_journal_stream_follows_its_table_governance(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=5)
    parents = [row["sys_id"] for row in env.emu.rows("incident")]
    written: dict[str, tuple[str, str]] = {}
    for i in range(12):
        element = "comments" if i % 2 else "work_notes"
        row = env.emu.add_journal_entry("incident", parents[i % 5], f"entry-{i}-x", element=element)
        written[row["sys_id"]] = (element, f"entry-{i}-x")
    tables = {
        "incident": {
            "name": "incident",
            "journal": True,
            "fields.exclude": ["work_*"],
            "fields.hash": ["comments"],
        }
    }
    settings = env.settings(tables, governance={"hash.key": KEY})
    with capture_logs() as logs:
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, "incident", "incident.journal"))
    records = await read_topic(env.bootstrap, env.topic("incident") + ".journal")
    comments = {k: v for k, (e, v) in written.items() if e == "comments"}
    assert {r.key.decode() for r in records if r.key} == set(comments)
    for record in records:
        assert record.key is not None
        assert record.json["value"] == hmac_hex(KEY.encode(), comments[record.key.decode()])
    logged = repr(logs)
    assert not any(value in logged for _, value in written.values())


async def _check_lines(env: Env, tables: dict[str, dict[str, Any]]) -> dict[str, CheckResult]:
    path = write_config(env.tmp_path / "check.yaml", env.document(tables))
    return {result.name: result for result in await run_checks(load_config(path, env={}))}


async def test_check_names_the_sensitive_columns_or_warns_they_are_not_verified(
    env: Env,
) -> None:
    env.emu.seed(tables=("sys_user",), rows=3)
    line = "table users sensitive columns (sensitive.fields: exclude)"
    found = await _check_lines(env, {"users": {"name": "sys_user"}})
    assert found[line].status is Status.PASS
    assert found[line].detail.endswith("excluded: u_recovery_code, user_password")
    include = await _check_lines(
        env, {"users": {"name": "sys_user", "sensitive.fields": "include"}}
    )
    assert line not in include
    env.emu.deny_table("admin", "sys_dictionary")
    refused = await _check_lines(env, {"users": {"name": "sys_user"}})
    assert refused[line].status is Status.WARN
    assert "not verified" in refused[line].detail
    assert exit_code(refused.values()) == 0


@pytest.mark.registry
async def test_avro_records_and_schema_follow_governance(
    env: Env, schema_registry: LocalRegistry
) -> None:
    env.emu.seed(tables=("sys_user",), rows=40)
    stored = {row["sys_id"]: row for row in env.emu.rows("sys_user")}
    tables = {"users": {"name": "sys_user", "value.format": "avro", "fields.mask": ["active"]}}
    settings = env.settings(
        tables, **_governed_top(), **{"schema.registry": {"url": schema_registry.url}}
    )
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "users"))
    records = await read_topic(env.bootstrap, env.topic("users"))
    assert len({r.key for r in records}) == len(stored)
    with Reader(schema_registry.url, "avro") as reader:
        subject = f"{env.topic('users')}-value"
        schema = orjson.loads(reader.client.get_latest_version(subject).schema.schema_str or "")
        types = {f["name"]: f["type"] for f in schema["fields"]}
        # Excluded and sensitive columns are not in the schema; hashed and masked are strings
        # (active is a boolean column, masked it is "****").
        assert not set(types) & {*SENSITIVE, "first_name"}
        assert types["email"] == types["active"] == ["null", "string"]
        for record in records:
            assert record.key is not None
            row = stored[record.key.decode()]
            value = reader.value(env.topic("users"), record)
            assert not set(value) & {*SENSITIVE, "first_name"}
            assert value["email"] == (
                hmac_hex(KEY.encode(), row["email"]) if row["email"] else None
            )
            assert value["active"] == (MASK if row["active"] else None)
            assert value["user_name"] == row["user_name"]
