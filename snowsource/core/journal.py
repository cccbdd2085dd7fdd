"""The journal stream of a table (``journal: true``, SPEC §14.3): partition, query, headers. Pure.

Comments and work notes are not stored in the record: each entry is an insert-only row of
``sys_journal_field`` (``element_id`` = the record's sys_id, ``name`` = its table, ``element`` =
``comments`` or ``work_notes``). The stream reads them with the keyset cursor
``(sys_created_on, sys_id)`` under an ordinary source partition of its own (``table:
sys_journal_field``), like the delete stream, and writes each row as it is to
``<topic>.journal``, keyed by the journal row's own sys_id.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any, Final

from snowsource.core.dictionary import raw
from snowsource.core.governance import MASK, Action, Governance, hmac_hex
from snowsource.core.offsets_codec import SourcePartition, partition_for
from snowsource.core.query import normalise_query
from snowsource.core.table import TableSpec, derived_spec

JOURNAL_TABLE: Final = "sys_journal_field"
JOURNAL_TIMESTAMP_FIELD: Final = "sys_created_on"
JOURNAL_ELEMENTS: Final = ("comments", "work_notes")
JOURNAL_FIELDS: Final = (
    "sys_id",
    "sys_created_on",
    "sys_created_by",
    "name",
    "element",
    "element_id",
    "value",
)
#: The internal types of the journal stream's fixed schema (SPEC §15.1); the rest are strings.
JOURNAL_TYPES: Final = {"sys_created_on": "glide_date_time"}
ALIAS_SUFFIX: Final = ".journal"
PARENT_HEADER: Final = "snow.parent_sys_id"
ELEMENT_HEADER: Final = "snow.element"


def journal_query(table: str) -> str:
    """The journal stream's base query: the comments and work notes of ``table``."""
    return f"name={table}^elementIN{','.join(JOURNAL_ELEMENTS)}"


def journal_alias(alias: str) -> str:
    """How the offsets script, REST status and metrics name a table's journal stream."""
    return alias + ALIAS_SUFFIX


def journal_partition(*, snow_url: str, table: str, query_domain: bool) -> SourcePartition:
    """The source partition of ``table``'s journal stream."""
    return partition_for(
        snow_url=snow_url,
        table=JOURNAL_TABLE,
        query=journal_query(table),
        query_domain=query_domain,
        timestamp_field=JOURNAL_TIMESTAMP_FIELD,
    )


def journal_stream_spec(table: TableSpec, *, snow_url: str, topic: str) -> TableSpec:
    """The spec a keyset reader needs for ``table``'s journal stream, writing to ``topic``."""
    partition = journal_partition(
        snow_url=snow_url, table=table.name, query_domain=table.query_domain
    )
    return derived_spec(
        table,
        stream="journal",
        alias=journal_alias(table.alias),
        partition=partition,
        fields=JOURNAL_FIELDS,
        name=JOURNAL_TABLE,
        topic=topic,
        normalised_query=normalise_query(journal_query(table.name)),
        timestamp_field=JOURNAL_TIMESTAMP_FIELD,
        id_field="sys_id",
    )


def govern_entries(
    rows: Sequence[MutableMapping[str, Any]], governance: Governance
) -> frozenset[str]:
    """Apply the table's governance to its journal entries, in place (SPEC §15.2): an entry of
    an excluded journal field is not emitted (its sys_id is returned), one of a hashed or
    masked field carries the hash or the mask as its ``value``."""
    skip: set[str] = set()
    for row in rows:
        element = raw(row, "element")
        action = governance.action(element)
        if action is Action.EXCLUDE:
            skip.add(raw(row, "sys_id"))
            row.pop("value", None)  # never shaped, never logged
            continue
        text = raw(row, "value")
        if action is Action.HASH and text:
            row["value"] = hmac_hex(governance.hash_key, text)
        elif action is Action.MASK and text:
            row["value"] = MASK
    return frozenset(skip)
