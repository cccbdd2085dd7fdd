"""Date-time texts written as Avro ``timestamp-millis`` union bytes by look-up. Pure.

A table's rows carry several date-times each and nearly all differ, so remembering texts does
not help; converting each (parse, milliseconds, a six-byte varint built in a Python loop) was
the largest part of writing a row. Hours repeat, though: per hour (``YYYY-MM-DD hh``) this
remembers the low 28 bits of the zig-zag of its first millisecond and the varint of the bits
above. A date-time of a known hour is its offset into the hour (``:mm:ss``, looked up) added
to those low bits, written by arithmetic (:func:`branch_and_low_28`; a table of 14-bit pairs
was no quicker in the daemon, where it is rarely in the CPU's cache) and followed by the
hour's high bytes: no parsing, no loop. The generated row writer (``avro_rows``) does exactly
that inline with :attr:`TimestampWriter.hours`, :func:`offsets` and :data:`LOW_28_INLINE`, and
calls :meth:`TimestampWriter.write` for anything else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Final

from snowsource.core import avro_binary

_HOUR_SPAN: Final = 2000 * 3600  # the zig-zag span of one hour's milliseconds
_LOW_28: Final = (1 << 28) - 1
# Hours remembered (about 200 bytes each); when full, the cache starts again empty: it
# follows what the tables write now.
_CACHED_HOURS: Final = 4096

# The expression of :func:`branch_and_low_28` for the generated code (no call), of ``n``.
LOW_28_INLINE: Final = (
    "(2 | (n & 0x7F) << 8 | (n & 0x3F80) << 9 | (n & 0x1FC000) << 10"
    " | (n & 0xFE00000) << 11 | 0x8080808000).to_bytes(5, 'little')"
)

Hour = tuple[int, bytes]  # (low 28 bits of the hour's first zig-zag millisecond, high bytes)


def branch_and_low_28(n: int) -> bytes:
    """Union branch 1 and the first four bytes of the varint of ``n`` (which has more than 28
    bits): its four low 7-bit groups, lowest first, each with bit 7 set (more follow)."""
    return (
        2
        | (n & 0x7F) << 8
        | (n & 0x3F80) << 9
        | (n & 0x1FC000) << 10
        | (n & 0xFE00000) << 11
        | 0x8080808000
    ).to_bytes(5, "little")


@functools.cache
def offsets() -> dict[str, int]:
    """``:mm:ss`` -> the zig-zag of its milliseconds into the hour (2 x 1000 x seconds); only
    valid minutes and seconds are keys. Built on first use (3,600 entries, about 400 kB): only
    a process writing Avro pays for it."""
    return {f":{m:02}:{s:02}": 2000 * (m * 60 + s) for m in range(60) for s in range(60)}


class TimestampWriter:
    """``YYYY-MM-DD hh:mm:ss`` (UTC) -> ``["null", timestamp-millis]`` bytes (null for an
    empty text). ``epoch_seconds`` parses a text (None for an empty one; raises for one that
    is not a valid date-time): the one rule, kept in ``value_encoding``."""

    def __init__(self, epoch_seconds: Callable[[str], int | None]) -> None:
        self.hours: dict[str, Hour] = {}
        self.offsets = offsets()
        self._epoch_seconds = epoch_seconds

    def write(self, text: str) -> bytes:
        """The union bytes of ``text``: looked up when its hour is known, else converted (and
        its hour remembered)."""
        hour = self.hours.get(text[:13])
        offset = self.offsets.get(text[13:])
        if hour is None or offset is None:
            return self._convert(text)
        return branch_and_low_28(hour[0] + offset) + hour[1]

    def _convert(self, text: str) -> bytes:
        seconds = self._epoch_seconds(text)
        if seconds is None:
            return avro_binary.NULL
        # Twice the hour's first millisecond is its zig-zag (1970 on). An hour is remembered
        # when the bits above its low 28 stay the same all hour long (not for 3 % of hours).
        start = (seconds - seconds % 3600) * 2000
        if start > _LOW_28 and (start & _LOW_28) + _HOUR_SPAN <= _LOW_28:
            if len(self.hours) >= _CACHED_HOURS:
                self.hours.clear()
            self.hours[text[:13]] = (start & _LOW_28, avro_binary.unsigned(start >> 28))
        return avro_binary.put("long")(seconds * 1000)
