"""What changes a table's source partition, and what does not (SPEC §7, last paragraph).

Each case edits one key of a base configuration, loads both documents through the real loader
and resolves the table with the daemon's own ``owned_specs`` / ``table_spec``: a change of
partition means the table starts again from ``start.timestamp``, so it must happen exactly for
the keys SPEC §7 lists and never for the others.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.offsets_codec import encode_key
from snowsource.core.table import TableSpec
from snowsource.engine.table_specs import owned_specs, table_spec

BASE: dict[str, Any] = {
    "name": "servicenow-source",
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "integration.user", "password": "secret-1"},
        "tables": {
            "incident": {
                "name": "incident",
                "query": "active=true^priority<=2",
            }
        },
    },
}

Edit = Callable[[dict[str, Any]], None]


def _table(doc: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = doc["snow"]["tables"]["incident"]
    return table


def _set_table(key: str, value: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        _table(doc)[key] = value

    return edit


def _set_top(key: str, value: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        doc[key] = value

    return edit


def _set_url(url: str) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        doc["snow"]["url"] = url

    return edit


def _rename_alias(doc: dict[str, Any]) -> None:
    tables = doc["snow"]["tables"]
    tables["p1_incidents"] = tables.pop("incident")


def _credentials(doc: dict[str, Any]) -> None:
    doc["snow"]["auth"] = {"type": "basic", "username": "someone.else", "password": "secret-2"}


# (id, edit): every one of these MUST give the table a new source partition.
CHANGES: list[tuple[str, Edit]] = [
    ("table-name", _set_table("name", "change_request")),
    ("query-other-terms", _set_table("query", "active=true^priority<=3")),
    ("query-extra-group", _set_table("query", "active=true^priority<=2^NQactive=false")),
    ("query-domain", _set_table("query.domain", False)),
    ("timestamp-field", _set_table("timestamp.field", "sys_created_on")),
    ("url-host", _set_url("https://other.service-now.com")),
    ("url-non-default-port", _set_url("https://acme.service-now.com:8443")),
    ("url-http-non-default-port", _set_url("http://acme.service-now.com:8080")),
]

# (id, edit): none of these may change the partition.
SAME: list[tuple[str, Edit]] = [
    ("query-reordered", _set_table("query", "priority<=2^active=true")),
    ("query-whitespace", _set_table("query", "  active=true ^  priority<=2  ")),
    ("query-trailing-eq", _set_table("query", "active=true^priority<=2^EQ")),
    ("fields", _set_table("fields", ["number", "short_description"])),
    ("display-value-true", _set_table("display.value", "true")),
    ("display-value-all", _set_table("display.value", "all")),
    ("exclude-reference-link", _set_table("exclude.reference.link", False)),
    ("query-category", _set_table("query.category", "list")),
    ("batch-size-table", _set_table("batch.size", 17)),
    ("batch-size-top", _set_top("batch.size", 250)),
    ("poll-interval", _set_table("poll.interval.ms", 60000)),
    ("poll-interval-top", _set_top("poll.interval.ms", 1234)),
    ("overlap-seconds", _set_table("overlap.seconds", 300)),
    ("overlap-seconds-top", _set_top("overlap.seconds", 0)),
    ("safety-lag-seconds", _set_table("safety.lag.seconds", 30)),
    ("safety-lag-seconds-top", _set_top("safety.lag.seconds", 0)),
    ("alias", _rename_alias),
    ("topic", _set_table("topic", "somewhere.else")),
    ("topic-prefix", _set_top("topic.prefix", "sn.")),
    ("start-timestamp", _set_table("start.timestamp", "2024-01-01 00:00:00")),
    ("url-default-port", _set_url("https://acme.service-now.com:443")),
    ("url-host-case", _set_url("https://ACME.Service-Now.com")),
    ("url-trailing-slash", _set_url("https://acme.service-now.com/")),
    ("url-scheme-default-port", _set_url("http://acme.service-now.com")),
    ("credentials", _credentials),
    ("connector-independent-keys", _set_top("dedup.max.entries", 10)),
]


def _load(tmp_path: Path, doc: dict[str, Any], name: str) -> Settings:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_config(path, env={}).settings


def _only_spec(settings: Settings) -> TableSpec:
    specs = owned_specs(settings)
    assert len(specs) == 1
    return specs[0]


def _specs(tmp_path: Path, edit: Edit) -> tuple[TableSpec, TableSpec, str]:
    edited = copy.deepcopy(BASE)
    edit(edited)
    before = _only_spec(_load(tmp_path, BASE, "before"))
    after_settings = _load(tmp_path, edited, "after")
    after = _only_spec(after_settings)
    # owned_specs must agree with table_spec, the function every other caller uses.
    alias = after.alias
    assert table_spec(after_settings, alias, after_settings.snow.tables[alias]) == after
    return before, after, after_settings.name


@pytest.mark.parametrize(("edit"), [e for _, e in CHANGES], ids=[i for i, _ in CHANGES])
def test_partition_changes(tmp_path: Path, edit: Edit) -> None:
    before, after, name = _specs(tmp_path, edit)
    assert after.partition != before.partition
    assert encode_key(name, after.partition) != encode_key(name, before.partition)


@pytest.mark.parametrize(("edit"), [e for _, e in SAME], ids=[i for i, _ in SAME])
def test_partition_does_not_change(tmp_path: Path, edit: Edit) -> None:
    before, after, name = _specs(tmp_path, edit)
    assert after.partition == before.partition
    assert encode_key(name, after.partition) == encode_key(name, before.partition)


def test_partition_fields_are_the_documented_ones(tmp_path: Path) -> None:
    spec = _only_spec(_load(tmp_path, BASE, "base"))
    assert spec.partition.as_dict() == {
        "instance": "acme.service-now.com",
        "timestamp_field": "sys_updated_on",
        "query_fingerprint": spec.partition.query_fingerprint,
        "table": "incident",
    }
    assert spec.partition.query_fingerprint.startswith("sha256:")
