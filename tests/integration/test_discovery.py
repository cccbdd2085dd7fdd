"""``snow.discover`` end to end (SPEC §15.2): the emulator's whole instance, a real broker."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from snowsource.cli.check import Status, exit_code, run_checks
from snowsource.cli.offsets import amain as offsets_amain
from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.table_status import TableState
from snowsource.emulator.catalog import ACL_EMPTY, CATALOG_PATH, FORBIDDEN, whole_instance
from snowsource.emulator.journal import Request
from snowsource.engine.supervisor import Daemon
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import (
    Record,
    read_offsets,
    read_topic,
    running,
    settings_from,
    write_config,
)
from tests.integration.test_rest import base_url, call
from tests.polling import poll_until

ROWS = 3


def discover_settings(
    env: Env, discover: dict[str, Any], tables: dict[str, Any] | None = None
) -> Settings:
    document = env.document(tables or {}, **{"topic.prefix": f"{env.name}."})
    document["snow"]["discover"] = discover
    return settings_from(env.tmp_path, document)


def streaming(daemon: Daemon, names: set[str]) -> bool:
    pollers = daemon.pollers
    return set(pollers) >= names and all(pollers[n].status.caught_up for n in names)


async def test_extends_include_exclude_select_exactly_the_expected_tables(env: Env) -> None:
    whole_instance(env.emu, rows=ROWS)
    settings = discover_settings(
        env,
        {"extends": ["task", "cmdb_ci"], "exclude": ["sc_*"], "template": {"batch.size": 50}},
        tables={"incident": {"name": "incident"}},
    )
    expected_task = {
        "task",
        "change_request",
        "problem",
        "change_task",
        "incident_task",
        "problem_task",
        "u_priority_incident",
    }
    expected_ci = {
        "cmdb_ci",
        "cmdb_ci_server",
        "cmdb_ci_hardware",
        "cmdb_ci_computer",
        "cmdb_ci_linux_server",
        "cmdb_ci_win_server",
        "cmdb_ci_appl",
        "cmdb_ci_database",
        "cmdb_ci_service",
        "cmdb_ci_netgear",
    }
    expected = expected_task | expected_ci
    async with running(settings) as daemon:
        await poll_until(lambda: streaming(daemon, expected | {"incident"}), timeout=60)
        pollers = daemon.pollers
        assert set(pollers) == expected | {"incident"}
        for name in expected:
            assert pollers[name].spec.topic == f"{env.name}.{name}"
            assert pollers[name].spec.batch_size == 50
        # The explicit entry keeps its own settings (its topic), never discovered twice.
        assert pollers["incident"].spec.topic == env.topic("incident")
    records = await read_topic(env.bootstrap, f"{env.name}.problem")
    assert len({r.key for r in records}) == ROWS


def latest(records: list[Record]) -> dict[str, dict[str, Any]]:
    """The last value of each key."""
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        assert record.key is not None
        assert record.value is not None
        found[record.key.decode()] = json.loads(record.value)
    return found


async def test_views_stream_by_their_base_tables_prefixed_cursor(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    whole_instance(env.emu, rows=ROWS)
    emu = env.emu
    incidents = [
        emu.insert("incident", {"short_description": f"view {i}", "priority": str(i + 1)})
        for i in range(3)
    ]
    emu.insert("task_sla", {"task": incidents[0]["sys_id"], "stage": "in_progress"})
    cis = [emu.insert("cmdb_ci", {"name": f"ci {i}"}) for i in range(2)]
    # A view over sys_user carries its password2 column as usr_user_password.
    emu.create_view("u_user_view", {"usr": "sys_user"})
    secret = "view-secret-Hunter2"
    emu.insert("sys_user", {"user_name": "viewer", "user_password": secret})
    template = {"value.format": "typed", "fields.exclude": ["*_sys_id"]}
    settings = discover_settings(env, {"include": ["*_view"], "views": True, "template": template})
    views = {"incident_sla_view", "u_ci_view", "u_user_view"}
    view_tables: list[Request] = []
    emu.on_request(lambda r: view_tables.append(r) if r.table == "sys_db_view_table" else None)
    async with running(settings) as daemon:
        await poll_until(lambda: streaming(daemon, views), timeout=60)
        assert set(daemon.pollers) == views
        # The discovery pages sys_db_view_table once: a page, then the empty page that ends it
        # (ACLs shorten pages: only an empty one ends the keyset). Dictionary reads ask by view.
        discovery_reads = [r for r in view_tables if "view=" not in r.params["sysparm_query"]]
        assert [r.rows for r in discovery_reads] == [len(emu.rows("sys_db_view_table")), 0]
        spec = daemon.pollers["incident_sla_view"].spec
        assert (spec.timestamp_field, spec.id_field) == ("inc_sys_updated_on", "inc_sys_id")
        assert spec.topic == f"{env.name}.incident_sla_view"
        assert daemon.pollers["u_ci_view"].spec.id_field == "ci_sys_id"
        # A later change of the first table's row reaches the view's topic.
        emu.update("incident", incidents[1]["sys_id"], {"short_description": "changed"})
        topic = f"{env.name}.incident_sla_view"

        async def changed() -> bool:
            values = latest(await read_topic(env.bootstrap, topic)).values()
            return any(v["inc_short_description"] == "changed" for v in values)

        await poll_until(changed, timeout=60, interval=0.5)
    last = latest(await read_topic(env.bootstrap, topic))
    # Every row of the view, keyed by its base table's sys_id (one row per incident here).
    assert set(last) == {r["sys_id"] for r in emu.rows("incident")}
    first = last[incidents[0]["sys_id"]]
    # Typed by incident's and task_sla's dictionaries, under their prefixes.
    assert first["inc_priority"] == 1
    assert first["sla_stage"] == "in_progress"
    # "*_sys_id" excludes the joined table's key, never the view's cursor field.
    assert first["inc_sys_id"] == incidents[0]["sys_id"]
    assert "sla_sys_id" not in first
    ci_keys = set(latest(await read_topic(env.bootstrap, f"{env.name}.u_ci_view")))
    assert ci_keys == {r["sys_id"] for r in emu.rows("cmdb_ci")} >= {c["sys_id"] for c in cis}
    # Sensitive columns of a view's tables are excluded like the tables' own.
    users = await read_topic(env.bootstrap, f"{env.name}.u_user_view")
    assert {json.loads(r.value or b"{}")["usr_user_name"] for r in users} >= {"viewer", "admin"}
    assert all(b"usr_user_password" not in (r.value or b"") for r in users)
    assert all(secret.encode() not in (r.value or b"") for r in users)
    assert secret not in "".join(capsys.readouterr())
    # `offsets list` reads the views by the same prefixed fields: their offsets are theirs,
    # not orphaned (the source partition names the prefixed timestamp field).
    document = env.document({}, **{"topic.prefix": f"{env.name}."})
    document["snow"]["discover"] = {"include": ["*_view"], "views": True, "template": template}
    path = write_config(env.tmp_path / "offsets.yaml", document)
    assert await offsets_amain(["list", "--config", str(path)]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    for name in views:
        assert [name, name] in [line[:2] for line in lines], lines
    assert not [line for line in lines if line[:1] == ["orphaned"]], lines


async def test_unreadable_skipped_new_table_starts_removed_table_stops(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    whole_instance(env.emu, rows=ROWS)
    asked: list[str] = []

    def seen(request: Request) -> None:
        if request.table in (FORBIDDEN, ACL_EMPTY, "sys_db_view_table"):
            asked.append(request.table)

    env.emu.on_request(seen)
    interval = 2
    settings = discover_settings(env, {"include": ["u_*"], "interval.seconds": interval})
    custom = {"u_vendor_contract", "u_site", "u_badge", "u_asset_note", "u_priority_incident"}
    async with running(settings) as daemon:
        discoverer = daemon.discoverer
        assert discoverer is not None
        await poll_until(lambda: streaming(daemon, custom), timeout=60)
        assert set(daemon.pollers) == custom  # no view, no u_Legacy_Import, no unreadable one
        statuses = daemon.statuses()
        for name in (FORBIDDEN, ACL_EMPTY):
            assert statuses[name].state == TableState.SKIPPED
        assert "403" in (statuses[FORBIDDEN].last_error or "")
        assert "hidden by ACL" in (statuses[ACL_EMPTY].last_error or "")
        labels = {"table": FORBIDDEN, "state": "SKIPPED"}
        assert metrics.REGISTRY.get_sample_value("snowsource_table_state", labels) == 1

        # A table created while running (the emulator's control call) starts within the interval.
        before = {n: daemon.pollers[n] for n in custom}
        emitted = {n: p.status.rows_emitted for n, p in before.items()}
        async with aiohttp.ClientSession() as http:
            body = {"name": "u_new_table", "rows": 2}
            async with http.post(env.url + CATALOG_PATH, json=body) as response:
                assert response.status == 201
        await poll_until(lambda: streaming(daemon, {"u_new_table"}), timeout=interval * 3 + 10)
        assert daemon.pollers["u_new_table"].status.rows_emitted == 2

        # Unreadable tables are asked once per discovery, never in a loop.
        discoveries = discoverer.state.discoveries
        assert 0 < asked.count(FORBIDDEN) <= discoveries + 1
        assert 0 < asked.count(ACL_EMPTY) <= discoveries + 1
        assert "sys_db_view_table" not in asked  # views: false asks nothing about views

        # A table no longer in sys_db_object stops; the others run on undisturbed.
        row = next(r for r in env.emu.rows("sys_db_object") if r["name"] == "u_badge")
        env.emu.delete("sys_db_object", row["sys_id"])
        await poll_until(lambda: "u_badge" not in daemon.pollers, timeout=interval * 3 + 10)

        def badge_state() -> float | None:
            labels = {"table": "u_badge", "state": "RUNNING"}
            return metrics.REGISTRY.get_sample_value("snowsource_table_state", labels)

        # Its gauges go with it (a table that runs nowhere has no state); the others keep theirs.
        await poll_until(lambda: badge_state() is None, timeout=10)
        labels = {"table": "u_site", "state": "RUNNING"}
        assert metrics.REGISTRY.get_sample_value("snowsource_table_state", labels) == 1
        for name in custom - {"u_badge"}:
            assert daemon.pollers[name] is before[name]  # the same generation, not restarted
            assert daemon.pollers[name].status.rows_emitted == emitted[name]  # nothing re-read
    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    assert "u_badge" in offsets  # its offset stays
    assert "u_new_table" in offsets
    # `offsets list` runs one discovery: u_badge is orphaned, the discovered ones are not.
    document = env.document({}, **{"topic.prefix": f"{env.name}."})
    document["snow"]["discover"] = {"include": ["u_*"]}
    path = write_config(env.tmp_path / "offsets.yaml", document)
    capsys.readouterr()
    assert await offsets_amain(["list", "--config", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["orphaned", "u_badge"] for line in lines if line.split())
    for name in ("u_site", "u_new_table"):
        assert any(line.split()[:2] == [name, name] for line in lines if line.split()), lines


async def test_check_lists_the_discovery_and_says_skipped(env: Env) -> None:
    whole_instance(env.emu, rows=ROWS)
    document = env.document({}, **{"topic.prefix": f"{env.name}."})
    document["snow"]["discover"] = {"include": ["u_*"]}
    path = write_config(env.tmp_path / "check.yaml", document)
    results = {r.name: r for r in await run_checks(load_config(path, env={}))}
    line = results["discovery"]
    assert line.status == Status.PASS
    assert line.detail.startswith("5 readable tables selected: u_asset_note, u_badge")
    assert "u_Legacy_Import" in " ".join(line.notes)
    for name in (FORBIDDEN, ACL_EMPTY):
        skipped = results[f"table {name} readable"]
        assert skipped.status == Status.WARN
        assert skipped.detail.startswith("SKIPPED: ")
    assert exit_code(results.values()) == 0


async def test_a_view_with_several_rows_per_base_row_fails_rather_than_skip_rows(
    env: Env,
) -> None:
    whole_instance(env.emu, rows=ROWS)
    incident = env.emu.insert("incident", {"short_description": "two SLAs"})
    for stage in ("in_progress", "paused"):
        env.emu.insert("task_sla", {"task": incident["sys_id"], "stage": stage})
    settings = discover_settings(env, {"include": ["incident_sla_view"], "views": True})
    async with running(settings) as daemon:
        await poll_until(
            lambda: (
                "incident_sla_view" in daemon.pollers
                and daemon.pollers["incident_sla_view"].status.state == TableState.FAILED
            ),
            timeout=60,
        )
        error = daemon.pollers["incident_sla_view"].status.last_error or ""
    assert "two rows share the cursor key" in error
    assert "inc_sys_id is not unique" in error


async def test_views_without_a_prefix_or_with_a_template_they_cannot_have_are_skipped(
    env: Env,
) -> None:
    whole_instance(env.emu, rows=ROWS)
    ci_view = next(r for r in env.emu.rows("sys_db_object") if r["name"] == "u_ci_view")
    for row in env.emu.rows("sys_db_view_table"):
        if row["view"] == ci_view["sys_id"]:
            env.emu.delete("sys_db_view_table", row["sys_id"])

    async def check(template: dict[str, Any]) -> dict[str, Any]:
        document = env.document({}, **{"topic.prefix": f"{env.name}."})
        document["snow"]["discover"] = {"include": ["*_view"], "views": True, "template": template}
        path = write_config(env.tmp_path / "check.yaml", document)
        return {r.name: r for r in await run_checks(load_config(path, env={}))}

    results = await check({})
    assert results["discovery"].detail == "1 readable tables selected: incident_sla_view"
    skipped = results["table u_ci_view readable"]
    assert skipped.status == Status.WARN
    assert skipped.detail.startswith(
        "SKIPPED: database view u_ci_view: no joined table with a variable prefix in "
        "sys_db_view_table"
    )
    # deletes: audit suits the tables; a view (no audit of its own) is SKIPPED, saying why.
    results = await check({"deletes": "audit"})
    assert results["discovery"].status == Status.WARN  # nothing readable selected
    reason = results["table incident_sla_view readable"].detail
    assert reason.startswith("SKIPPED: database view incident_sla_view (read by inc_sys_updated_on")
    assert "snow.discover.template.deletes: audit is not possible" in reason


async def test_rest_status_shows_skipped_tables_with_their_reason(env: Env) -> None:
    whole_instance(env.emu, rows=ROWS)
    document = env.document(
        {}, **{"topic.prefix": f"{env.name}.", "rest": {"enabled": True, "port": 0}}
    )
    document["snow"]["discover"] = {"include": ["u_*"]}
    settings = settings_from(env.tmp_path, document)
    async with running(settings) as daemon:
        discoverer = daemon.discoverer
        assert discoverer is not None
        await poll_until(lambda: discoverer.state.discoveries >= 1, timeout=60)
        async with aiohttp.ClientSession() as http:
            status, body = await call(http, "GET", f"{base_url(daemon)}/status")
    assert status == 200
    tables = body["tables"]
    assert tables[FORBIDDEN]["state"] == "SKIPPED"
    assert "403" in tables[FORBIDDEN]["last_error"]
    assert tables[ACL_EMPTY]["state"] == "SKIPPED"
    assert tables[FORBIDDEN]["topic"] == f"{env.name}.{FORBIDDEN}"
    assert "u_site" in tables  # a discovered table is listed under its name
    # Five readable u_ tables and four backfill slots: whoever waits shows its place.
    for name in ("u_asset_note", "u_badge", "u_priority_incident", "u_site", "u_vendor_contract"):
        entry = tables[name]
        if entry["state"] == "QUEUED":
            assert entry["queue_position"] >= 1
        else:
            assert entry["queue_position"] is None
