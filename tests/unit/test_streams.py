"""Stream hooks and stream specs: what a delete stream and typed values change, and what not.

Shape options (``value.format``, ``value.schema``) never change which rows are read, so they
never change the source partition; ``deletes: audit`` adds a stream beside the table without
touching the table's own partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.deletes import ACCESS_HINT, delete_partition, delete_stream_spec
from snowsource.core.errors import ConfigError, TableError
from snowsource.core.grants import Priority
from snowsource.core.page import Emit, PagePlan
from snowsource.core.records import TombstoneShaper, TypedShaper
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import Page
from snowsource.engine.ports import PageSource
from snowsource.engine.snow_requests import SnowRequests
from snowsource.engine.stream_hooks import stream_hooks
from snowsource.engine.streams import DeleteHooks, StreamHooks, SweepMark, TableHooks
from snowsource.engine.table_specs import connector_specs, owned_specs, table_spec
from snowsource.observability import metrics
from snowsource.runtime.deadline import StopSignal
from tests.fakes import FakeSink, make_spec

URL = "https://acme.service-now.com"


def _requests(client: PageSource) -> SnowRequests:
    return SnowRequests(
        client, alias="incident", retry=RetryPolicy(0.01, 0.01), stop=asyncio.Event()
    )


def _hooks(specs: list[TableSpec]) -> dict[str, StreamHooks]:
    requests = _requests(_Dictionary({}))
    return {alias: make(requests) for alias, make in stream_hooks(specs).items()}


def _settings(tmp_path: Path, table: dict[str, Any], **top: Any) -> Settings:
    doc = {
        "snow": {
            "url": URL,
            "auth": {"type": "basic", "username": "u", "password": "p"},
            "tables": {"incident": {"name": "incident", **table}},
        },
        **top,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_config(path, env={}).settings


@pytest.mark.parametrize(
    "shape",
    [
        {"value.format": "typed"},
        {"value.schema": "connect"},
        {"value.format": "typed", "value.schema": "connect"},
        {"deletes": "audit"},
    ],
)
def test_shape_options_and_deletes_keep_the_tables_partition(
    tmp_path: Path, shape: dict[str, str]
) -> None:
    plain = _settings(tmp_path, {"query": "active=true"})
    shaped = _settings(tmp_path, {"query": "active=true", **shape})
    before = table_spec(plain, "incident", plain.tables["incident"])
    after = table_spec(shaped, "incident", shaped.tables["incident"])
    assert after.partition == before.partition
    assert after.partition.query_fingerprint == before.partition.query_fingerprint
    assert after.legacy_partition == before.legacy_partition
    assert (after.timestamp_field, after.id_field) == (before.timestamp_field, before.id_field)


def test_every_derived_stream_is_one_raw_pager_of_its_own_partition(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        {
            "deletes": ["audit", "reconcile"],
            "journal": True,
            "value.format": "typed",
            "value.schema": "connect",
            "display.value": "all",
            "backfill.slices": 6,
        },
    )
    table, *derived = owned_specs(settings)
    assert sorted(s.stream for s in derived) == ["deletes", "journal", "reconcile"]
    assert table.backfill_slices == 6
    for spec in derived:
        assert spec.base == table
        assert spec.alias == f"{table.alias}.{spec.stream}"
        assert spec.partition == spec.legacy_partition != table.partition
        assert (spec.value_format, spec.value_schema, spec.display_value) == (
            "string",
            "none",
            "false",
        )
        assert spec.backfill_slices == 1
        assert (spec.deletes, spec.reconcile, spec.journal) == (False, False, False)


def test_deletes_audit_adds_a_delete_stream_beside_its_table(tmp_path: Path) -> None:
    settings = _settings(tmp_path, {"deletes": "audit", "value.format": "typed"})
    table, deletes = owned_specs(settings)
    assert (table.alias, deletes.alias) == ("incident", "incident.deletes")
    assert deletes.partition == delete_partition(snow_url=URL, table="incident", query_domain=True)
    assert deletes.base == table
    assert deletes.topic == table.topic
    # Tombstones have no value to type.
    assert (deletes.value_format, deletes.value_schema) == ("string", "none")
    assert connector_specs(settings) == [table, deletes]
    assert [s.alias for s in owned_specs(_settings(tmp_path, {}))] == ["incident"]


def test_a_delete_stream_runs_in_its_tables_task(tmp_path: Path) -> None:
    doc_tables = {"a": {"name": "incident", "deletes": "audit"}, "b": {"name": "problem"}}
    found = {}
    for task in (0, 1):
        doc = {
            "tasks.max": 2,
            "task.id": task,
            "snow": {
                "url": URL,
                "auth": {"type": "basic", "username": "u", "password": "p"},
                "tables": doc_tables,
            },
        }
        path = tmp_path / f"config-{task}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        found[task] = [s.alias for s in owned_specs(load_config(path, env={}).settings)]
    owner = next(t for t, aliases in found.items() if "a" in aliases)
    assert "a.deletes" in found[owner]
    assert "a.deletes" not in found[1 - owner]


def test_typed_with_display_values_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _settings(tmp_path, {"value.format": "typed", "display.value": "true"})
    problems = dict(info.value.problems)
    assert "display.value: all" in problems["snow.tables.incident.value.format"]
    # Inherited from the top level, the table is still the one named.
    with pytest.raises(ConfigError) as info:
        _settings(tmp_path, {"display.value": True}, **{"value.format": "typed"})
    assert "snow.tables.incident.value.format" in dict(info.value.problems)
    for fine in ({"display.value": "all"}, {"display.value": "false"}):
        assert _settings(tmp_path, {"value.format": "typed", **fine}).tables["incident"]


def _emit(ts: str, ident: str, value: bytes) -> Emit:
    return Emit(("stream", "f"), ts, ident, value, (ts, ident))


def test_a_delete_stream_sends_tombstones_keyed_by_the_deleted_row() -> None:
    table = make_spec("incident", deletes=True)
    spec = delete_stream_spec(table, snow_url=URL)
    hooks = DeleteHooks(
        spec,
        mark=SweepMark(),
        requests=_requests(_Dictionary({})),
    )
    row = {
        "sys_id": "a" * 32,
        "sys_created_on": "2026-09-29 07:00:30",
        "tablename": "incident",
        "documentkey": "d" * 32,
    }
    assert isinstance(hooks.shaper, TombstoneShaper)
    value = hooks.shaper.value_bytes(row)
    emit = _emit("2026-09-29 07:00:30", "a" * 32, value)
    assert hooks.key_value(emit) == (b"d" * 32, None)
    delivery = hooks.delivery(FakeSink(), StopSignal())
    plan = PagePlan(phase="stream", fingerprint="f", emits=[emit])
    ((key, value_sent, own),) = delivery.records(plan)
    assert (key, value_sent) == (b"d" * 32, None)
    assert dict([*hooks.headers, *own]) == {
        "snow.instance": b"acme.service-now.com",
        "snow.table": b"incident",
        "snow.timestamp": b"2026-09-29 07:00:30",
        "snow.phase": b"stream",
        "snow.operation": b"delete",
        # What a restart's dedup rebuild recognises the tombstone by.
        "snow.audit_id": b"a" * 32,
    }
    error = TableError("HTTP 403: no", status=403)
    assert hooks.explain(error) == f"HTTP 403: no; {ACCESS_HINT}"
    assert hooks.explain(TableError("HTTP 400: bad", status=400)) == "HTTP 400: bad"


def test_the_delete_stream_waits_then_trails_the_tables_completed_sweeps() -> None:
    mark = SweepMark()
    table = make_spec("incident", deletes=True, safety_lag_seconds=2)
    hooks = _hooks([table, delete_stream_spec(table, snow_url=URL)])
    own, deletes = hooks["incident"], hooks["incident.deletes"]
    assert deletes.cap("2026-09-29 07:00:30") is None  # the table has not completed a sweep
    assert own.cap("2026-09-29 07:00:20") == "2026-09-29 07:00:20"
    assert deletes.cap("2026-09-29 07:00:30") is None  # begun is not completed
    own.completed("2026-09-29 07:00:20")
    assert deletes.cap("2026-09-29 07:00:30") == "2026-09-29 07:00:20"
    assert deletes.cap("2026-09-29 07:00:10") == "2026-09-29 07:00:10"
    mark.completed("2026-09-29 07:00:20")
    mark.completed("2026-09-29 07:00:05")  # never moves back
    assert mark.completed_hi == "2026-09-29 07:00:20"


def test_with_no_safety_lag_the_delete_stream_stays_a_second_behind() -> None:
    table = make_spec("incident", deletes=True, safety_lag_seconds=0)
    hooks = _hooks([table, delete_stream_spec(table, snow_url=URL)])
    hooks["incident"].cap("2026-09-29 07:00:20")
    hooks["incident"].completed("2026-09-29 07:00:20")
    assert hooks["incident.deletes"].cap("2026-09-29 07:00:30") == "2026-09-29 07:00:19"


def test_upserts_carry_the_operation_header() -> None:
    hooks = TableHooks(
        make_spec("incident"),
        requests=_requests(_Dictionary({})),
    )
    emit = _emit("2026-09-29 07:00:30", "b" * 32, b"{}")
    assert hooks.key_value(emit) == (b"b" * 32, b"{}")
    assert dict(hooks.headers)["snow.operation"] == b"upsert"
    assert dict(hooks.headers)["snow.table"] == b"incident"


class _Dictionary:
    """A Table API serving one table's schema rows, counting dictionary reads."""

    def __init__(self, cols: dict[str, str]) -> None:
        self.cols = cols
        self.dictionary_reads = 0

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page:
        if table == "sys_db_object":
            rows = [{"sys_id": "1" * 32, "name": "u_thing", "super_class": ""}]
        else:
            assert table == "sys_dictionary"
            self.dictionary_reads += 1
            rows = [
                {"sys_id": f"{i:032x}", "name": "u_thing", "element": e, "internal_type": t}
                for i, (e, t) in enumerate(sorted(self.cols.items()))
            ]
        return Page(rows=rows, status=200, date=None, total_count=None, elapsed=0.0)


async def test_typed_hooks_read_the_dictionary_again_only_for_new_columns() -> None:
    client = _Dictionary({"u_count": "integer", "sys_id": "GUID"})
    spec = make_spec("thing", name="u_thing", value_format="typed")
    hooks = TableHooks(spec, requests=_requests(client))
    await hooks.start()
    assert client.dictionary_reads == 1
    shaper = hooks.shaper
    assert isinstance(shaper, TypedShaper)
    row = {"sys_id": "c" * 32, "u_count": "3"}
    await hooks.prepare([row])
    assert client.dictionary_reads == 1
    assert orjson.loads(shaper.value_bytes(row)) == {"sys_id": "c" * 32, "u_count": 3}

    client.cols["u_score"] = "integer"
    grown = {**row, "u_score": "7", "u_note": "x"}
    await hooks.prepare([grown])
    assert client.dictionary_reads == 2
    assert orjson.loads(shaper.value_bytes(grown))["u_score"] == 7
    # u_note has no dictionary row: asked about once, then it simply stays a string.
    await hooks.prepare([grown])
    assert client.dictionary_reads == 2


async def test_unparsed_values_are_counted_for_emitted_rows_only() -> None:
    client = _Dictionary({"u_count": "integer"})
    spec = make_spec("thing_count", name="u_thing", value_format="typed")
    hooks = TableHooks(spec, requests=_requests(client))
    await hooks.start()

    def counted() -> float:
        value = metrics.REGISTRY.get_sample_value(
            "snowsource_values_unparsed_total", {"table": "thing_count"}
        )
        return value or 0.0

    before = counted()
    shaper = hooks.shaper
    emitted = {"sys_id": "e" * 32, "u_count": "n/a"}
    suppressed = {"sys_id": "f" * 32, "u_count": "n/a"}
    await hooks.prepare([emitted, suppressed])
    value = shaper.value_bytes(emitted)
    shaper.value_bytes(suppressed)  # shaped for the dedup cache, then not sent
    shaper.forget(suppressed["sys_id"])
    # The next page is prepared and shaped before this one is delivered (fetch-ahead, slices):
    # this page's row is still counted when its record is made.
    later = {"sys_id": "a" * 32, "u_count": "n/a"}
    await hooks.prepare([later])
    later_value = shaper.value_bytes(later)
    hooks.key_value(_emit("2026-09-29 07:00:30", "e" * 32, value))
    assert counted() == before + 1
    hooks.key_value(_emit("2026-09-29 07:00:31", "a" * 32, later_value))
    assert counted() == before + 2
    assert isinstance(shaper, TypedShaper)
    assert shaper.unparsed == {}, "the suppressed row's entry was forgotten"


class _Existing:
    """A Table API answering "which of these ids are rows now" for one table."""

    def __init__(self, live: set[str]) -> None:
        self.live = live
        self.queries: list[str] = []
        self.audit_probe = False  # answer the delete stream's access probe at its start

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page:
        if self.audit_probe and table == "sys_audit_delete":
            return Page(rows=[], status=200, date=None, total_count=None, elapsed=0.0)
        assert table == "incident"
        query = params["sysparm_query"]
        self.queries.append(query)
        asked = query.rsplit("sys_idIN", 1)[1].split(",")
        rows = [{"sys_id": i, "sys_updated_on": "2026-09-29 07:00:40"} for i in asked]
        rows = [r for r in rows if r["sys_id"] in self.live]
        return Page(rows=rows, status=200, date=None, total_count=None, elapsed=0.0)


async def test_a_delete_stream_leaves_out_tombstones_of_rows_that_exist_again() -> None:
    """Issue 23 item 5: a row deleted and re-created with the same sys_id between two sweeps."""
    table = make_spec("incident", deletes=True, query="active=true^NQpriority=1")
    client = _Existing({"d" * 32})
    hooks = DeleteHooks(
        delete_stream_spec(table, snow_url=URL),
        mark=SweepMark(),
        requests=_requests(client),
    )

    def audit(audit_id: str, key: str) -> dict[str, str]:
        return {
            "sys_id": audit_id,
            "sys_created_on": "2026-09-29 07:00:30",
            "tablename": "incident",
            "documentkey": key,
        }

    skip = await hooks.prepare([audit("a" * 32, "d" * 32), audit("b" * 32, "e" * 32)])
    assert skip == {"a" * 32}
    # The id condition binds to every ^NQ group of the table's query.
    (query,) = client.queries
    assert query.startswith("active=true^sys_idIN")
    assert "^NQpriority=1^sys_idIN" in query


async def test_a_delete_stream_asks_about_each_audit_row_once() -> None:
    """Issue 27: sweeps re-read their overlap window; the "do these rows exist again?" request
    is made for the audit rows not asked about yet, and the answer reused for the others
    until they fall out of the window, or until a generation starts again."""
    table = make_spec("incident", deletes=True)
    client = _Existing({"d" * 32})
    hooks = DeleteHooks(
        delete_stream_spec(table, snow_url=URL),
        mark=SweepMark(),
        requests=_requests(client),
    )

    def audit(audit_id: str, key: str, second: int) -> dict[str, str]:
        return {
            "sys_id": audit_id,
            "sys_created_on": f"2026-09-29 07:00:{second:02d}",
            "tablename": "incident",
            "documentkey": key,
        }

    first = [audit("a" * 32, "d" * 32, 30), audit("b" * 32, "e" * 32, 31)]
    assert await hooks.prepare(first) == {"a" * 32}
    assert len(client.queries) == 1
    # The next sweep re-reads both and finds a new one: only the new one is asked about.
    again = [*first, audit("c" * 32, "d" * 32, 32)]
    assert await hooks.prepare(again) == {"a" * 32, "c" * 32}
    assert len(client.queries) == 2
    assert "sys_idINd" in client.queries[1]
    assert "e" * 32 not in client.queries[1]
    assert await hooks.prepare(again) == {"a" * 32, "c" * 32}
    assert len(client.queries) == 2, "nothing new: no request"
    # Out of the next sweep's window: forgotten, and asked about again if ever read again.
    hooks.evict_older_than("2026-09-29 07:00:31")
    assert await hooks.prepare(first) == {"a" * 32}
    assert len(client.queries) == 3
    assert "d" * 32 in client.queries[2]
    assert "e" * 32 not in client.queries[2]
    # A new generation (a restart after a produce failure) asks again.
    client.audit_probe = True
    await hooks.start()
    await hooks.prepare(first)
    assert len(client.queries) == 4
