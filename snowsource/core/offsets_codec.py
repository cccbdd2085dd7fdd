"""Offsets-topic bytes exactly as a Kafka Connect worker writes them (SPEC §4, connect-offsets §9).

Pure functions and frozen value objects, no I/O. This is the only code that knows the bytes:

* key   = UTF-8 of ``["<connector>",{partition}]``, compact, partition keys in Java ``HashMap``
  iteration order, strings escaped like Jackson's default generator;
* value = compact JSON of the offset (only ever parsed by Connect, never compared), ``None`` for a
  tombstone;
* the offsets-topic partition of a key is Kafka's murmur2 partitioner over the key bytes.

Connect looks offsets up by *exact key bytes*, so one differently ordered key or one lower-case
``\\u001f`` makes a stored offset invisible to GET/PATCH/DELETE ``/offsets``. Everything here is
checked byte for byte against the contract's vectors (``tests/data/offset_keys.json``) and
bytes produced by real Java (``java.util.HashMap`` + Jackson) in the unit tests.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Final
from urllib.parse import urlsplit

import orjson

from snowsource.core.errors import OffsetError
from snowsource.core.partitioner import partition_for_key
from snowsource.core.query import legacy_query_fingerprint, query_fingerprint

__all__ = [
    "OFFSET_VERSION",
    "PHASES",
    "SourceOffset",
    "SourcePartition",
    "cursor_id_problem",
    "decode_value",
    "encode_connect_json",
    "encode_key",
    "encode_value",
    "instance_from_url",
    "is_sys_id_field",
    "jackson_string",
    "java_hashmap_order",
    "java_string_hash",
    "kafka_partition_for_key",
    "legacy_partition_for",
    "parse_key",
    "partition_for",
    "validate_offset",
]

# --------------------------------------------------------------------------------------------
# Jackson string escaping (connect-offsets §1.3)

_SHORT_ESCAPES: Final = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_ESCAPE_TABLE: Final[dict[int, str]] = {
    **{code: f"\\u{code:04X}" for code in range(0x20)},  # Jackson writes upper-case hex
    **_SHORT_ESCAPES,
    ord('"'): '\\"',
    ord("\\"): "\\\\",
}
# Jackson's UTF-8 generator escapes every UTF-16 surrogate unit it meets, so a character outside
# the BMP becomes an escaped surrogate pair; a lone surrogate is escaped the same way.
_WIDE: Final = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")


def _escape_wide(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04X}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"


def jackson_string(s: str) -> str:
    """The JSON string literal (quotes included) exactly as Jackson's default generator writes it.

    Short escapes for ``" \\ \\b \\t \\n \\f \\r``; ``\\u00XX`` (upper-case hex) for the other
    C0 controls; characters outside the BMP as an escaped upper-case surrogate pair; everything
    else raw (``/``, U+007F and U+2028 included).
    """
    return '"' + _WIDE.sub(_escape_wide, s.translate(_ESCAPE_TABLE)) + '"'


# --------------------------------------------------------------------------------------------
# java.util.HashMap iteration order (connect-offsets §1.4)

_INITIAL_CAPACITY: Final = 16
# putVal() treeifies (below capacity 64: resizes) when a bin reaches 9 nodes, which reorders
# the map in a way this model does not follow; such key sets are refused instead.
_MAX_BIN: Final = 8


def java_string_hash(s: str) -> int:
    """``String.hashCode()``: ``31*h + unit`` over UTF-16 code units, wrapped to a signed int32."""
    h = 0
    data = s.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | (data[i + 1] << 8))) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _spread(key: str) -> int:
    h = java_string_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hashmap_order(keys: Sequence[str]) -> list[str]:
    """Iteration order of a default ``new HashMap<>()`` after ``put`` of ``keys`` in this order.

    Buckets ``spread(hashCode) & (capacity - 1)`` are visited in ascending order; inside a
    bucket keys keep insertion order (a resize split keeps it too). The capacity starts at 16
    and doubles whenever the size exceeds 3/4 of it. A repeated key keeps its first position,
    as ``put`` does. Raises ``ValueError`` when 9 or more keys would share one bucket, where
    Java would treeify or resize early.
    """
    unique = list(dict.fromkeys(keys))
    spreads = [_spread(key) for key in unique]
    capacity = _INITIAL_CAPACITY
    bins: Counter[int] = Counter()
    for inserted, spread in enumerate(spreads, start=1):
        bucket = spread & (capacity - 1)
        bins[bucket] += 1
        if bins[bucket] > _MAX_BIN:
            crowded = [
                k for k, s in zip(unique, spreads, strict=True) if s & (capacity - 1) == bucket
            ]
            raise ValueError(
                f"{bins[bucket]} keys share one java.util.HashMap bucket (capacity {capacity}): "
                f"{crowded[: _MAX_BIN + 1]!r}; Java would treeify or resize early, which is "
                f"not modelled"
            )
        if inserted > capacity * 3 // 4:
            capacity *= 2
            bins = Counter(s & (capacity - 1) for s in spreads[:inserted])
    order = sorted(range(len(unique)), key=lambda i: (spreads[i] & (capacity - 1), i))
    return [unique[i] for i in order]


# --------------------------------------------------------------------------------------------
# Connect JsonConverter (schemaless) output

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


def _java_double_digits(x: float) -> tuple[str, int]:
    """Significant digits and decimal exponent ``e`` (value = ``d.ddd x 10^e``) of ``x > 0``
    as ``Double.toString`` picks them since JDK 19: the shortest decimal that rounds to ``x``
    (Python's ``repr``), except that a one-digit answer competes with every two-digit one and
    the closest to ``x`` wins (ties: even last digit)."""
    _, digit_tuple, exponent = Decimal(repr(x)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    sci = exponent + len(digit_tuple) - 1
    if len(digits) > 1:
        return digits, sci
    exact = Fraction(x)
    best: tuple[Fraction, int, int, int] | None = None  # (distance, parity, n, scale)
    for scale in (sci - 2, sci - 1, sci):
        for n in range(10, 100):
            if float(f"{n}e{scale}") != x:
                continue
            rank = (abs(Fraction(n) * Fraction(10) ** scale - exact), n % 2, n, scale)
            if best is None or rank < best:
                best = rank
    if best is None:  # cannot happen: 10 * digit at scale sci - 1 is repr's own answer
        return digits, sci
    _, _, n, scale = best
    return str(n).rstrip("0"), scale + 1


def _java_double(x: float) -> str:
    """``Double.toString(x)`` as JDK 19+ prints it; Jackson writes a ``double`` with it.

    JDK 18 and older print a few doubles with extra digits. Connect only ever parses values
    (partitions hold no floats), so the parsed value, which is identical, is what counts.
    """
    if not math.isfinite(x):
        raise ValueError(f"{x!r} cannot be written as a JSON number")
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    digits, sci = _java_double_digits(abs(x))
    if 1e-3 <= abs(x) < 1e7:
        if sci >= 0:
            whole = digits[: sci + 1].ljust(sci + 1, "0")
            frac = digits[sci + 1 :] or "0"
        else:
            whole = "0"
            frac = "0" * (-sci - 1) + digits
        return f"{sign}{whole}.{frac}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{sci}"


def _write(value: object, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"integer {value} is outside int64 (Connect reads integers as Long)")
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_java_double(value))
    elif isinstance(value, str):
        out.append(jackson_string(value))
    elif isinstance(value, Mapping):
        _write_map(value, out)
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not a Connect schemaless JSON value")


def _write_map(value: Mapping[object, object], out: list[str]) -> None:
    keys: list[str] = []
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"map key {key!r} is not a string")
        keys.append(key)
    out.append("{")
    for i, key in enumerate(java_hashmap_order(keys)):
        if i:
            out.append(",")
        out.append(jackson_string(key))
        out.append(":")
        _write(value[key], out)
    out.append("}")


def encode_connect_json(value: object) -> bytes:
    """Bytes of Connect's ``JsonConverter`` (``schemas.enable=false``) for ``value``.

    ``dict`` → object with keys in ``HashMap`` order (what Connect's JSON → HashMap → JSON path
    produces), ``list`` → array, ``str``, ``int`` (int64 only), ``bool``, ``None``, and finite
    ``float`` in ``Double.toString`` style. Like ``json.dumps``: ``TypeError`` for a type Connect
    cannot hold, ``ValueError`` for a value it cannot hold (NaN, beyond int64, a crowded bucket).
    """
    out: list[str] = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def _check_primitive_map(what: str, mapping: Mapping[str, object]) -> None:
    """Connect's ``OffsetUtils.validateFormat`` rules, narrowed to what a key can hold exactly."""
    for key, item in mapping.items():
        if not isinstance(key, str):
            raise TypeError(f"{what} key {key!r} is not a string")
        if isinstance(item, float):
            raise TypeError(f"{what} value {key!r} is a float; partitions hold no floats")
        if isinstance(item, Mapping | list | tuple):
            raise TypeError(f"{what} value {key!r} is nested; only primitive values are allowed")
        if item is not None and not isinstance(item, str | int):
            raise TypeError(f"{what} value {key!r} has unsupported type {type(item).__name__}")


# --------------------------------------------------------------------------------------------
# Source partition (SPEC §4)

_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


def instance_from_url(url: str) -> str:
    """The ``instance`` of a ServiceNow URL: lower-case host, no scheme or path; a non-default
    port is kept as ``host:port`` (443 for https and 80 for http are dropped)."""
    parts = urlsplit(url.strip())
    host = parts.hostname
    if not host:
        raise ValueError(f"URL {url!r} has no host")
    port = parts.port  # ValueError on a malformed port
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal keeps its brackets, as in a URL
    if port is not None and _DEFAULT_PORTS.get(parts.scheme.lower()) != port:
        return f"{host}:{port}"
    return host


# The four keys in java.util.HashMap order (asserted against java_hashmap_order by the tests).
_PARTITION_KEYS: Final = ("instance", "timestamp_field", "query_fingerprint", "table")


@dataclass(frozen=True)
class SourcePartition:
    """A table's source partition: derived from configuration only, never from credentials."""

    instance: str
    timestamp_field: str
    query_fingerprint: str
    table: str

    def as_dict(self) -> dict[str, str]:
        """The partition map, keys in canonical (``HashMap``) order."""
        return {
            "instance": self.instance,
            "timestamp_field": self.timestamp_field,
            "query_fingerprint": self.query_fingerprint,
            "table": self.table,
        }

    @classmethod
    def from_mapping(cls, m: Mapping[str, object]) -> SourcePartition | None:
        """The partition a parsed map describes, or ``None`` unless it has exactly our four
        keys, all with string values (any key order)."""
        if set(m) != set(_PARTITION_KEYS):
            return None
        values = [m[key] for key in _PARTITION_KEYS]
        if not all(isinstance(value, str) for value in values):
            return None
        instance, timestamp_field, fingerprint, table = (str(value) for value in values)
        return cls(instance, timestamp_field, fingerprint, table)


def partition_for(
    *, snow_url: str, table: str, query: str | None, query_domain: bool, timestamp_field: str
) -> SourcePartition:
    """The source partition of a configured table (SPEC §4)."""
    return SourcePartition(
        instance=instance_from_url(snow_url),
        timestamp_field=timestamp_field,
        query_fingerprint=query_fingerprint(table, query, query_domain),
        table=table,
    )


def legacy_partition_for(
    *, snow_url: str, table: str, query: str | None, query_domain: bool, timestamp_field: str
) -> SourcePartition:
    """The partition the Java connector computes (whitespace-only query normalisation), looked
    up once when a table has no offset of its own (SPEC §4, migration fallback)."""
    return SourcePartition(
        instance=instance_from_url(snow_url),
        timestamp_field=timestamp_field,
        query_fingerprint=legacy_query_fingerprint(table, query, query_domain),
        table=table,
    )


# --------------------------------------------------------------------------------------------
# Keys


def encode_key(connector: str, partition: Mapping[str, object] | SourcePartition) -> bytes:
    """Canonical key bytes ``["<connector>",{partition}]`` — what Connect's own PATCH writes.

    Raises ``TypeError`` for what a partition cannot hold (non-string keys, floats, nested
    values) and ``ValueError`` for integers outside int64 or 9+ keys in one ``HashMap`` bucket.
    """
    if not isinstance(connector, str):
        raise TypeError(f"connector name {connector!r} is not a string")
    mapping = partition.as_dict() if isinstance(partition, SourcePartition) else partition
    _check_primitive_map("partition", mapping)
    return encode_connect_json([connector, mapping])


def parse_key(data: bytes) -> tuple[str, dict[str, object]] | None:
    """``(connector, partition)`` of an offsets-topic key, or ``None`` for keys Connect ignores:
    not JSON, not a two-element array, a non-string first element or a non-object second one
    (``OffsetUtils.processPartitionKey``). The partition keeps the key's own key order."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, list) or len(parsed) != 2:
        return None
    connector, partition = parsed
    if not isinstance(connector, str) or not isinstance(partition, dict):
        return None
    return connector, partition


def kafka_partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``:
    ``toPositive(murmur2(key)) % num_partitions`` (the same as aiokafka's producer)."""
    return partition_for_key(key, num_partitions)


# --------------------------------------------------------------------------------------------
# Values (SPEC §4, §12)

PHASES: Final = ("backfill", "stream")
OFFSET_VERSION: Final = "1"
_OFFSET_KEYS: Final = ("version", "timestamp", "sys_id", "phase", "fingerprint")
# A Kafka Connect worker serialises the offset map from a java.util.HashMap: these five keys
# come out in this order, and snowsource writes the very same bytes (no rewrite on import).
_OFFSET_WIRE_ORDER: Final = tuple(java_hashmap_order(_OFFSET_KEYS))
_TIMESTAMP: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})")


@dataclass(frozen=True, order=False)
class SourceOffset:
    """A table's source offset: the cursor after the last emitted row (or the last row a
    completed sweep read), plus its context."""

    timestamp: str
    sys_id: str
    phase: str
    fingerprint: str
    version: str = OFFSET_VERSION

    def as_dict(self) -> dict[str, str]:
        """The offset map in its documented key order (version, timestamp, sys_id, phase,
        fingerprint)."""
        return {
            "version": self.version,
            "timestamp": self.timestamp,
            "sys_id": self.sys_id,
            "phase": self.phase,
            "fingerprint": self.fingerprint,
        }


def encode_value(offset: SourceOffset | None) -> bytes | None:
    """Value bytes of an offset record; ``None`` (a tombstone) deletes the partition's offset.

    Keys in Java ``HashMap`` order (``phase, sys_id, fingerprint, version, timestamp``) with
    Jackson's escaping: byte-identical to what a Connect worker writes for the same offset.
    """
    if offset is None:
        return None
    fields = offset.as_dict()
    body = ",".join(f"{jackson_string(k)}:{jackson_string(fields[k])}" for k in _OFFSET_WIRE_ORDER)
    return ("{" + body + "}").encode("utf-8")


def decode_value(data: bytes) -> object:
    """Parse offset value bytes; ``OffsetError`` when they are not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise OffsetError(f"malformed JSON in offset value: {exc}") from exc


def _timestamp_problem(value: str) -> str | None:
    match = _TIMESTAMP.fullmatch(value)
    if match is None:
        return f"timestamp {value!r} is not formatted YYYY-MM-DD HH:MM:SS"
    try:
        year, month, day, hour, minute, second = map(int, match.groups())
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        return f"timestamp {value!r} is not a real date and time"
    return None


CURSOR_ID_MAX_LENGTH: Final = 255
_SYS_ID: Final = re.compile(r"[0-9a-f]{32}")
# C0 and C1 controls: invisible in every listing, and no real id field holds them.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")
_QUOTED_ID_LIMIT: Final = 40


def is_sys_id_field(id_field: str) -> bool:
    """Whether ``id.field`` holds sys_ids: ``sys_id``, or a database view's ``<prefix>_sys_id``."""
    return id_field == "sys_id" or id_field.endswith("_sys_id")


def _quoted_id(value: str) -> str:
    if len(value) <= _QUOTED_ID_LIMIT:
        return repr(value)
    return f"{value[:_QUOTED_ID_LIMIT]!r}... ({len(value)} characters)"


def cursor_id_problem(value: str, id_field: str | None) -> str | None:
    """Why ``value`` cannot be a cursor id for ``id_field``, or None (SPEC §13.1).

    Empty means "before the first row of that second". ``^`` can never be written into an
    encoded query. For a sys_id field only a sys_id (32 lowercase hex characters) can exist, so
    anything else is a typo that would silently skip the rest of its second. Any other field
    takes at most 255 characters without control characters. ``id_field`` None (a partition no
    configured table uses) applies the rules every id field shares.
    """
    if value == "":
        return None
    shown = _quoted_id(value)
    if "^" in value:
        return f"sys_id {shown} contains '^', which cannot be written into a ServiceNow query"
    if id_field is not None and is_sys_id_field(id_field):
        if _SYS_ID.fullmatch(value) is None:
            return (
                f"sys_id {shown} is not a sys_id (32 lowercase hex characters) although "
                f"id.field is {id_field!r}; use the exact sys_id of a row, or an empty sys_id "
                f"for the start of that second"
            )
        return None
    if len(value) > CURSOR_ID_MAX_LENGTH:
        return f"sys_id {shown} is longer than {CURSOR_ID_MAX_LENGTH} characters"
    if _CONTROL.search(value):
        return f"sys_id {shown} contains control characters"
    return None


def _offset_problems(value: object, partition: SourcePartition, id_field: str | None) -> list[str]:
    if not isinstance(value, Mapping):
        kind = "null" if value is None else type(value).__name__
        return [f"the offset is not a JSON object (got {kind})"]
    version = value.get("version")
    if isinstance(version, str) and version != OFFSET_VERSION:
        # Another version may have other keys and meanings: judge nothing else of it.
        return [f"unsupported offset version {version!r} (this snowsource reads version '1')"]
    problems: list[str] = []
    missing = [key for key in _OFFSET_KEYS if key not in value]
    if missing:
        problems.append("missing key(s) " + ", ".join(map(repr, missing)))
    extra = sorted(repr(key) for key in value if key not in _OFFSET_KEYS)
    if extra:
        problems.append(
            "unexpected key(s) " + ", ".join(extra) + " (a new key needs a new version)"
        )
    problems.extend(
        f"{key!r} is not a string (got {value[key]!r})"
        for key in _OFFSET_KEYS
        if key in value and not isinstance(value[key], str)
    )
    timestamp = value.get("timestamp")
    if isinstance(timestamp, str) and (problem := _timestamp_problem(timestamp)):
        problems.append(problem)
    sys_id = value.get("sys_id")
    if isinstance(sys_id, str) and (problem := cursor_id_problem(sys_id, id_field)):
        problems.append(problem)
    phase = value.get("phase")
    if isinstance(phase, str) and phase not in PHASES:
        problems.append(f"unknown phase {phase!r} (expected 'backfill' or 'stream')")
    fingerprint = value.get("fingerprint")
    if isinstance(fingerprint, str) and fingerprint != partition.query_fingerprint:
        problems.append(
            f"fingerprint {fingerprint!r} differs from the partition's query_fingerprint "
            f"{partition.query_fingerprint!r}"
        )
    return problems


def validate_offset(
    value: object,
    partition: SourcePartition,
    *,
    id_field: str | None,
    describe: str,
    alias: str | None = None,
) -> SourceOffset:
    """The ``SourceOffset`` in a parsed offset value, or ``OffsetError`` (SPEC §4, §12, §13.1).

    THE offset validator: the daemon's load, REST PATCH and ``offsets set/import`` all call it.
    Exactly the five keys, all strings; ``version`` "1"; ``timestamp`` exactly
    ``YYYY-MM-DD HH:MM:SS`` and a real date; ``sys_id`` a valid cursor id for ``id_field``
    (``cursor_id_problem``); ``phase`` in ``PHASES``; ``fingerprint`` equal to the partition's.
    The error names ``describe`` (which partition), every reason found and how to reset the
    offset (with ``alias`` in the commands when given). Never guesses, never repairs.
    """
    problems = _offset_problems(value, partition, id_field)
    if problems:
        name = alias or "<alias>"
        raise OffsetError(
            f"unusable offset for {describe}: {'; '.join(problems)}. snowsource never guesses "
            f"at or reuses such an offset; reset it with `snowsource offsets delete {name}` "
            f"(the table replays from its start.timestamp) or `snowsource offsets set {name} "
            f"--timestamp 'YYYY-MM-DD HH:MM:SS' --sys-id SYS_ID`"
        )
    assert isinstance(value, Mapping)
    return SourceOffset(
        version=value["version"],
        timestamp=value["timestamp"],
        sys_id=value["sys_id"],
        phase=value["phase"],
        fingerprint=value["fingerprint"],
    )


@dataclass(frozen=True)
class StoredEntry:
    """One live record of this connector in the offsets topic."""

    key: bytes
    partition: dict[str, object]
    value: bytes
