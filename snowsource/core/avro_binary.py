"""Avro's binary encoding of the records snowsource writes, specialised for speed. Pure.

Every field of our schemas is a union ``["null", T]`` and the record ends with a
``map<string>``; encoding one value is the branch index (``0`` null, ``1`` the value, both
zig-zag varints: bytes ``00``/``02``) and then ``T``'s encoding. fastavro's generic writer
resolves each union by inspecting the value and dispatches per field; for the rows of a wide
table that costs more than everything else the daemon does per row, so values are encoded here
by functions chosen once per schema (and, for the common row, by code generated per schema:
``avro_rows``). The tests hold the bytes equal to fastavro's for any row
(``tests/unit/test_value_schema.py``), and every reader (fastavro, confluent-kafka, Connect)
decodes them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

NULL: Final = b"\x00"
EMPTY_MAP: Final = b"\x00"
# Branch 1 and a string length under 64: two bytes, precomputed.
SHORT_STRING: Final = [bytes((2, n << 1)) for n in range(64)]
_DOUBLE: Final = struct.Struct("<d").pack

Put = Callable[[Any], bytes]


def unsigned(n: int) -> bytes:
    """The varint of a non-negative ``n`` (no zig-zag)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n: int) -> bytes:
    """The zig-zag varint of a long."""
    return unsigned((n << 1) ^ (n >> 63))


def string_header(size: int) -> bytes:
    """Branch 1 and the length of a ``["null", "string"]`` field's ``size`` UTF-8 bytes."""
    return SHORT_STRING[size] if size < 64 else b"\x02" + varint(size)


def string(text: str) -> bytes:
    """A non-null string of a ``["null", "string"]`` field."""
    data = text.encode()
    return string_header(len(data)) + data


# Branch 1 and a long in -64..63: two bytes, precomputed (counts, states, flags).
_SMALL_LONG: Final = {n: b"\x02" + varint(n) for n in range(-64, 64)}


def _long(value: int) -> bytes:
    small = _SMALL_LONG.get(value)
    return small if small is not None else b"\x02" + varint(value)


def _boolean(value: bool) -> bytes:
    return b"\x02\x01" if value else b"\x02\x00"


def _double(value: float) -> bytes:
    return b"\x02" + _DOUBLE(value)


def put(kind: str) -> Put:
    """The encoder of a non-null value of a ``["null", T]`` field of ``kind`` (a
    ``value_schema.FieldType``): ints, longs, timestamps and dates are longs on the wire."""
    if kind in ("int", "long", "timestamp", "date"):
        return _long
    if kind == "boolean":
        return _boolean
    if kind == "double":
        return _double
    return string


def string_map(values: Mapping[str, str]) -> bytes:
    """A ``map<string>``: one block of its entries, then the empty block."""
    if not values:
        return EMPTY_MAP
    parts = [varint(len(values))]
    for key, value in values.items():
        for text in (key, value):
            data = text.encode()
            parts.append(varint(len(data)))
            parts.append(data)
    parts.append(EMPTY_MAP)
    return b"".join(parts)
