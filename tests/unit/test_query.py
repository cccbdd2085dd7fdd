"""Query normalisation and fingerprints (SPEC §4, §12) against the shared vectors, plus
properties: idempotence, whitespace invariance and AND-term order invariance."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.query import (
    has_orderby,
    legacy_normalise_query,
    legacy_query_fingerprint,
    normalise_query,
    query_fingerprint,
    split_groups,
)
from tests.vectors import vector

FINGERPRINTS = vector("fingerprints.json")
CASES = FINGERPRINTS["cases"]
INVALID = FINGERPRINTS["invalid_queries"]


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c['table']}|{c['query']!r}|{c['query_domain']}"
)
def test_fingerprint_vector(case: dict[str, Any]) -> None:
    table, query, domain = case["table"], case["query"], case["query_domain"]
    assert normalise_query(query) == case["normalised_query"]
    assert query_fingerprint(table, query, domain) == case["fingerprint"]
    assert legacy_query_fingerprint(table, query, domain) == case["legacy_fingerprint"]
    assert not has_orderby(query)


@pytest.mark.parametrize("query", INVALID)
def test_invalid_queries_have_orderby(query: str) -> None:
    assert has_orderby(query)


def test_vectors_cover_reordering_and_legacy_differences() -> None:
    assert any(c["fingerprint"] != c["legacy_fingerprint"] for c in CASES)
    assert any(c["normalised_query"] != (c["query"] or "").strip() for c in CASES)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("active=true^ORDERBYnumber", True),
        ("ORDERBYDESCsys_created_on", True),
        ("a=1^NQ ORDERBYnumber", True),
        ("a=1^ ORDERBYnumber", True),
        ("short_descriptionLIKEORDERBY", False),
        ("a=1^ORb=2", False),
        ("", False),
        (None, False),
    ],
)
def test_has_orderby(query: str | None, expected: bool) -> None:
    assert has_orderby(query) is expected


def test_fingerprint_material() -> None:
    import hashlib

    expected = hashlib.sha256(b"incident\nactive=true^priority=1\nfalse").hexdigest()
    assert query_fingerprint("incident", "priority=1^active=true", False) == f"sha256:{expected}"
    legacy = hashlib.sha256(b"incident\npriority=1^active=true\nfalse").hexdigest()
    assert legacy_query_fingerprint("incident", " priority=1^active=true ", False) == (
        f"sha256:{legacy}"
    )


def test_text_and_related_list_queries_are_not_reordered() -> None:
    query = " b=1^a=2\t\t^123TEXTQUERY321disk  full^EQ"
    assert normalise_query(query) == "b=1^a=2 ^123TEXTQUERY321disk full"
    assert split_groups(normalise_query("b=1^NQRLQUERYx^ENDRLQUERY")) == [
        "b=1^NQRLQUERYx^ENDRLQUERY"
    ]


def test_split_groups() -> None:
    assert split_groups("") == [""]
    assert split_groups(normalise_query("b=2^a=1^NQc=3")) == ["a=1^b=2", "c=3"]


def test_only_ascii_whitespace_is_collapsed() -> None:
    assert normalise_query("a=x\u00a0\u00a0y") == "a=x\u00a0\u00a0y"
    assert normalise_query("a=x \t\n\v\f\r y") == "a=x y"
    assert legacy_normalise_query("\u2003a=1\u2003") == "\u2003a=1\u2003"


# ------------------------------------------------------------------------------------------
# Properties over well-formed encoded queries

_WS = st.text(alphabet=" \t\n\v\f\r", max_size=3)
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_FIELD = st.builds(
    str.__add__, st.sampled_from(_LOWER), st.text(alphabet=_LOWER + "0123456789_.", max_size=8)
)
_OP = st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "LIKE", "STARTSWITH", "IN", "ISEMPTY"])
_WORD = st.text(alphabet=_LOWER + _LOWER.upper() + "0123456789,@.:-", min_size=1, max_size=6)
_VALUE = st.lists(_WORD, max_size=3).map(" ".join)
_TERM = st.builds(lambda f, o, v: f + o + v, _FIELD, _OP, _VALUE)
# An AND-block: a term and the OR-terms bound to it.
_BLOCK = st.lists(_TERM, min_size=1, max_size=3)
_GROUP = st.lists(_BLOCK, min_size=1, max_size=5)
_QUERY = st.lists(_GROUP, min_size=1, max_size=3)

Query = list[list[list[str]]]


def _render(query: Query, pad: Any = None) -> str:
    def ws() -> str:
        return pad() if pad else ""

    def block(terms: list[str]) -> str:
        first, *ors = terms
        return "^".join([ws() + first + ws(), *(ws() + "OR" + t + ws() for t in ors)])

    return "^NQ".join("^".join(block(b) for b in group) for group in query)


@given(_QUERY)
def test_normalisation_is_idempotent(query: Query) -> None:
    normalised = normalise_query(_render(query))
    assert normalise_query(normalised) == normalised
    assert not re.search(r"[ \t\n\v\f\r]{2}|[\t\n\v\f\r]|^ | $", normalised)


_ODD_PIECES = ["^", "OR", " ", "\t", "a", "b", "=", "ORDERBY", "Z", "^OR", "^NQ"]


@given(st.lists(st.sampled_from(_ODD_PIECES), max_size=20).map("".join))
def test_normalisation_is_idempotent_on_odd_input(query: str) -> None:
    normalised = normalise_query(query)
    assert normalise_query(normalised) == normalised


@given(_QUERY, st.data())
def test_whitespace_does_not_change_the_fingerprint(query: Query, data: st.DataObject) -> None:
    plain = _render(query)
    spaced = _render(query, pad=lambda: data.draw(_WS))
    spaced = data.draw(_WS) + spaced.replace(" ", data.draw(st.sampled_from([" ", "  ", " \t"])))
    spaced += data.draw(_WS)
    assert normalise_query(spaced) == normalise_query(plain)
    assert query_fingerprint("incident", spaced, True) == query_fingerprint("incident", plain, True)


@given(_QUERY, st.data())
def test_and_term_order_does_not_change_the_fingerprint(query: Query, data: st.DataObject) -> None:
    shuffled = [data.draw(st.permutations(group)) for group in query]
    assert normalise_query(_render(shuffled)) == normalise_query(_render(query))
    assert query_fingerprint("t", _render(shuffled), False) == query_fingerprint(
        "t", _render(query), False
    )


@given(_QUERY)
def test_or_terms_stay_with_their_term(query: Query) -> None:
    normalised = normalise_query(_render(query))
    for group, rendered in zip(query, normalised.split("^NQ"), strict=True):
        for block in group:
            first, *ors = (re.sub(r"[ \t\n\v\f\r]+", " ", t).strip() for t in block)
            assert "^".join([first, *("OR" + t for t in ors)]) in rendered


@given(_QUERY)
def test_trailing_eq_and_empty_terms_are_dropped(query: Query) -> None:
    plain = _render(query)
    assert normalise_query(plain + "^EQ") == normalise_query(plain)
    assert normalise_query("^" + plain.replace("^", "^^") + "^") == normalise_query(plain)


@given(_QUERY, _FIELD, st.sampled_from(["ORDERBY", "ORDERBYDESC"]))
def test_orderby_is_detected(query: Query, field: str, keyword: str) -> None:
    plain = _render(query)
    assert not has_orderby(plain)
    assert has_orderby(f"{plain}^{keyword}{field}")


@given(_QUERY)
def test_group_order_is_kept(query: Query) -> None:
    groups = normalise_query(_render(query)).split("^NQ")
    assert groups == [normalise_query(_render([group])) for group in query]


@given(_QUERY, st.data())
def test_legacy_normalisation_only_touches_whitespace(query: Query, data: st.DataObject) -> None:
    plain = _render(query)
    padded = data.draw(_WS) + plain + data.draw(_WS)
    assert legacy_normalise_query(padded) == re.sub(r"[ \t\n\v\f\r]+", " ", plain).strip()
