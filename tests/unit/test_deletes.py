"""The delete stream's pure rules: partition, tombstones, and the high-water cap."""

from __future__ import annotations

import pytest

from snowsource.core.deletes import (
    cap_high_water,
    delete_alias,
    delete_partition,
    delete_stream_spec,
    tombstone,
)
from snowsource.core.errors import TableFailedError
from snowsource.core.offsets_codec import encode_key, partition_for
from snowsource.core.query import query_fingerprint
from snowsource.core.table import TableSpec


def test_delete_partition_is_an_ordinary_partition_of_the_audit_table() -> None:
    part = delete_partition(
        snow_url="https://Acme.service-now.com/", table="incident", query_domain=True
    )
    assert part.as_dict() == {
        "instance": "acme.service-now.com",
        "timestamp_field": "sys_created_on",
        "query_fingerprint": query_fingerprint("sys_audit_delete", "tablename=incident", True),
        "table": "sys_audit_delete",
    }
    # It never collides with the table's own partition, nor with another table's deletes.
    own = partition_for(
        snow_url="https://acme.service-now.com",
        table="incident",
        query="",
        query_domain=True,
        timestamp_field="sys_updated_on",
    )
    other = delete_partition(
        snow_url="https://acme.service-now.com", table="change_request", query_domain=True
    )
    keys = {encode_key("c", p) for p in (part, own, other)}
    assert len(keys) == 3
    no_domain = delete_partition(
        snow_url="https://acme.service-now.com", table="incident", query_domain=False
    )
    assert no_domain.query_fingerprint != part.query_fingerprint
    assert delete_alias("incident") == "incident.deletes"


def test_tombstone_from_an_audit_row() -> None:
    row = {
        "sys_id": "a" * 32,
        "sys_created_on": "2026-09-29 07:00:30",
        "tablename": "incident",
        "documentkey": "d" * 32,
    }
    stone = tombstone(row, "incident")
    assert (stone.key, stone.timestamp, stone.audit_id) == (
        "d" * 32,
        "2026-09-29 07:00:30",
        "a" * 32,
    )
    with pytest.raises(TableFailedError, match="is for table 'change_request', not 'incident'"):
        tombstone({**row, "tablename": "change_request"}, "incident")
    with pytest.raises(TableFailedError, match="no documentkey"):
        tombstone({**row, "documentkey": ""}, "incident")


def test_delete_stream_never_runs_ahead_of_its_table() -> None:
    assert cap_high_water("2026-09-29 07:00:30", None) is None
    assert cap_high_water("2026-09-29 07:00:30", "2026-09-29 07:00:10") == "2026-09-29 07:00:10"
    assert cap_high_water("2026-09-29 07:00:05", "2026-09-29 07:00:10") == "2026-09-29 07:00:05"


def test_delete_stream_spec_reads_the_audit_table_for_its_table() -> None:
    url = "https://acme.service-now.com"
    table = TableSpec(
        alias="incident",
        name="incident",
        topic="servicenow.incident",
        normalised_query="active=true",
        query_domain=False,
        query_category="replica",
        timestamp_field="sys_updated_on",
        id_field="sys_id",
        fields=("number",),
        display_value="all",
        exclude_reference_link=False,
        start_timestamp="2024-01-01 00:00:00",
        batch_size=500,
        poll_interval=5.0,
        overlap_seconds=10,
        safety_lag_seconds=2,
        dedup_max_entries=1000,
        partition=partition_for(
            snow_url=url,
            table="incident",
            query="active=true",
            query_domain=False,
            timestamp_field="sys_updated_on",
        ),
        legacy_partition=partition_for(
            snow_url=url,
            table="incident",
            query="active=true",
            query_domain=False,
            timestamp_field="sys_updated_on",
        ),
    )
    spec = delete_stream_spec(table, snow_url=url)
    assert (spec.alias, spec.name, spec.topic) == (
        "incident.deletes",
        "sys_audit_delete",
        "servicenow.incident",
    )
    # The table's own query does not filter deletes: a deleted row no longer matches anything.
    assert spec.normalised_query == "tablename=incident"
    assert (spec.timestamp_field, spec.id_field) == ("sys_created_on", "sys_id")
    assert spec.fields == ("sys_id", "sys_created_on", "tablename", "documentkey")
    assert (spec.display_value, spec.exclude_reference_link) == ("false", True)
    assert spec.partition == delete_partition(snow_url=url, table="incident", query_domain=False)
    assert spec.legacy_partition == spec.partition
    assert (spec.start_timestamp, spec.batch_size, spec.query_category) == (
        "2024-01-01 00:00:00",
        500,
        "replica",
    )
