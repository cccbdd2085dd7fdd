"""Release 3 completeness keys and the derived streams they add (SPEC §14.3).

``deletes`` modes, ``reconcile.interval.seconds``, ``journal`` and ``journal.topic``: how they
are written, refused and resolved into stream specs; the journal stream's partition and headers.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.config.fields import Deletes
from snowsource.config.loader import LoadedConfig, load_config
from snowsource.core.cursor import Position
from snowsource.core.dedup import DedupCache
from snowsource.core.errors import ConfigError
from snowsource.core.grants import Priority
from snowsource.core.journal import journal_partition, journal_query
from snowsource.core.page import page_positions, plan_page
from snowsource.core.query import normalise_query
from snowsource.core.reconcile import reconcile_partition
from snowsource.core.retry import RetryPolicy
from snowsource.core.tableapi import Page
from snowsource.engine.snow_requests import SnowRequests
from snowsource.engine.stream_hooks import stream_hooks
from snowsource.engine.streams import JournalHooks, ReconcileHooks, TableHooks
from snowsource.engine.table_specs import stream_specs


class _NoSnow:
    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page:
        raise AssertionError("building hooks asks ServiceNow nothing")


BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "u", "password": "p"},
        "tables": {"incident": {"name": "incident"}},
    }
}
Load = Callable[..., LoadedConfig]


@pytest.fixture
def load(tmp_path: Path) -> Load:
    def run(table: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> LoadedConfig:
        doc = copy.deepcopy(BASE)
        doc["snow"]["tables"]["incident"].update(table or {})
        file = tmp_path / "config.yaml"
        file.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_config(file, env=env or {})

    return run


def _problems(load: Load, table: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        load(table)
    return dict(caught.value.problems)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("none", Deletes.NONE),
        ("audit", Deletes.AUDIT),
        ("Reconcile", Deletes.RECONCILE),
        (["audit", "reconcile"], Deletes.BOTH),
        (["reconcile", "audit"], Deletes.BOTH),
        (["reconcile"], Deletes.RECONCILE),
        ([], Deletes.NONE),
    ],
)
def test_deletes_modes_as_written(load: Load, written: Any, expected: Deletes) -> None:
    table = load({"deletes": written}).settings.tables["incident"]
    assert table.deletes is expected
    assert table.deletes.audit == (expected in (Deletes.AUDIT, Deletes.BOTH))
    assert table.deletes.reconcile == (expected in (Deletes.RECONCILE, Deletes.BOTH))


def test_both_modes_from_the_environment(load: Load) -> None:
    env = {"SNOWSOURCE_SNOW__TABLES__INCIDENT__DELETES": "audit,reconcile"}
    assert load(env=env).settings.tables["incident"].deletes is Deletes.BOTH


@pytest.mark.parametrize("written", ["soft", ["audit", "soft"], ["none", "audit"]])
def test_an_unknown_or_combined_none_mode_names_what_is_allowed(load: Load, written: Any) -> None:
    message = _problems(load, {"deletes": written})["snow.tables.incident.deletes"]
    assert "'none', 'audit', 'reconcile' or ['audit', 'reconcile']" in message


def test_defaults(load: Load) -> None:
    table = load().settings.tables["incident"]
    assert table.reconcile_interval_seconds == 86400
    assert table.journal is False
    assert table.journal_topic is None
    assert table.journal_output_topic == "servicenow.incident.journal"


def test_interval_must_be_positive(load: Load) -> None:
    found = _problems(load, {"deletes": "reconcile", "reconcile.interval.seconds": 0})
    assert "snow.tables.incident.reconcile.interval.seconds" in found


def test_a_view_may_not_reconcile_or_stream_its_journal(load: Load) -> None:
    view = {
        "name": "incident_sla",
        "id.field": "inc_sys_id",
        "timestamp.field": "inc_sys_updated_on",
    }
    found = _problems(load, {**view, "deletes": ["audit", "reconcile"], "journal": True})
    assert "database view" in found["snow.tables.incident.deletes"]
    assert "audit,reconcile is not possible" in found["snow.tables.incident.deletes"]
    assert "journal: false" in found["snow.tables.incident.journal"]


def test_journal_topic_without_journal_is_refused(load: Load) -> None:
    found = _problems(load, {"journal.topic": "notes"})
    assert "set journal: true" in found["snow.tables.incident.journal.topic"]


def test_every_stream_of_a_table_in_order(load: Load) -> None:
    settings = load(
        {"deletes": ["audit", "reconcile"], "journal": True, "journal.topic": "notes"}
    ).settings
    specs = stream_specs(settings, "incident", settings.tables["incident"])
    assert [(s.alias, s.stream) for s in specs] == [
        ("incident", "table"),
        ("incident.deletes", "deletes"),
        ("incident.reconcile", "reconcile"),
        ("incident.journal", "journal"),
    ]
    table, _, sweep, journal = specs
    assert sweep.topic == table.topic
    assert sweep.partition == reconcile_partition(table, snow_url=settings.snow.url)
    assert journal.topic == "notes"
    assert journal.name == "sys_journal_field"
    assert journal.normalised_query == normalise_query(journal_query("incident"))
    assert journal.partition == journal_partition(
        snow_url=settings.snow.url, table="incident", query_domain=True
    )
    assert len({s.partition for s in specs}) == 4
    requests = SnowRequests(_NoSnow(), alias="x", retry=RetryPolicy(0.1, 1), stop=asyncio.Event())
    hooks = {alias: make(requests) for alias, make in stream_hooks(specs).items()}
    assert isinstance(hooks["incident"], TableHooks)
    assert isinstance(hooks["incident.journal"], JournalHooks)
    sweep_hooks = hooks["incident.reconcile"]
    assert isinstance(sweep_hooks, ReconcileHooks)


async def test_journal_records_name_their_record_and_field(load: Load) -> None:
    settings = load({"journal": True}).settings
    journal = stream_specs(settings, "incident", settings.tables["incident"])[-1]
    hooks = JournalHooks(journal)
    rows = [
        {
            "sys_id": f"{i:032x}",
            "sys_created_on": "2026-09-29 07:00:00",
            "element_id": f"{100 + i:032x}",
            "element": "comments" if i else "work_notes",
            "name": "incident",
            "value": f"note {i}",
        }
        for i in range(3)
    ]
    await hooks.prepare(rows)
    assert hooks.record_headers is not None
    after = Position("2026-09-29 06:00:00", "")
    hi = "2026-09-29 08:00:00"
    positions = page_positions(journal, hooks.shaper, rows, after=after, hi=hi, previous=None)
    plan = plan_page(
        journal,
        hooks.shaper,
        rows,
        positions,
        phase="stream",
        cursor=after,
        late_floor=after,
        dedup=DedupCache(100),
    )
    assert len(plan.emits) == 3
    headers = {emit.id: hooks.record_headers(emit) for emit in plan.emits}
    assert headers[f"{0:032x}"] == [
        ("snow.parent_sys_id", f"{100:032x}".encode()),
        ("snow.element", b"work_notes"),
    ]
    assert headers[f"{2:032x}"][1] == ("snow.element", b"comments")
    assert dict(hooks.headers)["snow.table"] == b"sys_journal_field"
