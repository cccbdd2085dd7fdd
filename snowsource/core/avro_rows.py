"""Avro rows written by a function generated for their schema (SPEC §15.1). Pure.

Why generated code: the general writer (``SchemaWriter._encode_avro``) runs a Python loop over
a row's fields, unpacking a tuple and choosing a path per field; for a 29-column table that
loop was most of what Avro cost over plain JSON (bench/avro.py, docs/performance.md). The
function built here once per schema does the same work as straight-line code, with as few
bytecodes per field as it takes (the interpreter's dispatch is most of the cost): a string is
``HEAD[len(e)], e`` for its UTF-8 bytes ``e``, any other field one subscript of a dict of the
bytes of texts seen before (:class:`Remembered`), and the record's bytes are joined once.

It writes the common row only: every field's column present with a string value, no other
column, every value converting to its field's type. For any other row (a missing or extra
column, a reference object, a value that does not convert, a string of 8 kB or more) it
answers ``None`` and the general writer, which handles everything (``__unparsed``
included), writes the row. Both write the same bytes, byte for byte fastavro's
(``tests/unit/test_avro_rows.py``, ``tests/unit/test_value_schema.py``).

Where setup.py could build it, ``_avro_rows_c.RowWriter`` (C) does the same work about fifteen
times faster and is used instead; this generated code is its fallback and its reference.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from snowsource.core import avro_binary
from snowsource.core.avro_timestamps import LOW_28_INLINE, TimestampWriter
from snowsource.core.typed import UnparsedValueError
from snowsource.core.value_schema import Field, FieldType

try:  # the compiled writer, built by setup.py where a C compiler is present
    from snowsource.core import _avro_rows_c
except ImportError:  # pragma: no cover - the generated Python code writes the same bytes
    _avro_rows_c = None  # type: ignore[assignment]

RowEncoder = Callable[[Mapping[str, Any]], "bytes | None"]


class Remembered(dict[str, bytes]):
    """A converted field kind's raw texts -> their union bytes (null for an empty value),
    written on a miss by ``write`` (which raises :class:`UnparsedValueError` for a text that
    does not convert) and remembered, at most ``limit`` of them (then it starts again empty:
    it follows what the tables write now). A dict, so that the generated code's look-up of a
    known text (``R[text]``) is one subscript, with no Python call."""

    def __init__(self, write: Callable[[str], bytes], limit: int) -> None:
        super().__init__()
        self._write = write
        self._limit = limit

    def __missing__(self, text: str) -> bytes:
        if type(text) is not str:
            raise TypeError(text)  # the generated code looks up any value: not ours to write
        encoded = self._write(text)
        if len(self) >= self._limit:
            self.clear()
        self[text] = encoded
        return encoded


# The errors that make the generated function leave a row to the general writer: a missing
# column, a value that is not a string, one that does not convert, a string of 8192 bytes or
# more (``_bound``).
_FALLBACK: Final = (KeyError, AttributeError, TypeError, IndexError, UnparsedValueError)


@functools.cache
def _bound() -> dict[str, Any]:
    """What every generated function refers to, bound as default arguments (local look-ups):
    ``HEAD[n]``, branch 1 and the length of a string of n UTF-8 bytes, for n below 8192 (about
    300 kB, built on first use: only a process writing Avro pays for it); ``REF``, the same
    for a reference, whose empty value is null."""
    head = [avro_binary.string_header(n) for n in range(8192)]
    return {
        "len": len,
        "join": b"".join,
        "HEAD": head,
        "REF": [avro_binary.NULL, *head[1:]],
        "Fallback": _FALLBACK,
        "TAIL": avro_binary.EMPTY_MAP,
        "NULL": avro_binary.NULL,
        "NOTHING": object(),  # equal to no value
    }


def _timestamp_lines(index: int, value: str) -> list[str]:
    """Set ``b<i>``, a date-time's bytes: null when empty, the row's last date-time's when the
    same (opened_at and sys_created_on often are), else by its hour's look-up
    (``avro_timestamps``) inline, else by the writer (``TS``)."""
    return [
        f"t = {value}",
        'if t == "":',
        f"    b{index} = NULL",
        "elif t == last:",
        f"    b{index} = written",
        "else:",
        "    h = HOURS.get(t[:13])",
        "    o = OFFSETS.get(t[13:])",
        "    if h is None or o is None:",
        f"        b{index} = written = TS(t)",
        "    else:",
        "        n = h[0] + o",
        f"        b{index} = written = {LOW_28_INLINE} + h[1]",
        "    last = t",
    ]


def _parts(fields: Sequence[Field]) -> tuple[list[str], list[str]]:
    """The statements before the record's bytes are joined, and the joined parts: a string's
    UTF-8 bytes are a local (``e<i>``) read twice (for its length, then its bytes), a
    date-time's bytes a local (``b<i>``); any other field is one look-up of its remembered
    bytes (``R<i>``)."""
    encodes: list[str] = []
    parts = ["P"]
    for index, field in enumerate(fields):
        value = f"row[{field.column!r}]"
        if field.type in ("string", "reference"):
            encodes.append(f"e{index} = {value}.encode()")
            head = "HEAD" if field.type == "string" else "REF"
            parts += [f"{head}[len(e{index})]", f"e{index}"]
        elif field.type == "timestamp":
            encodes += _timestamp_lines(index, value)
            parts.append(f"b{index}")
        else:
            parts.append(f"R{index}[{value}]")
    return encodes, parts


def compile_encoder(
    fields: Sequence[Field],
    prefix: bytes,
    *,
    unparsed: bool,
    writer: Callable[[FieldType], Remembered],
    timestamps: TimestampWriter,
    compiled: bool = True,
) -> RowEncoder:
    """The writer of the common rows of ``fields`` (framed with ``prefix``; the empty
    ``__unparsed`` map last when ``unparsed``); ``writer(kind)``: a converted kind's texts
    (date-times excepted: ``timestamps``). The compiled writer where it was built (and
    ``compiled``), else the generated Python code: the same bytes, the same rows left."""
    if compiled and _avro_rows_c is not None:
        kinds = {"string": _avro_rows_c.STRING, "reference": _avro_rows_c.REFERENCE}
        kinds["timestamp"] = _avro_rows_c.TIMESTAMP
        plan = [
            (
                field.column,
                kinds.get(field.type, _avro_rows_c.REMEMBERED),
                None if field.type in kinds else writer(field.type),
            )
            for field in fields
        ]
        tail = avro_binary.EMPTY_MAP if unparsed else b""
        return _avro_rows_c.RowWriter(plan, prefix, tail, timestamps.write, _FALLBACK)
    return _generated(fields, prefix, unparsed=unparsed, writer=writer, timestamps=timestamps)


def _generated(
    fields: Sequence[Field],
    prefix: bytes,
    *,
    unparsed: bool,
    writer: Callable[[FieldType], Remembered],
    timestamps: TimestampWriter,
) -> RowEncoder:
    bound: dict[str, Any] = dict(_bound(), P=prefix)
    bound.update(HOURS=timestamps.hours, OFFSETS=timestamps.offsets, TS=timestamps.write)
    for index, field in enumerate(fields):
        if field.type not in ("string", "reference", "timestamp"):
            bound[f"R{index}"] = writer(field.type)
    encodes, parts = _parts(fields)
    if unparsed:
        parts.append("TAIL")
    lines = [
        f"def encode(row, {', '.join(f'{name}={name}' for name in bound)}):",
        # Every field's column and no other: the row holds exactly the schema's columns.
        f"    if len(row) != {len(fields)}:",
        "        return None",
        "    try:",
        "        last = NOTHING",
        *[f"        {line}" for line in encodes],
        f"        return join(({', '.join(parts)},))",
        "    except Fallback:",
        "        return None",
    ]
    namespace = dict(bound, __builtins__={})
    # The source names columns only as string literals (repr) and values by field index: no
    # text from the instance becomes code.
    exec(compile("\n".join(lines), "<avro row encoder>", "exec"), namespace)  # noqa: S102
    encoder: RowEncoder = namespace["encode"]
    return encoder
