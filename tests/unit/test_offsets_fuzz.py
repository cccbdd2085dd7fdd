"""Fuzzing submitted offsets documents: every malformed body is refused, naming the entry.

The REST ``PATCH`` and ``snowsource offsets import`` read a body with ``parse_offsets_document``
and ``validate_changes``. Two generators: the table of shapes in ``tests/offsets_shapes.py``
(also sent to a real daemon by ``tests/integration/test_rest_offsets_fuzz.py``), and hypothesis
mutating a valid body of one to three entries in one place, with a value that cannot be valid
there. The oracle is independent of the validator: JSON types, the key sets and value rules of
SPEC §4/§13.1 written out here.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.errors import OffsetError
from snowsource.core.offsets_codec import SourcePartition, partition_for
from snowsource.core.offsets_plan import parse_offsets_document, validate_changes
from tests.offsets_shapes import OFFSET_KEYS, PARTITION_KEYS, malformed_shapes, valid_offset

URL = "https://acme.service-now.com"


class _Table:
    def __init__(self, alias: str, name: str) -> None:
        self.alias = alias
        self.partition: SourcePartition = partition_for(
            snow_url=URL,
            table=name,
            query=None,
            query_domain=True,
            timestamp_field="sys_updated_on",
        )
        self.legacy_partition = self.partition
        self.id_field = "sys_id"


TABLES = [
    _Table("incident", "incident"),
    _Table("change", "change_request"),
    _Table("ci", "cmdb_ci"),
]
PARTITIONS = [t.partition.as_dict() for t in TABLES]


def _refusal(body: Any, *, allow_unconfigured: bool = False) -> str:
    with pytest.raises(OffsetError) as info:
        validate_changes(
            parse_offsets_document(body), TABLES, allow_unconfigured=allow_unconfigured
        )
    message = str(info.value)
    assert message.strip(), body
    return message


SHAPES = malformed_shapes(PARTITIONS[0], PARTITIONS[1])


def test_the_shapes_have_distinct_names() -> None:
    names = [s.name for s in SHAPES]
    assert len(names) == len(set(names)) > 100


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_every_shape_is_refused_with_a_message(shape: Any) -> None:
    if shape.body == {"offsets": []}:
        # Valid for the parser (an import of it does nothing); PATCH refuses it itself.
        assert parse_offsets_document(shape.body) == []
        return
    _refusal(shape.body)
    if shape.for_import:
        _refusal(shape.body, allow_unconfigured=True)


# --------------------------------------------------------------------------------------------
# hypothesis: one mutation of a valid body


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)
NOT_STRING = JSON.filter(lambda v: not isinstance(v, str))
NOT_OBJECT = JSON.filter(lambda v: not isinstance(v, dict))
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
SYS_ID = re.compile(r"([0-9a-f]{32})?")


def _bad_text(key: str, fingerprint: str) -> st.SearchStrategy[str]:
    """Text that cannot be the offset's ``key`` (rules of SPEC §4 and §13.1)."""
    text = st.text(max_size=40)
    if key == "version":
        return text.filter(lambda t: t != "1")
    if key == "phase":
        return text.filter(lambda t: t not in ("backfill", "stream"))
    if key == "fingerprint":
        return text.filter(lambda t: t != fingerprint)
    if key == "timestamp":
        return text.filter(lambda t: not TIMESTAMP.fullmatch(t))
    return text.filter(lambda t: not SYS_ID.fullmatch(t))


@st.composite
def valid_bodies(draw: st.DrawFn) -> dict[str, Any]:
    chosen = draw(
        st.lists(st.sampled_from(range(len(TABLES))), min_size=1, max_size=3, unique=True)
    )
    entries = []
    for index in chosen:
        p = PARTITIONS[index]
        # Any key order: partitions are compared whatever their order.
        order = draw(st.permutations(PARTITION_KEYS))
        offset = draw(st.one_of(st.none(), st.just(valid_offset(p))))
        entries.append({"partition": {k: p[k] for k in order}, "offset": offset})
    return {"offsets": entries}


def _mutations(body: dict[str, Any], i: int) -> st.SearchStrategy[tuple[str, Any]]:
    """(what, value) pairs, each making entry ``i`` of ``body`` invalid."""
    entry = body["offsets"][i]
    fingerprint = entry["partition"]["query_fingerprint"]
    options = [
        st.tuples(st.just("entry"), NOT_OBJECT),
        st.tuples(st.just("entry-drop"), st.sampled_from(["partition", "offset"])),
        st.tuples(
            st.just("entry-extra"), st.text().filter(lambda k: k not in ("partition", "offset"))
        ),
        st.tuples(st.just("partition"), NOT_OBJECT),
        st.tuples(st.just("partition-drop"), st.sampled_from(PARTITION_KEYS)),
        st.tuples(st.just("partition-extra"), st.text().filter(lambda k: k not in PARTITION_KEYS)),
        st.tuples(
            st.just("partition-value"), st.tuples(st.sampled_from(PARTITION_KEYS), NOT_STRING)
        ),
        st.tuples(st.just("offset"), NOT_OBJECT.filter(lambda v: v is not None)),
        st.tuples(st.just("duplicate"), st.permutations(PARTITION_KEYS)),
    ]
    if entry["offset"] is not None:
        options += [
            st.tuples(st.just("offset-drop"), st.sampled_from(OFFSET_KEYS)),
            st.tuples(st.just("offset-extra"), st.text().filter(lambda k: k not in OFFSET_KEYS)),
            st.tuples(st.just("offset-value"), st.tuples(st.sampled_from(OFFSET_KEYS), NOT_STRING)),
            st.sampled_from(OFFSET_KEYS).flatmap(
                lambda key: st.tuples(
                    st.just("offset-text"), st.tuples(st.just(key), _bad_text(key, fingerprint))
                )
            ),
        ]
    return st.one_of(options)


def _apply(body: dict[str, Any], i: int, what: str, value: Any) -> int:
    """Mutate entry ``i`` of ``body`` in place; returns the index the refusal must name."""
    entries = body["offsets"]
    entry = entries[i]
    if what == "entry":
        entries[i] = value
    elif what == "entry-drop":
        del entry[value]
    elif what == "entry-extra":
        entry[value] = {}
    elif what == "partition":
        entry["partition"] = value
    elif what == "partition-drop":
        del entry["partition"][value]
    elif what == "partition-extra":
        entry["partition"][value] = "x"
    elif what == "partition-value":
        entry["partition"][value[0]] = value[1]
    elif what == "offset":
        entry["offset"] = value
    elif what == "duplicate":
        entries.append({"partition": {k: entry["partition"][k] for k in value}, "offset": None})
        return len(entries) - 1
    elif what == "offset-drop":
        del entry["offset"][value]
    elif what == "offset-extra":
        entry["offset"][value] = "x"
    else:  # offset-value, offset-text
        entry["offset"][value[0]] = value[1]
    return i


def test_the_valid_bodies_are_accepted() -> None:
    @given(valid_bodies())
    def accepted(body: dict[str, Any]) -> None:
        assert len(validate_changes(parse_offsets_document(body), TABLES)) == len(body["offsets"])

    accepted()


@given(st.data())
def test_one_mutation_anywhere_is_refused_naming_its_entry(data: st.DataObject) -> None:
    body = copy.deepcopy(data.draw(valid_bodies()))
    i = data.draw(st.integers(0, len(body["offsets"]) - 1))
    what, value = data.draw(_mutations(body, i))
    named = _apply(body, i, what, value)
    for allow_unconfigured in (False, True):
        message = _refusal(body, allow_unconfigured=allow_unconfigured)
        assert f"offsets[{named}]" in message, (what, value, message)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30])
def test_an_integer_json_cannot_carry_is_an_offset_error_not_a_crash(value: int) -> None:
    # Found by the mutation test above: describing such a partition used to raise TypeError.
    body = {"offsets": [{"partition": {**PARTITIONS[0], "instance": value}, "offset": None}]}
    assert "offsets[0]" in _refusal(body)
