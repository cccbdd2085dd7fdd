"""Encoded-query normalisation and the query fingerprint (SPEC §4, §12).

Pure functions, no I/O. The normalised form is what the fingerprint hashes and what the keyset
cursor repeats in every ``^NQ`` group, so reformatting a base query (spacing, term order, a UI's
trailing ``^EQ``) never changes the source partition and never leaks into page requests.
"""

from __future__ import annotations

import hashlib
import re

# SPEC §12: "whitespace" means ASCII whitespace only, as in the shared vectors.
_ASCII_WS = re.compile(r"[ \t\n\v\f\r]+")
_ASCII_WS_CHARS = " \t\n\v\f\r"
_NO_REORDER_MARKERS = ("RLQUERY", "123TEXTQUERY321")


def _collapse(text: str) -> str:
    return _ASCII_WS.sub(" ", text).strip(_ASCII_WS_CHARS)


def _drop_trailing_eq(query: str) -> str:
    stripped = query.strip(_ASCII_WS_CHARS)
    if stripped.endswith("^EQ"):
        stripped = stripped[: -len("^EQ")]
    elif stripped == "EQ":
        stripped = ""
    return stripped


def has_orderby(query: str | None) -> bool:
    """True when the query has an ``ORDERBY``/``ORDERBYDESC`` term (not allowed in a base query)."""
    if not query:
        return False
    return any(
        token.strip(_ASCII_WS_CHARS).startswith("ORDERBY")
        for group in query.split("^NQ")
        for token in group.split("^")
    )


def _normalise_group(group: str) -> list[str]:
    terms: list[str] = []
    for raw in group.split("^"):
        token = _collapse(raw)
        if not token:
            continue
        if token.startswith("OR") and not token.startswith("ORDERBY") and terms:
            # A dependent OR binds to the term right before it (A^B^ORC = A and (B or C)),
            # so it travels with that term when the AND-terms are sorted.
            terms[-1] = f"{terms[-1]}^{token}"
        else:
            terms.append(token)
    return sorted(terms)


def normalise_query(query: str | None) -> str:
    """Return the canonical form of a base encoded query (SPEC §4)."""
    if not query:
        return ""
    query = _drop_trailing_eq(query)
    if any(marker in query for marker in _NO_REORDER_MARKERS):
        # Related-list and text-search queries have their own inner syntax: never split them.
        return _collapse(query)
    groups = ["^".join(_normalise_group(group)) for group in query.split("^NQ")]
    return "^NQ".join(groups)


def legacy_normalise_query(query: str | None) -> str:
    """The Java connector's form: trimmed, ASCII whitespace runs collapsed, nothing reordered."""
    if not query:
        return ""
    return _collapse(query)


def _fingerprint(table: str, normalised: str, query_domain: bool) -> str:
    material = f"{table}\n{normalised}\n{'true' if query_domain else 'false'}"
    return "sha256:" + hashlib.sha256(material.encode("utf-8")).hexdigest()


def query_fingerprint(table: str, query: str | None, query_domain: bool) -> str:
    """``sha256:<hex>`` over table name, normalised query and ``query.domain`` (SPEC §4)."""
    return _fingerprint(table, normalise_query(query), query_domain)


def legacy_query_fingerprint(table: str, query: str | None, query_domain: bool) -> str:
    """The fingerprint the Java connector computes, for the migration fallback (SPEC §4)."""
    return _fingerprint(table, legacy_normalise_query(query), query_domain)


def split_groups(normalised: str) -> list[str]:
    """The ``^NQ`` groups of a normalised query (one empty group for an empty query)."""
    if any(marker in normalised for marker in _NO_REORDER_MARKERS):
        return [normalised]
    return normalised.split("^NQ")
