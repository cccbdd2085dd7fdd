"""A table as the engine sees it: its configuration resolved into one frozen value."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from snowsource.core.governance import NO_GOVERNANCE, Governance
from snowsource.core.offsets_codec import SourcePartition

StreamKind = Literal["table", "deletes", "reconcile", "journal"]


@dataclass(frozen=True)
class TableSpec:
    """Everything a poller needs to know about its table, resolved from the configuration."""

    alias: str
    name: str
    topic: str
    normalised_query: str
    query_domain: bool
    query_category: str | None
    timestamp_field: str
    id_field: str
    fields: tuple[str, ...]
    display_value: str
    exclude_reference_link: bool
    start_timestamp: str
    batch_size: int
    poll_interval: float
    overlap_seconds: int
    safety_lag_seconds: int
    dedup_max_entries: int
    partition: SourcePartition
    legacy_partition: SourcePartition
    # Shape options: how values are written, never which rows are read (not in the partition).
    value_format: str = "string"  # "string" | "typed"
    value_schema: str = "none"  # "none" | "connect"
    deletes: bool = False  # the table has a delete stream (``deletes: audit``)
    reconcile: bool = False  # the table has a key sweep (``deletes: reconcile``)
    reconcile_interval_seconds: float = 86400.0
    journal: bool = False  # the table has a journal stream (``journal: true``)
    # What this spec streams: the table itself, or one of its derived streams.
    stream: StreamKind = "table"
    # Parallel backfill (SPEC §14.2): concurrent range pagers, rows read ahead of the prefix.
    backfill_slices: int = 1
    backfill_max_ahead_rows: int = 50000
    # Set on a derived stream only: the table whose deletes, keys or journal it reads.
    base: TableSpec | None = None
    # Field governance (SPEC §15.2): which columns leave the process, and how.
    governance: Governance = NO_GOVERNANCE

    @property
    def describe(self) -> str:
        """How diagnostics name this table's source partition."""
        p = self.partition
        return (
            f"table alias {self.alias!r} (partition table={p.table} instance={p.instance} "
            f"timestamp_field={p.timestamp_field} query_fingerprint={p.query_fingerprint})"
        )


def derived_spec(
    table: TableSpec,
    *,
    stream: StreamKind,
    alias: str,
    partition: SourcePartition,
    fields: tuple[str, ...],
    **changes: Any,
) -> TableSpec:
    """The spec of one of ``table``'s derived streams (deletes, key sweep, journal).

    What every derived stream shares: raw values as strings, no schema, no derived streams of
    its own, its own partition (the Java connector had none of these, so there is no legacy
    one to adopt), and one pager, since it never runs ahead of its table. ``changes`` holds
    what differs (the table read, its query and cursor fields, the topic).
    """
    return replace(
        table,
        alias=alias,
        fields=fields,
        display_value="false",
        exclude_reference_link=True,
        partition=partition,
        legacy_partition=partition,
        value_format="string",
        value_schema="none",
        deletes=False,
        reconcile=False,
        journal=False,
        stream=stream,
        backfill_slices=1,
        base=table,
        # Its rows are not the table's columns (audit rows, sys_ids, journal entries).
        governance=NO_GOVERNANCE,
        **changes,
    )
