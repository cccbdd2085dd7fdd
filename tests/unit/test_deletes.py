"""The delete stream's pure rules: partition, tombstones, and the high-water cap."""

from __future__ import annotations

import pytest

from snowsource.core.deletes import (
    cap_high_water,
    delete_alias,
    delete_partition,
    tombstone,
)
from snowsource.core.errors import TableFailedError
from snowsource.core.offsets_codec import encode_key, partition_for
from snowsource.core.query import query_fingerprint


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
