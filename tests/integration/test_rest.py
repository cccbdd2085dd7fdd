"""The Kafka Connect-compatible REST API against a real daemon, Kafka and the emulator (SPEC §8)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientSession
from structlog.testing import capture_logs

from snowsource import __version__
from snowsource.api.errors import (
    ALTERED_MESSAGE,
    MUST_BE_STOPPED_MESSAGE,
    NEED_OFFSETS_MESSAGE,
    RESET_MESSAGE,
)
from snowsource.api.server import RestServer
from snowsource.config.models import Settings
from snowsource.core.assignment import assign
from snowsource.core.offsets_codec import encode_key
from snowsource.core.table import TableSpec
from snowsource.engine.supervisor import Daemon
from snowsource.engine.table_specs import table_spec
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import Record, caught_up, read_offsets, read_topic, running
from tests.polling import poll_until

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-3f9c2b7e-not-a-real-secret"


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession() as session:
        yield session


def rest_settings(env: Env, tables: dict[str, dict[str, Any]], **top: Any) -> Settings:
    """Settings with the REST API on a free port."""
    rest = {"enabled": True, "port": 0, **top.pop("rest", {})}
    return env.settings(tables, rest=rest, **top)


def rest_of(daemon: Daemon) -> RestServer:
    """The REST server the daemon serves (composed by ``snowsource.cli.run``)."""
    assert isinstance(daemon.api, RestServer)
    return daemon.api


def worker_of(daemon: Daemon) -> str:
    """The daemon's REST worker id, as the group reports it."""
    return f"127.0.0.1:{rest_of(daemon).port}"


def group_settled(a: Daemon, b: Daemon, aliases: list[str]) -> bool:
    """Both members were planned together: they agree on every table's owner, and each table
    runs at its owner only. Member keys are random, so the plan may give one member every
    table (for six tables about one run in 32): callers must not assume both run some."""
    workers = {worker_of(a): a, worker_of(b): b}
    for alias in aliases:
        owner = a.placement(alias).worker_id
        if owner is None or owner != b.placement(alias).worker_id or owner not in workers:
            return False
        if any((alias in d.pollers) != (w == owner) for w, d in workers.items()):
            return False
    return True


def base_url(daemon: Daemon) -> str:
    return f"{rest_of(daemon).url}/connectors/{daemon.settings.name}"


async def call(
    http: ClientSession,
    method: str,
    url: str,
    body: object = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One request; the JSON body parsed (None when empty), text otherwise."""
    data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
    send_headers = {"Content-Type": "application/json", **(headers or {})}
    async with http.request(method, url, data=data, headers=send_headers) as resp:
        payload = await resp.read()
        if not payload:
            return resp.status, None
        if resp.content_type == "application/json":
            return resp.status, orjson.loads(payload)
        return resp.status, payload.decode()


def spec_of(daemon: Daemon, alias: str) -> TableSpec:
    return next(s for s in daemon.specs if s.alias == alias)


def offset(spec: TableSpec, timestamp: str, sys_id: str = "", **changes: str) -> dict[str, str]:
    value = {
        "version": "1",
        "timestamp": timestamp,
        "sys_id": sys_id,
        "phase": "backfill",
        "fingerprint": spec.partition.query_fingerprint,
    }
    return {**value, **changes}


def cursor_order(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return sorted(rows, key=lambda r: (r["sys_updated_on"], r["sys_id"]))


def in_cursor_order(records: list[Record]) -> list[Record]:
    """Records sorted as the cursor reads their rows: a sliced backfill (and a replay of one)
    produces its ranges side by side, so topic order is not cursor order."""
    return sorted(records, key=lambda r: (r.headers.get("snow.timestamp", b""), r.key or b""))


async def new_records(env: Env, alias: str, before: list[Record]) -> list[Record]:
    """Records of ``alias``'s topic that were not in ``before``."""
    seen = {(r.partition, r.offset) for r in before}
    return [
        r
        for r in await read_topic(env.bootstrap, env.topic(alias))
        if (r.partition, r.offset) not in seen
    ]


async def stop(http: ClientSession, daemon: Daemon) -> None:
    status, body = await call(http, "PUT", f"{base_url(daemon)}/stop")
    assert (status, body) == (204, None)


async def resume(http: ClientSession, daemon: Daemon, *aliases: str) -> None:
    status, _ = await call(http, "PUT", f"{base_url(daemon)}/resume")
    assert status == 202
    await poll_until(caught_up(daemon, *aliases))


# ------------------------------------------------------------------------------- read side


async def test_get_shapes_metrics_health_and_state_changes(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident",), rows=120)
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        root, url, name = rest_of(daemon).url, base_url(daemon), env.name
        worker = f"127.0.0.1:{rest_of(daemon).port}"

        status, info = await call(http, "GET", f"{root}/")
        assert status == 200
        assert set(info) == {"version", "commit", "kafka_cluster_id"}
        assert isinstance(info["kafka_cluster_id"], str)
        assert info["kafka_cluster_id"]

        assert await call(http, "GET", f"{root}/connectors") == (200, [name])

        status, connector = await call(http, "GET", url)
        assert status == 200
        assert connector["name"] == name
        assert connector["type"] == "source"
        assert connector["tasks"] == [{"connector": name, "task": 0}]
        config = connector["config"]
        assert config["connector.class"] == "snowsource"
        assert config["name"] == name
        assert config["snow.tables.incident.name"] == "incident"
        assert config["snow.auth.password"] == "***"
        assert all(isinstance(v, str) for v in config.values())

        status, state = await call(http, "GET", f"{url}/status")
        assert status == 200
        assert status == 200
        assert state["name"] == name
        assert state["type"] == "source"
        running_state = {"state": "RUNNING", "worker_id": worker, "version": __version__}
        assert state["connector"] == running_state
        assert state["tasks"] == [
            {"id": 0, "state": "RUNNING", "worker_id": worker, "version": __version__}
        ]
        table = state["tables"]["incident"]
        last = cursor_order(env.emu.rows("incident"))[-1]
        assert table["state"] == "RUNNING"
        assert table["phase"] == "stream"
        assert table["cursor"] == {"timestamp": last["sys_updated_on"], "sys_id": last["sys_id"]}
        assert table["last_error"] is None
        assert isinstance(table["lag_seconds"], float)
        # The session pool (SPEC §14.1), as the instance-modelling emulator answered it.
        pool = state["servicenow"]
        assert (pool["max_concurrent_requests"], pool["requests_per_session"]) == (8, 1)
        assert pool["concurrency_limit"] == 8
        assert 1 <= pool["sessions_open"] <= 8
        assert 1 <= pool["sessions_opened"] <= env.emu.instance.statistics()["sessions_opened"]
        assert 0 <= pool["requests_in_flight"] <= 8

        status, expanded = await call(
            http, "GET", f"{root}/connectors?expand=status&expand=info&expand=bogus"
        )
        assert status == 200
        assert set(expanded) == {name}
        assert set(expanded[name]) == {"status", "info"}
        assert expanded[name]["info"]["config"] == config
        assert expanded[name]["status"]["connector"]["state"] == "RUNNING"

        await poll_until(lambda: daemon.pollers["incident"].status.committed is not None)
        committed = daemon.pollers["incident"].status.committed
        assert committed is not None
        _, listing = await call(http, "GET", f"{url}/offsets")
        assert status == 200
        assert listing == {
            "offsets": [
                {
                    "partition": spec_of(daemon, "incident").partition.as_dict(),
                    "offset": committed.as_dict(),
                }
            ]
        }
        # Canonical (HashMap) key order on the wire too.
        assert list(listing["offsets"][0]["partition"]) == [
            "instance",
            "timestamp_field",
            "query_fingerprint",
            "table",
        ]

        for path in ("", "/status", "/offsets"):
            status, error = await call(http, "GET", f"{root}/connectors/nope{path}")
            assert status == 404
            assert error["error_code"] == 404
        assert (await call(http, "GET", f"{root}/connectors/nope"))[1]["message"] == (
            "Connector nope not found"
        )
        assert (await call(http, "GET", f"{root}/connectors/nope/status"))[1]["message"] == (
            "No status found for connector nope"
        )
        assert await call(http, "PUT", f"{root}/connectors/nope/stop") == (
            404,
            {"error_code": 404, "message": "Unknown connector nope"},
        )
        status, error = await call(http, "GET", f"{root}/no/such/route")
        assert (status, error["error_code"]) == (404, 404)

        # Offsets cannot change while RUNNING: Connect's message, naming the connector.
        must_stop = MUST_BE_STOPPED_MESSAGE.format(name=name)
        assert "'/connectors/" + name + "/stop'" in must_stop
        patch = {
            "offsets": [
                {"partition": spec_of(daemon, "incident").partition.as_dict(), "offset": None}
            ]
        }
        assert await call(http, "PATCH", f"{url}/offsets", patch) == (
            400,
            {"error_code": 400, "message": must_stop},
        )
        assert await call(http, "DELETE", f"{url}/offsets") == (
            400,
            {"error_code": 400, "message": must_stop},
        )

        async with http.get(f"{root}/metrics") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            text = await resp.text()
        exposed = set(re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE))
        for metric in metrics.ALL_METRIC_NAMES:
            assert metric in exposed or f"{metric}_total" in exposed, metric
        assert 'snowsource_rows_emitted_total{table="incident"}' in text

        status, live = await call(http, "GET", f"{root}/health/live")
        assert status == 200
        assert live["status"] == "live"
        status, ready = await call(http, "GET", f"{root}/health/ready")
        assert (status, ready["status"]) == (200, "ready")

        # PAUSED: no poller runs, the task is listed PAUSED, offsets still cannot change.
        assert await call(http, "PUT", f"{url}/pause") == (202, None)
        status, state = await call(http, "GET", f"{url}/status")
        assert status == 200
        assert state["connector"]["state"] == "PAUSED"
        assert state["tasks"] == [
            {"id": 0, "state": "PAUSED", "worker_id": worker, "version": __version__}
        ]
        assert state["tables"]["incident"]["state"] == "PAUSED"
        assert state["tables"]["incident"]["committed"] == committed.as_dict()
        assert daemon.pollers == {}
        assert (await call(http, "PATCH", f"{url}/offsets", patch))[0] == 400

        await resume(http, daemon, "incident")
        status, state = await call(http, "GET", f"{url}/status")
        assert status == 200
        assert state["connector"]["state"] == "RUNNING"
        assert state["tables"]["incident"]["state"] == "RUNNING"

        before = daemon.pollers["incident"]
        assert await call(http, "POST", f"{url}/restart") == (204, None)
        assert daemon.pollers["incident"] is not before
        status, restarted = await call(http, "POST", f"{url}/restart?includeTasks=true")
        assert status == 202
        assert restarted["connector"]["state"] == "RUNNING"
        assert restarted["tasks"][0]["id"] == 0


async def test_stop_answers_204_only_after_final_offsets_are_written(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=3000)
    # One pager: with slices, records ahead of the committed prefix are expected (a restart's
    # rebuild covers them; tests/integration/test_engine_slices.py holds that bound).
    settings = rest_settings(
        env, {"incident": {"name": "incident"}}, **{"batch.size": 100, "backfill.slices": 1}
    )
    async with running(settings) as daemon:
        poller = daemon.pollers["incident"]
        # Stop while the backfill is moving: records are in flight, offsets still to write.
        await poll_until(lambda: poller.status.committed is not None, interval=0.01)
        await stop(http, daemon)
        stored = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
        records = await read_topic(env.bootstrap, env.topic("incident"))
        final = poller.status.committed
        assert final is not None
        assert stored["incident"] == final.as_dict()
        # Every record that reached Kafka is covered by the committed offset.
        newest = max(
            (r.headers["snow.timestamp"].decode(), r.key.decode()) for r in records if r.key
        )
        assert (final.timestamp, final.sys_id) == newest

        status, state = await call(http, "GET", f"{base_url(daemon)}/status")
        assert status == 200
        assert state["connector"]["state"] == "STOPPED"
        assert state["tasks"] == []
        assert state["tables"]["incident"]["state"] == "STOPPED"
        assert state["tables"]["incident"]["committed"] == final.as_dict()
        # The same fields as a running table's: no poller, so no sliced backfill.
        assert state["tables"]["incident"]["backfill"] is None
        _, connector = await call(http, "GET", base_url(daemon))
        assert connector["tasks"] == []
        # STOPPED means no requests to ServiceNow: nothing moves any more.
        assert daemon.pollers == {}
        assert await read_offsets(env.bootstrap, env.offsets_topic, env.name) == stored
        # Stop is idempotent.
        await stop(http, daemon)


# ------------------------------------------------------------------------------- recipes


async def test_recipe_rewind_one_table(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=150)
    tables = {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}}
    settings = rest_settings(env, tables, **{"overlap.seconds": 0})
    rows = cursor_order(env.emu.rows("incident"))
    rewind_to = rows[len(rows) // 2]["sys_updated_on"]
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "change_request"))
        url = base_url(daemon)
        await stop(http, daemon)
        before_inc = await read_topic(env.bootstrap, env.topic("incident"))
        before_chg = await read_topic(env.bootstrap, env.topic("change_request"))

        spec = spec_of(daemon, "incident")
        body = {
            "offsets": [{"partition": spec.partition.as_dict(), "offset": offset(spec, rewind_to)}]
        }
        assert await call(http, "PATCH", f"{url}/offsets", body) == (
            200,
            {"message": ALTERED_MESSAGE},
        )
        stored = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
        assert stored["incident"] == offset(spec, rewind_to)
        _, listing = await call(http, "GET", f"{url}/offsets")
        assert {
            "partition": spec.partition.as_dict(),
            "offset": offset(spec, rewind_to),
        } in listing["offsets"]

        await resume(http, daemon, "incident", "change_request")
        replayed = await new_records(env, "incident", before_inc)
        expected = [r["sys_id"] for r in rows if r["sys_updated_on"] >= rewind_to]
        assert [r.key.decode() for r in in_cursor_order(replayed) if r.key] == expected
        assert await new_records(env, "change_request", before_chg) == []


async def test_recipe_drop_one_table(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=80)
    tables = {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}}
    settings = rest_settings(env, tables, **{"overlap.seconds": 0})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "change_request"))
        url = base_url(daemon)
        await stop(http, daemon)
        before_inc = await read_topic(env.bootstrap, env.topic("incident"))
        before_chg = await read_topic(env.bootstrap, env.topic("change_request"))

        spec = spec_of(daemon, "incident")
        body = {"offsets": [{"partition": spec.partition.as_dict(), "offset": None}]}
        assert await call(http, "PATCH", f"{url}/offsets", body) == (
            200,
            {"message": ALTERED_MESSAGE},
        )
        stored = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
        assert set(stored) == {"change_request"}
        _, listing = await call(http, "GET", f"{url}/offsets")
        # The reset partition is still listed, its offset null, as a Connect worker lists it.
        assert [(o["partition"]["table"], o["offset"] is None) for o in listing["offsets"]] == [
            ("change_request", False),
            ("incident", True),
        ]

        await resume(http, daemon, "incident", "change_request")
        replayed = await new_records(env, "incident", before_inc)
        # No offset: the table starts again from its start.timestamp, every row once more.
        assert [r.key.decode() for r in in_cursor_order(replayed) if r.key] == [
            r["sys_id"] for r in cursor_order(env.emu.rows("incident"))
        ]
        assert await new_records(env, "change_request", before_chg) == []


async def test_recipe_reset_all(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=60)
    tables = {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}}
    settings = rest_settings(env, tables, **{"overlap.seconds": 0})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "change_request"))
        url = base_url(daemon)
        await stop(http, daemon)
        assert set(await read_offsets(env.bootstrap, env.offsets_topic, env.name)) == {
            "incident",
            "change_request",
        }
        before = {a: await read_topic(env.bootstrap, env.topic(a)) for a in tables}

        assert await call(http, "DELETE", f"{url}/offsets") == (200, {"message": RESET_MESSAGE})
        assert await read_offsets(env.bootstrap, env.offsets_topic, env.name) == {}
        # Like Connect right after DELETE: every reset partition, its offset null.
        reset = [
            {"partition": spec_of(daemon, alias).partition.as_dict(), "offset": None}
            for alias in sorted(tables)
        ]
        assert await call(http, "GET", f"{url}/offsets") == (200, {"offsets": reset})
        # Idempotent, like Connect.
        assert await call(http, "DELETE", f"{url}/offsets") == (200, {"message": RESET_MESSAGE})

        await resume(http, daemon, *tables)
        for alias in tables:
            replayed = await new_records(env, alias, before[alias])
            assert [r.key.decode() for r in in_cursor_order(replayed) if r.key] == [
                r["sys_id"] for r in cursor_order(env.emu.rows(alias))
            ]


async def test_patch_with_reordered_partition_keys_lands_on_the_canonical_key(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=60)
    settings = rest_settings(env, {"incident": {"name": "incident"}}, **{"overlap.seconds": 0})
    rows = cursor_order(env.emu.rows("incident"))
    resume_after = rows[40]
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        url = base_url(daemon)
        await stop(http, daemon)
        before = await read_topic(env.bootstrap, env.topic("incident"))
        spec = spec_of(daemon, "incident")
        p = spec.partition
        value = offset(spec, resume_after["sys_updated_on"], resume_after["sys_id"])
        # The reverse of the canonical key order (orjson keeps insertion order).
        reordered = dict(reversed(list(p.as_dict().items())))
        raw = orjson.dumps({"offsets": [{"partition": reordered, "offset": value}]})
        assert raw.index(b'"table"') < raw.index(b'"instance"')
        assert await call(http, "PATCH", f"{url}/offsets", raw=raw) == (
            200,
            {"message": ALTERED_MESSAGE},
        )
        canonical = encode_key(env.name, p)
        written = await read_topic(env.bootstrap, env.offsets_topic)
        assert {r.key for r in written} == {canonical}
        assert orjson.loads(written[-1].value or b"null") == value

        await resume(http, daemon, "incident")
        assert daemon.pollers["incident"].status.window_start == resume_after["sys_updated_on"]
        replayed = await new_records(env, "incident", before)
        assert [r.key.decode() for r in in_cursor_order(replayed) if r.key] == [
            r["sys_id"] for r in rows[41:]
        ]


# ------------------------------------------------------------------------------- refusals


async def test_bad_patch_bodies_are_refused_and_nothing_is_written(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        url = base_url(daemon)
        await stop(http, daemon)
        topic_before = await read_topic(env.bootstrap, env.offsets_topic)
        listing_before = await call(http, "GET", f"{url}/offsets")
        spec = spec_of(daemon, "incident")
        partition = spec.partition.as_dict()
        good = offset(spec, "2026-09-01 00:00:00")

        def one(value: object, part: object = partition) -> dict[str, object]:
            return {"offsets": [{"partition": part, "offset": value}]}

        need = {"error_code": 400, "message": NEED_OFFSETS_MESSAGE}
        assert await call(http, "PATCH", f"{url}/offsets", {}) == (400, need)
        assert await call(http, "PATCH", f"{url}/offsets", {"offsets": []}) == (400, need)
        assert await call(http, "PATCH", f"{url}/offsets", {"offsets": None}) == (400, need)
        assert await call(http, "PATCH", f"{url}/offsets", raw=b"") == (400, need)

        cases: list[tuple[object, str]] = [
            (one({**good, "version": "2"}), "unsupported offset version '2'"),
            (one({**good, "fingerprint": "sha256:" + "0" * 64}), "fingerprint"),
            (one({**good, "timestamp": "2026-09-01T00:00:00"}), "is not formatted YYYY-MM-DD"),
            (one({**good, "timestamp": "2026-02-30 00:00:00"}), "not a real date"),
            (one({**good, "phase": "later"}), "unknown phase"),
            (one({**good, "extra": "x"}), "unexpected key"),
            (one(good, {**partition, "table": "nope"}), "no configured table"),
            (one(good, {"table": "incident"}), "not a snowsource partition"),
            (one(good, None), "partition"),
            ({"offsets": "all"}, "offsets"),
            # One good pair beside a bad one: nothing at all is written.
            (
                {
                    "offsets": [
                        {"partition": partition, "offset": good},
                        {"partition": partition, "offset": {**good, "version": "9"}},
                    ]
                },
                "offsets[1]",
            ),
        ]
        for body, problem in cases:
            status, error = await call(http, "PATCH", f"{url}/offsets", body)
            assert status == 400, body
            assert error["error_code"] == 400
            assert problem in error["message"], (problem, error["message"])
        status, error = await call(http, "PATCH", f"{url}/offsets", raw=b"{not json")
        assert status == 400
        assert "not valid JSON" in error["message"]

        assert await read_topic(env.bootstrap, env.offsets_topic) == topic_before
        assert await call(http, "GET", f"{url}/offsets") == listing_before


async def test_partitions_of_another_task_are_refused(env: Env, http: ClientSession) -> None:
    owners = assign(["a", "b"], 2)
    assert owners["a"] != owners["b"]
    env.emu.seed(tables=("incident", "change_request"), rows=20)
    tables = {"a": {"name": "incident"}, "b": {"name": "change_request"}}
    mine = "b" if owners["b"] == 0 else "a"
    theirs = "a" if mine == "b" else "b"
    settings = rest_settings(env, tables, **{"tasks.max": 2, "task.id": 0})
    async with running(settings) as daemon:
        assert [s.alias for s in daemon.specs] == [mine]
        await poll_until(caught_up(daemon, mine))
        url = base_url(daemon)
        await stop(http, daemon)
        topic_before = await read_topic(env.bootstrap, env.offsets_topic)
        other = table_spec(settings, theirs, settings.tables[theirs])
        body = {"offsets": [{"partition": other.partition.as_dict(), "offset": None}]}
        status, error = await call(http, "PATCH", f"{url}/offsets", body)
        assert status == 400
        assert f"table alias {theirs!r} belongs to task 1 (tasks.max=2)" in error["message"]
        assert await read_topic(env.bootstrap, env.offsets_topic) == topic_before

        own = spec_of(daemon, mine)
        body = {"offsets": [{"partition": own.partition.as_dict(), "offset": None}]}
        assert (await call(http, "PATCH", f"{url}/offsets", body))[0] == 200


# ------------------------------------------------------------------------------- health, auth


async def test_ready_is_503_when_every_table_failed_and_restart_recovers(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=20)
    env.emu.deny_table("admin", "incident")
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        ready_url = f"{rest_of(daemon).url}/health/ready"
        await poll_until(lambda: daemon.pollers["incident"].status.state == "FAILED")
        status, body = await call(http, "GET", ready_url)
        assert status == 503
        assert body["error_code"] == 503
        assert "every table has FAILED (incident)" in body["message"]

        status, state = await call(http, "GET", f"{base_url(daemon)}/status")
        assert status == 200
        assert state["connector"]["state"] == "FAILED"
        assert state["tasks"][0]["state"] == "FAILED"
        assert state["tasks"][0]["trace"].startswith("incident: ")
        assert state["tables"]["incident"]["last_error"]
        # Live is about the process, not the tables.
        assert (await call(http, "GET", f"{rest_of(daemon).url}/health/live"))[0] == 200

        env.emu.clear_acls()
        status, state = await call(
            http, "POST", f"{base_url(daemon)}/restart?includeTasks=true&onlyFailed=true"
        )
        assert status == 202
        assert state["connector"]["state"] == "RUNNING"
        await poll_until(caught_up(daemon, "incident"))
        status, body = await call(http, "GET", ready_url)
        assert (status, body["status"]) == (200, "ready")


async def test_bearer_token_guards_every_request_but_liveness(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=10)
    settings = rest_settings(env, {"incident": {"name": "incident"}}, rest={"auth.token": TOKEN})
    with capture_logs() as logs:
        async with running(settings) as daemon:
            root = rest_of(daemon).url
            good = {"Authorization": f"Bearer {TOKEN}"}
            for path in (
                "/",
                "/connectors",
                f"/connectors/{env.name}/status",
                "/metrics",
                "/health/ready",
            ):
                status, body = await call(http, "GET", f"{root}{path}")
                assert status == 401, path
                assert body["error_code"] == 401
                assert (
                    await call(
                        http, "GET", f"{root}{path}", headers={"Authorization": "Bearer nope"}
                    )
                )[0] == 401
                assert (await call(http, "GET", f"{root}{path}", headers={"Authorization": TOKEN}))[
                    0
                ] == 401
                assert (await call(http, "GET", f"{root}{path}", headers=good))[0] == 200, path
            assert (await call(http, "PUT", f"{base_url(daemon)}/stop"))[0] == 401
            assert daemon.pollers
            assert (await call(http, "GET", f"{root}/health/live"))[0] == 200
    assert TOKEN not in repr(logs)


def test_every_metric_is_documented() -> None:
    text = (REPO / "docs" / "metrics.md").read_text()
    for name in metrics.ALL_METRIC_NAMES:
        assert f"`{name}" in text, name


async def test_patch_null_also_drops_the_tables_legacy_offset(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=40)
    # A reordered query: the Java connector's (legacy) fingerprint differs from ours.
    tables = {"incident": {"name": "incident", "query": "priority!=9^active=true"}}
    settings = rest_settings(env, tables, **{"overlap.seconds": 0})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        url = base_url(daemon)
        await stop(http, daemon)
        spec = spec_of(daemon, "incident")
        assert spec.legacy_partition != spec.partition
        store = daemon.store
        assert store is not None
        legacy = {**offset(spec, "2030-01-01 00:00:00")}
        legacy["fingerprint"] = spec.legacy_partition.query_fingerprint
        await store.write(spec.legacy_partition, orjson.dumps(legacy))
        before = await read_topic(env.bootstrap, env.topic("incident"))

        body = {"offsets": [{"partition": spec.partition.as_dict(), "offset": None}]}
        assert (await call(http, "PATCH", f"{url}/offsets", body))[0] == 200
        assert await read_offsets(env.bootstrap, env.offsets_topic, env.name) == {}

        await resume(http, daemon, "incident")
        replayed = await new_records(env, "incident", before)
        # Not adopted from the (far-future) legacy offset: replayed from start.timestamp.
        expected = [
            r["sys_id"]
            for r in cursor_order(env.emu.rows("incident"))
            if r["active"] == "true" and r["priority"] != "9"
        ]
        assert [r.key.decode() for r in in_cursor_order(replayed) if r.key] == expected
