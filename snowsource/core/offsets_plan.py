"""Offsets administration logic shared by the offsets script and the REST API (SPEC §8).

Pure: no I/O. Given what the offsets topic holds for one connector (``StoredEntry`` records) and
the configured tables, this module

* classifies every stored partition (which alias uses it, or why none does) and builds the
  Connect REST listing ``{"offsets":[{"partition":{...},"offset":{...}}]}``;
* validates a submitted ``(partition, offset)`` pair exactly as the daemon validates a stored
  offset (``validate_offset`` against the matching configured partition), turning it into an
  ``OffsetChange`` whose key bytes are canonical whatever key order the submitter used;
* builds the offsets ``rewind`` and ``set`` write.

Partitions no configured table uses: a ``null`` offset (delete) is always accepted for a
partition of our shape, so orphaned and stale offsets can be cleaned up; a non-null offset is
accepted only when the caller allows it (``allow_unconfigured``: ``offsets import`` does, to move
a connector between clusters with the offsets of removed tables) and is then validated against
that partition itself. Otherwise it is refused, because no table would ever read it and a typo in
a partition would look like a successful rewind. Partitions that are not snowsource's
four-key shape are always refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

import orjson

from snowsource.core.errors import OffsetError
from snowsource.core.offsets_codec import (
    SourceOffset,
    SourcePartition,
    StoredEntry,
    encode_key,
    java_hashmap_order,
    parse_key,
    validate_offset,
)

__all__ = [
    "ConfiguredTable",
    "ListedOffset",
    "Match",
    "OffsetChange",
    "connect_listing",
    "list_offsets",
    "parse_offsets_document",
    "rest_listing",
    "rewind_offset",
    "set_offset",
    "validate_change",
    "validate_changes",
]

# validate_offset's message ends with advice to reset a *stored* offset; for a submitted one
# that advice is noise, the reasons before it are what the submitter needs.
_RESET_ADVICE: Final = ". snowsource never guesses"


class ConfiguredTable(Protocol):
    """What this module needs of a configured table (``poller.TableSpec`` fits)."""

    @property
    def alias(self) -> str:
        """The table's key under ``snow.tables``."""

    @property
    def partition(self) -> SourcePartition:
        """Its source partition (SPEC §4)."""

    @property
    def legacy_partition(self) -> SourcePartition:
        """The partition the Java connector computes for it (migration fallback)."""

    @property
    def id_field(self) -> str:
        """The field that breaks timestamp ties (its values are the cursor's ``sys_id``)."""


class Match(StrEnum):
    """How a stored partition relates to the configuration."""

    OK = "ok"
    """A configured table's partition, and its offset passes the daemon's validation."""
    INVALID = "invalid"
    """A configured table's partition whose offset the daemon would refuse (table FAILs)."""
    STALE = "stale"
    """No configured table uses it, but one reads the same table, instance and timestamp
    field: its query or ``query.domain`` changed, so it started a new partition."""
    LEGACY = "legacy"
    """The Java connector's partition of a configured table; the daemon adopts it once when
    that table has no offset of its own."""
    REMOVED = "removed"
    """No configured table reads this table, instance and timestamp field any more."""
    UNKNOWN = "unknown"
    """Stored under this connector's name but not a snowsource partition (not four string
    keys ``instance``, ``timestamp_field``, ``query_fingerprint``, ``table``)."""


@dataclass(frozen=True)
class ListedOffset:
    """One stored partition of the connector, classified."""

    partition: dict[str, object]
    """The partition map in canonical (``HashMap``) key order."""
    offset: object
    """The stored offset as parsed JSON; ``None`` when the value bytes are not JSON."""
    alias: str | None
    """The configured alias that reads it, else ``None`` (shown as ``orphaned``)."""
    match: Match
    note: str
    """Why it is not ``ok`` (empty when it is)."""
    key: bytes
    """The stored key bytes the offset was read from."""
    value: bytes
    canonical: bool
    """Whether ``key`` is the canonical spelling (a foreign spelling is used by the daemon
    only while no canonical key exists, and is invisible to Connect's own GET)."""

    @property
    def table(self) -> str:
        """The partition's ``table`` (``?`` when it has none)."""
        value = self.partition.get("table")
        return value if isinstance(value, str) else "?"

    def field(self, name: str) -> str:
        """A string field of the offset, or ``-`` when absent or not a string."""
        if isinstance(self.offset, Mapping):
            value = self.offset.get(name)
            if isinstance(value, str):
                return value
        return "-"


@dataclass(frozen=True)
class OffsetChange:
    """A validated write: ``offset`` ``None`` deletes the partition's offset (tombstone)."""

    partition: SourcePartition
    offset: SourceOffset | None
    alias: str | None
    """The configured alias of the partition, ``None`` for an unconfigured one."""

    def key(self, connector: str) -> bytes:
        """The canonical key bytes this change is written under."""
        return encode_key(connector, self.partition)


def _canonical_map(partition: Mapping[str, object]) -> dict[str, object]:
    try:
        order = java_hashmap_order(list(partition))
    except ValueError:
        order = list(partition)
    return {key: partition[key] for key in order}


def _identity(connector: str, entry: StoredEntry) -> bytes:
    """Entries describing the same partition map share this identity (the canonical bytes)."""
    try:
        return encode_key(connector, entry.partition)
    except (TypeError, ValueError):
        return entry.key


def _decode(value: bytes) -> tuple[bool, object]:
    try:
        return True, orjson.loads(value)
    except orjson.JSONDecodeError:
        return False, None


def _classify(
    partition: SourcePartition | None, offset: object, tables: Sequence[ConfiguredTable]
) -> tuple[str | None, Match, str]:
    if partition is None:
        return None, Match.UNKNOWN, "not a snowsource partition"
    for table in tables:
        if table.partition == partition:
            try:
                validate_offset(
                    offset,
                    partition,
                    id_field=table.id_field,
                    describe=f"table alias {table.alias!r}",
                )
            except OffsetError as exc:
                return table.alias, Match.INVALID, _reasons(exc)
            return table.alias, Match.OK, ""
    for table in tables:
        if table.legacy_partition == partition:
            return (
                None,
                Match.LEGACY,
                f"the Java connector's partition of {table.alias!r}; adopted once when "
                f"{table.alias!r} has no offset of its own",
            )
    same_source = [
        table.alias
        for table in tables
        if (table.partition.table, table.partition.instance, table.partition.timestamp_field)
        == (partition.table, partition.instance, partition.timestamp_field)
    ]
    if same_source:
        return (
            None,
            Match.STALE,
            f"query_fingerprint {partition.query_fingerprint} is not the one configured for "
            f"{', '.join(map(repr, same_source))} (its query or query.domain changed)",
        )
    return (
        None,
        Match.REMOVED,
        f"no configured table reads {partition.table} on {partition.instance} "
        f"by {partition.timestamp_field}",
    )


def list_offsets(
    connector: str, entries: Iterable[StoredEntry], tables: Sequence[ConfiguredTable]
) -> list[ListedOffset]:
    """Every stored partition of ``connector``, once each, classified against ``tables``.

    When one partition is stored under several key spellings, the canonical key wins (what the
    daemon reads), else the first foreign spelling. Configured tables come first in
    configuration order, then the others by table name and partition.
    """
    chosen: dict[bytes, StoredEntry] = {}
    for entry in entries:
        identity = _identity(connector, entry)
        if identity not in chosen or entry.key == identity:
            chosen[identity] = entry
    listed: list[ListedOffset] = []
    for identity, entry in chosen.items():
        decoded, offset = _decode(entry.value)
        source = SourcePartition.from_mapping(entry.partition)
        alias, match, note = _classify(source, offset, tables)
        if not decoded:
            match, note = Match.INVALID, "the stored value is not JSON"
        listed.append(
            ListedOffset(
                partition=_canonical_map(entry.partition),
                offset=offset,
                alias=alias,
                match=match,
                note=note,
                key=entry.key,
                value=entry.value,
                canonical=entry.key == identity,
            )
        )
    position = {table.alias: i for i, table in enumerate(tables)}

    def order(item: ListedOffset) -> tuple[int, str, str]:
        rank = position.get(item.alias, len(position)) if item.alias else len(position)
        return rank, item.table, orjson.dumps(item.partition).decode()

    return sorted(listed, key=order)


def rest_listing(listed: Iterable[ListedOffset]) -> dict[str, list[dict[str, object]]]:
    """Connect's ``GET /connectors/{name}/offsets`` body for these partitions."""
    return {"offsets": [{"partition": item.partition, "offset": item.offset} for item in listed]}


def connect_listing(
    connector: str,
    entries: Iterable[StoredEntry],
    tables: Sequence[ConfiguredTable],
    *,
    deleted: Iterable[bytes] = (),
) -> dict[str, list[dict[str, object]]]:
    """``rest_listing(list_offsets(...))``: the Connect REST shape of what is stored.

    ``deleted``: key bytes of partitions the caller itself deleted since it last read the
    topic. Each one without a live value in ``entries`` is listed with ``"offset": null``, as a
    Connect worker lists the partitions it still knows once their offsets read back null (GET
    right after DELETE). Unlike a Connect worker, a partition stored only under a foreign key
    spelling shows the offset the daemon would use rather than ``null``.
    """
    entries = list(entries)
    listing = rest_listing(list_offsets(connector, entries, tables))
    live = {_identity(connector, entry) for entry in entries}
    for key in sorted(deleted):
        parsed = parse_key(key)
        if parsed is None or parsed[0] != connector:
            continue
        identity = _identity(connector, StoredEntry(key=key, partition=parsed[1], value=b""))
        if identity not in live:
            live.add(identity)
            listing["offsets"].append({"partition": _canonical_map(parsed[1]), "offset": None})
    return listing


# --------------------------------------------------------------------------------------------
# Submitted offsets


def _reasons(exc: OffsetError) -> str:
    return str(exc).split(_RESET_ADVICE, 1)[0]


def _describe(partition: Mapping[str, object]) -> str:
    try:
        return orjson.dumps(dict(partition)).decode()
    except TypeError:
        # A value JSON cannot carry (an integer past 64 bits): only a Python caller passes one,
        # and it still deserves an OffsetError naming the partition, not a crash.
        return repr(dict(partition))


def validate_change(
    partition: object,
    offset: object,
    tables: Sequence[ConfiguredTable],
    *,
    allow_unconfigured: bool = False,
) -> OffsetChange:
    """Validate one submitted partition/offset pair; ``OffsetError`` says what is wrong.

    The partition must be snowsource's shape (four string keys, any order). A configured
    table's partition takes a ``null`` offset or one that passes ``validate_offset`` against
    it. A partition no configured table uses takes a ``null`` offset, and a non-null one only
    with ``allow_unconfigured`` (validated against that partition's own fingerprint).
    """
    if not isinstance(partition, Mapping):
        raise OffsetError(f"partition must be a JSON object, got {_json_kind(partition)}")
    source = SourcePartition.from_mapping(partition)
    if source is None:
        raise OffsetError(
            f"partition {_describe(partition)} is not a snowsource partition: it needs exactly "
            f"the string keys instance, timestamp_field, query_fingerprint and table"
        )
    table = next((t for t in tables if t.partition == source), None)
    alias = table.alias if table is not None else None
    if offset is None:
        return OffsetChange(partition=source, offset=None, alias=alias)
    if alias is None and not allow_unconfigured:
        raise OffsetError(
            f"no configured table has partition {_describe(source.as_dict())}, so no table "
            f"would ever read this offset (check instance, table, timestamp_field and the "
            f"query's fingerprint against `snowsource offsets list --json`); a null offset "
            f"deletes it"
        )
    describe = (
        f"table alias {alias!r}" if alias else f"unconfigured partition {_describe(partition)}"
    )
    try:
        parsed = validate_offset(
            offset,
            source,
            id_field=table.id_field if table is not None else None,
            describe=describe,
            alias=alias,
        )
    except OffsetError as exc:
        raise OffsetError(_reasons(exc)) from None
    return OffsetChange(partition=source, offset=parsed, alias=alias)


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def parse_offsets_document(document: object) -> list[tuple[object, object]]:
    """The ``(partition, offset)`` pairs of a Connect REST body ``{"offsets":[...]}``.

    Checks only the shape (``OffsetError`` otherwise): every entry has exactly the keys
    ``partition`` and ``offset`` (``"offset": null`` is how a reset is asked for, as in
    Connect). An empty list is returned as such (a REST PATCH refuses it with Connect's own
    message, an import of it does nothing).
    """
    if not isinstance(document, Mapping):
        raise OffsetError(
            f'expected a JSON object {{"offsets": [...]}}, got {_json_kind(document)}'
        )
    entries = document.get("offsets")
    if not isinstance(entries, list):
        raise OffsetError('expected a key "offsets" holding a list of {"partition", "offset"}')
    pairs: list[tuple[object, object]] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or "partition" not in entry:
            raise OffsetError(
                f'offsets[{i}] must be an object {{"partition": {{...}}, "offset": {{...}} '
                f"or null}}"
            )
        extra = sorted(set(entry) - {"partition", "offset"})
        if extra:
            raise OffsetError(f"offsets[{i}] has unexpected key(s) {', '.join(extra)}")
        if "offset" not in entry:
            # A reset must be asked for: read as null, a dropped or misspelt key would silently
            # replay the table from start.timestamp.
            raise OffsetError(
                f'offsets[{i}] has no "offset" key: give the offset object, or "offset": null '
                f"to reset the partition"
            )
        pairs.append((entry["partition"], entry["offset"]))
    return pairs


def validate_changes(
    pairs: Sequence[tuple[object, object]],
    tables: Sequence[ConfiguredTable],
    *,
    allow_unconfigured: bool = False,
) -> list[OffsetChange]:
    """Validate every pair; one ``OffsetError`` lists every problem (nothing is half-valid).

    A partition listed twice is refused: which of the two should win would be a guess.
    """
    changes: list[OffsetChange] = []
    problems: list[str] = []
    seen: dict[SourcePartition, int] = {}
    for i, (partition, offset) in enumerate(pairs):
        try:
            change = validate_change(
                partition, offset, tables, allow_unconfigured=allow_unconfigured
            )
        except OffsetError as exc:
            problems.append(f"offsets[{i}]: {exc}")
            continue
        if change.partition in seen:
            problems.append(
                f"offsets[{i}]: the same partition as offsets[{seen[change.partition]}] "
                f"(partitions are compared whatever their key order)"
            )
            continue
        seen[change.partition] = i
        changes.append(change)
    if problems:
        raise OffsetError("\n".join(problems))
    return changes


# --------------------------------------------------------------------------------------------
# rewind / set


def _checked(
    partition: SourcePartition, value: dict[str, str], alias: str | None, id_field: str | None
) -> SourceOffset:
    try:
        return validate_offset(
            value, partition, id_field=id_field, describe=f"table alias {alias!r}", alias=alias
        )
    except OffsetError as exc:
        raise OffsetError(_reasons(exc)) from None


def rewind_offset(
    partition: SourcePartition, to: str, *, id_field: str | None, alias: str | None = None
) -> SourceOffset:
    """The offset that makes a table re-read from ``to``: before the first row of that second,
    phase ``backfill``. ``OffsetError`` for a malformed timestamp."""
    value = SourceOffset(
        timestamp=to, sys_id="", phase="backfill", fingerprint=partition.query_fingerprint
    )
    return _checked(partition, value.as_dict(), alias, id_field)


def set_offset(
    partition: SourcePartition,
    timestamp: str,
    sys_id: str,
    *,
    id_field: str | None,
    alias: str | None = None,
) -> SourceOffset:
    """The offset of an explicit cursor ``(timestamp, sys_id)``, phase ``backfill`` (the table
    continues after that row). ``OffsetError`` for a malformed timestamp or sys_id."""
    value = SourceOffset(
        timestamp=timestamp,
        sys_id=sys_id,
        phase="backfill",
        fingerprint=partition.query_fingerprint,
    )
    return _checked(partition, value.as_dict(), alias, id_field)
