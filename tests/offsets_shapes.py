"""Malformed offsets documents (SPEC §8, §13.1), generated from one valid pair.

Each shape changes one thing of a valid ``{"offsets": [{"partition": P, "offset": O}]}`` body:
the body, the list, an entry, the partition or the offset — its type, a missing, empty or extra
key, a wrong value — or lists a partition twice. Every shape is malformed for REST ``PATCH``;
``for_import`` says whether ``snowsource offsets import`` (which also takes offsets of
partitions no table is configured for, and an empty list) must refuse it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PARTITION_KEYS = ("instance", "timestamp_field", "query_fingerprint", "table")
OFFSET_KEYS = ("version", "timestamp", "sys_id", "phase", "fingerprint")
NOT_STRINGS: tuple[Any, ...] = (1, 1.5, None, True, [], {}, ["x"], {"k": "v"})
NOT_OBJECTS: tuple[Any, ...] = (1, "x", "", True, [], ["x"])


@dataclass(frozen=True)
class Shape:
    name: str
    body: Any
    for_import: bool = True


def valid_offset(partition: dict[str, str], ts: str = "2026-09-01 00:00:00") -> dict[str, str]:
    """A valid stored offset of ``partition`` (id field ``sys_id``)."""
    return {
        "version": "1",
        "timestamp": ts,
        "sys_id": "a1" * 16,
        "phase": "stream",
        "fingerprint": partition["query_fingerprint"],
    }


def _body(entries: list[Any]) -> dict[str, Any]:
    return {"offsets": entries}


def _entry(partition: Any, offset: Any) -> dict[str, Any]:
    return {"partition": partition, "offset": offset}


def _partition_shapes(p: dict[str, str], o: dict[str, str]) -> list[Shape]:
    shapes = [Shape(f"partition-{v!r}", _body([_entry(v, o)])) for v in (*NOT_OBJECTS, None)]
    shapes.append(Shape("partition-empty", _body([_entry({}, o)])))
    shapes.append(Shape("partition-extra-key", _body([_entry({**p, "filename": "/x"}, o)])))
    for key in PARTITION_KEYS:
        rest = {k: v for k, v in p.items() if k != key}
        shapes.append(Shape(f"partition-no-{key}", _body([_entry(rest, o)])))
        for value in NOT_STRINGS:
            shapes.append(
                Shape(f"partition-{key}-{value!r}", _body([_entry({**p, key: value}, o)]))
            )
    # Well-formed partitions of no configured table: refused by PATCH, kept by an import.
    for key, value in (("table", "nope"), ("instance", "other.example.com"), ("table", "")):
        shapes.append(
            Shape(f"partition-{key}={value!r}", _body([_entry({**p, key: value}, o)]), False)
        )
    # ... unless the offset does not match the partition it names.
    wrong = {**p, "query_fingerprint": "sha256:" + "0" * 64}
    shapes.append(Shape("partition-fingerprint-mismatch", _body([_entry(wrong, o)])))
    return shapes


_BAD_VALUES: dict[str, tuple[str, ...]] = {
    "version": ("2", "", "1.0", " 1"),
    "timestamp": (
        "2026-09-01T00:00:00",
        "2026-02-30 00:00:00",
        "2026-09-01",
        "",
        " 2026-09-01 00:00:00",
        "2026-09-01 24:00:00",
    ),
    "sys_id": ("xyz", "A1" * 16, "a1" * 15 + "a", "a^b" + "0" * 29, "a1" * 17),
    "phase": ("later", "", "STREAM"),
    "fingerprint": ("sha256:" + "0" * 64, ""),
}


def _offset_shapes(p: dict[str, str], o: dict[str, str]) -> list[Shape]:
    shapes = [Shape(f"offset-{v!r}", _body([_entry(p, v)])) for v in NOT_OBJECTS]
    shapes.append(Shape("offset-empty", _body([_entry(p, {})])))
    shapes.append(Shape("offset-extra-key", _body([_entry(p, {**o, "extra": "x"})])))
    shapes.append(
        Shape(
            "offset-fingerprint-upper",
            _body([_entry(p, {**o, "fingerprint": o["fingerprint"].upper()})]),
        )
    )
    for key in OFFSET_KEYS:
        rest = {k: v for k, v in o.items() if k != key}
        shapes.append(Shape(f"offset-no-{key}", _body([_entry(p, rest)])))
        for value in NOT_STRINGS:
            shapes.append(Shape(f"offset-{key}-{value!r}", _body([_entry(p, {**o, key: value})])))
        for text in _BAD_VALUES[key]:
            shapes.append(Shape(f"offset-{key}={text!r}", _body([_entry(p, {**o, key: text})])))
    return shapes


def malformed_shapes(partition: dict[str, str], other: dict[str, str]) -> list[Shape]:
    """Every malformed body built from the partitions of two configured tables (``other``
    stands beside a bad entry: one good pair does not make a bad body half-written)."""
    p, o = partition, valid_offset(partition)
    good = _entry(p, o)
    fine = _entry(other, valid_offset(other))
    reordered = dict(reversed(list(p.items())))
    shapes = [Shape(f"body-{v!r}", v) for v in (*NOT_OBJECTS, None)]
    shapes += [
        Shape("body-empty", {}),
        Shape("offsets-misspelt", {"offset": [good]}),
        Shape("offsets-null", {"offsets": None}),
        Shape("offsets-object", {"offsets": good}),
        Shape("offsets-string", {"offsets": "all"}),
        Shape("offsets-empty-list", {"offsets": []}, for_import=False),
    ]
    shapes += [Shape(f"entry-{v!r}", _body([v])) for v in (*NOT_OBJECTS, None)]
    shapes += [
        Shape("entry-empty", _body([{}])),
        Shape("entry-no-partition", _body([{"offset": o}])),
        Shape("entry-no-offset", _body([{"partition": p}])),
        Shape("entry-offset-misspelt", _body([{"partition": p, "ofset": o}])),
        Shape("entry-extra-key", _body([{**good, "extra": 1}])),
        Shape("entry-partition-misspelt", _body([{"partiton": p, "offset": o}])),
    ]
    shapes += _partition_shapes(p, o)
    shapes += _offset_shapes(p, o)
    shapes += [
        Shape("duplicate-entry", _body([good, good])),
        Shape("duplicate-reordered-then-null", _body([good, _entry(reordered, None)])),
        Shape(
            "duplicate-other-offset",
            _body([good, _entry(p, valid_offset(p, "2026-01-01 00:00:00"))]),
        ),
        Shape("good-then-bad", _body([fine, _entry(p, {**o, "version": "9"})])),
        Shape("no-offset-then-good", _body([{"partition": p}, fine])),
        Shape("good-then-bad-partition", _body([fine, _entry({**p, "table": 7}, o)])),
    ]
    return shapes
