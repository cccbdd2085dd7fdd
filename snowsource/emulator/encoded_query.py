"""Encoded-query parser and query model for the ServiceNow Table API emulator.

Pure code, no I/O. A ``sysparm_query`` string is parsed once into a :class:`ParsedQuery` whose
conditions are compiled into closures (built by :mod:`snowsource.emulator.query_eval`), so
filtering a 100k-row table costs a few dictionary lookups and string comparisons per row, never a
regular expression.

Grammar (``servicenow-table-api.md`` §2):

- ``^`` is AND. ``^OR`` is a *dependent* OR binding to the condition right before it:
  ``A^B^ORC`` is ``A and (B or C)``. ``^NQ`` is a top-level OR of whole AND-groups:
  ``A^B^NQC^D`` is ``(A and B) or (C and D)``.
- ``ORDERBY<f>`` / ``ORDERBYDESC<f>`` may appear anywhere (usually at the very end, inside the
  last ``^NQ`` group); they are collected into one global, multi-key sort, earlier = primary.
- A ``^EQ`` token is a no-op; empty tokens are ignored; tokens are trimmed of ASCII whitespace.
- A condition is ``<field><operator><operand>``. Field names are ``[A-Za-z0-9_.]+`` (dot-walked
  names are looked up as flat row keys, e.g. ``caller_id.name``). The operator starts at the first
  character outside that set or at an upper-case keyword operator; when several splits are
  possible (``u_fooINbar``), the first one whose field is known wins.
- Operators: ``= != < <= > >= IN NOT IN LIKE NOT LIKE STARTSWITH ENDSWITH ISEMPTY ISNOTEMPTY
  EMPTYSTRING ANYTHING BETWEEN SAMEAS NSAMEAS GT_FIELD LT_FIELD GT_OR_EQUALS_FIELD
  LT_OR_EQUALS_FIELD`` and the aliases ``*`` (LIKE), ``!*`` (NOT LIKE), ``%`` (ENDSWITH).

Evaluation (row values are strings; a missing key counts as ``""``):

- ``integer``/``decimal`` compare numerically; a non-numeric row value never matches an ordered
  comparison (``< <= > >= BETWEEN``). ``datetime`` values are UTC ``YYYY-MM-DD HH:MM:SS`` strings,
  compared lexically (= chronologically); a date-only operand means midnight. ``boolean`` accepts
  ``true/false/1/0`` in any case for equality. Everything else compares as case-sensitive Python
  strings (``sys_id>abc`` is lexical); ``LIKE``/``STARTSWITH``/``ENDSWITH`` are case-sensitive too.
- An empty row value behaves like SQL NULL: it never matches an ordered comparison, but it does
  match the negations ``!=``, ``NOT IN`` and ``NOT LIKE`` (ServiceNow documents this for ``!=``).
  ``field!=`` with an empty operand means "is not empty".
- ``IN`` items are comma-separated and trimmed. ``BETWEEN`` takes ``low@high``, inclusive.
- ``javascript:gs.dateGenerate('YYYY-MM-DD','HH:MM:SS')`` (time may also be ``start``/``end``)
  is read in the caller's time zone and converted to a UTC literal; any other ``javascript:``
  operand raises :class:`QueryError`.
- A condition on an unknown field is dropped (recorded in ``dropped``) and the rest still applies;
  a group whose conditions were all dropped matches everything, as an empty AND does. With
  ``invalid_query_returns_no_rows=True`` any dropped condition makes the query match nothing.
  ``ORDERBY`` on an unknown field is ignored (recorded in ``ignored_order_by``).
- Sorting is stable: integer/decimal keys numerically, the rest in string order, empty values
  first; ``ORDERBYDESC`` reverses that key only; ties keep the input order.

Not supported, raising :class:`QueryError` (the emulator answers 400): related-list queries
``RLQUERY…ENDRLQUERY``, sub-queries, text search ``123TEXTQUERY321`` / ``IR_*_QUERY``, the date
helper operators (``ON``, ``NOTON``, ``DATEPART``, ``RELATIVE*``, ``MORETHAN``, ``LESSTHAN``),
``DYNAMIC``, ``INSTANCEOF``, ``IN_HIERARCHY``, change operators (``VALCHANGES``, ``CHANGESFROM``,
``CHANGESTO``), and any condition without a recognisable operator.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar
from zoneinfo import ZoneInfo

from snowsource.emulator.query_eval import (
    ASCII_WS,
    DATE_ONLY,
    JAVASCRIPT,
    UNSUPPORTED_KEYWORDS,
    FieldType,
    Predicate,
    QueryError,
    Row,
    always,
    combined_key,
    compile_condition,
    field_compare_test,
    never,
    sort_key,
)

__all__ = [
    "AndGroup",
    "Condition",
    "FieldType",
    "OrChain",
    "OrderKey",
    "ParsedQuery",
    "QueryError",
    "literal_operand",
    "match_group",
    "parse_encoded_query",
]

R = TypeVar("R", bound=Mapping[str, str])


@dataclasses.dataclass(frozen=True)
class OrderKey:
    """One ``ORDERBY``/``ORDERBYDESC`` sort key."""

    field: str
    descending: bool


@dataclasses.dataclass(frozen=True)
class Condition:
    """One parsed ``<field><operator><operand>`` condition with its compiled test."""

    text: str
    field: str
    operator: str
    operand: str
    test: Predicate = dataclasses.field(repr=False, compare=False)

    def matches(self, row: Row) -> bool:
        """Whether ``row`` satisfies this condition alone."""
        return self.test(row)


OrChain = tuple[Condition, ...]
"""Conditions joined by ``^OR``: at least one must hold."""
AndGroup = tuple[OrChain, ...]
"""OR-chains joined by ``^``: all must hold. An empty group matches every row."""


def _compile_chain(chain: OrChain) -> Predicate:
    tests = tuple(c.test for c in chain)
    if not tests:
        return never
    if len(tests) == 1:
        return tests[0]

    def any_of(row: Row) -> bool:
        for test in tests:  # noqa: SIM110  a plain loop beats any(<genexpr>) per row
            if test(row):
                return True
        return False

    return any_of


def _compile_group(group: AndGroup) -> Predicate:
    tests = tuple(_compile_chain(chain) for chain in group)
    if not tests:
        return always
    if len(tests) == 1:
        return tests[0]

    def all_of(row: Row) -> bool:
        for test in tests:  # noqa: SIM110  a plain loop beats all(<genexpr>) per row
            if not test(row):
                return False
        return True

    return all_of


def match_group(group: AndGroup, row: Row) -> bool:
    """Whether ``row`` satisfies one ``^NQ`` group on its own (slow path, for checks and tests)."""
    return _compile_group(group)(row)


@dataclasses.dataclass(frozen=True)
class ParsedQuery:
    """A parsed encoded query: ``^NQ`` groups, global sort keys and what was left out.

    ``groups`` is an OR of AND-groups; each AND term is an OR-chain of conditions. No groups
    means "every row". ``order_types`` holds the field type of each ``order_by`` key (missing
    entries sort as strings).
    """

    groups: tuple[AndGroup, ...] = ()
    order_by: tuple[OrderKey, ...] = ()
    dropped: tuple[str, ...] = ()
    matches_nothing: bool = False
    order_types: tuple[FieldType, ...] = ()
    ignored_order_by: tuple[str, ...] = ()
    _matcher: Predicate = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.matches_nothing:
            matcher: Predicate = never
        elif not self.groups:
            matcher = always
        else:
            tests = tuple(_compile_group(group) for group in self.groups)
            if len(tests) == 1:
                matcher = tests[0]
            else:

                def any_group(row: Row) -> bool:
                    for test in tests:  # noqa: SIM110  a plain loop beats any(<genexpr>)
                        if test(row):
                            return True
                    return False

                matcher = any_group
        object.__setattr__(self, "_matcher", matcher)

    def matches(self, row: Row) -> bool:
        """Whether ``row`` is selected by the query (an empty query selects every row)."""
        return self._matcher(row)

    def filter(self, rows: Iterable[R]) -> list[R]:
        """The rows the query selects, in input order."""
        matcher = self._matcher
        return [row for row in rows if matcher(row)]

    def sort(self, rows: Iterable[R]) -> list[R]:
        """A new list of ``rows`` stably sorted by ``order_by`` (input order when there is none)."""
        out = list(rows)
        keys = self.order_by
        # Stable sorts applied from the least significant keys up give the multi-key order, and
        # ``reverse=True`` keeps ties in input order, so DESC flips only its own keys. Adjacent
        # keys with the same direction share one pass with a tuple key.
        end = len(keys)
        while end > 0:
            descending = keys[end - 1].descending
            start = end - 1
            while start > 0 and keys[start - 1].descending == descending:
                start -= 1
            parts = [
                sort_key(keys[i].field, self.order_types[i] if i < len(self.order_types) else "")
                for i in range(start, end)
            ]
            out.sort(key=combined_key(parts), reverse=descending)
            end = start
        return out

    def apply(self, rows: Iterable[R]) -> list[R]:
        """Filter then sort: what the Table API would return before paging."""
        return self.sort(self.filter(rows))


def literal_operand(condition: Condition) -> str | None:
    """The operand ``condition``'s test compares with, when that is its text unchanged.

    ``None`` for a ``javascript:`` operand or a date-only one (both are rewritten first).
    """
    operand = condition.operand
    if operand[: len(JAVASCRIPT)].lower() == JAVASCRIPT or DATE_ONLY.fullmatch(operand):
        return None
    return operand


# --- operators --------------------------------------------------------------------------------

_ALIASES = {"*": "LIKE", "!*": "NOT LIKE", "%": "ENDSWITH"}
_SYMBOL_OPERATORS = ("!=", "<=", ">=", "!*", "=", "<", ">", "*", "%")  # longest first
_SUPPORTED_KEYWORDS = (
    "IN", "NOT IN", "LIKE", "NOT LIKE", "STARTSWITH", "ENDSWITH", "ISEMPTY", "ISNOTEMPTY",
    "EMPTYSTRING", "ANYTHING", "BETWEEN", "SAMEAS", "NSAMEAS", "GT_FIELD", "LT_FIELD",
    "GT_OR_EQUALS_FIELD", "LT_OR_EQUALS_FIELD"
)  # fmt: skip
_KEYWORDS = tuple(sorted((*_SUPPORTED_KEYWORDS, *UNSUPPORTED_KEYWORDS), key=len, reverse=True))
_FIELD_PREFIX = re.compile(r"[A-Za-z0-9_.]*")
_FIELD_NAME = re.compile(r"[A-Za-z0-9_.]+")
_RESERVED_PREFIXES = (
    "RLQUERY", "ENDRLQUERY", "SUBQUERY", "ENDSUBQUERY", "123TEXTQUERY321", "IR_AND_OR_QUERY",
    "IR_OR_QUERY", "IR_AND_QUERY"
)  # fmt: skip
_FIELD_COMPARE = frozenset(
    {"SAMEAS", "NSAMEAS", "GT_FIELD", "LT_FIELD", "GT_OR_EQUALS_FIELD", "LT_OR_EQUALS_FIELD"}
)

Split = tuple[str, str, str, FieldType | None]


def _split_condition(text: str, field_type: Callable[[str], FieldType | None]) -> Split:
    """Split ``text`` into field, operator and operand, preferring a split on a known field."""
    end = _FIELD_PREFIX.match(text)
    boundary = end.end() if end else 0
    candidates: list[tuple[int, str]] = []
    for index in range(1, boundary):
        if "A" <= text[index] <= "Z":
            for keyword in _KEYWORDS:
                if text.startswith(keyword, index):
                    candidates.append((index, keyword))
                    break
    if boundary > 0:
        for symbol in _SYMBOL_OPERATORS:
            if text.startswith(symbol, boundary):
                candidates.append((boundary, symbol))
                break
    if not candidates:
        raise QueryError(f"no recognisable operator in condition {text!r}")
    for index, op in candidates:
        name = text[:index]
        ftype = field_type(name)
        if ftype is not None:
            return name, op, text[index + len(op) :], ftype
    index, op = candidates[0]
    return text[:index], op, text[index + len(op) :], None


# --- parser -----------------------------------------------------------------------------------


def parse_encoded_query(
    query: str,
    *,
    field_type: Callable[[str], FieldType | None],
    user_tz: ZoneInfo,
    invalid_query_returns_no_rows: bool = False,
) -> ParsedQuery:
    """Parse ``sysparm_query`` into a compiled :class:`ParsedQuery`.

    ``field_type`` returns the type of a field of the queried table, or ``None`` when the table
    has no such field. ``user_tz`` is the caller's session time zone, used only by
    ``javascript:gs.dateGenerate``. Raises :class:`QueryError` for anything unparseable or
    unsupported (see the module docstring).
    """
    parser = _QueryParser(field_type, user_tz)
    for raw in query.split("^"):
        term = raw.strip(ASCII_WS)
        if term.startswith("NQ"):
            parser.new_group()
            term = term[2:].strip(ASCII_WS)
        if not term or term == "EQ":
            continue
        if term.startswith(_RESERVED_PREFIXES):
            raise QueryError(f"unsupported query construct {term!r} in the emulator")
        if term.startswith("ORDERBY"):
            parser.order(term)
        else:
            parser.condition(term)
    return parser.parsed(matches_nothing_if_dropped=invalid_query_returns_no_rows)


class _QueryParser:
    """What the terms of one encoded query said so far, in the order they came."""

    def __init__(self, field_type: Callable[[str], FieldType | None], user_tz: ZoneInfo) -> None:
        self._field_type = field_type
        self._user_tz = user_tz
        # Per group: the OR-chains, and whether any condition was written in it at all (a group
        # holding only ORDERBY/EQ tokens is no group, not "match everything").
        self._groups: list[list[list[Condition]]] = [[]]
        self._written: list[bool] = [False]
        self._order_by: list[OrderKey] = []
        self._order_types: list[FieldType] = []
        self._ignored_order_by: list[str] = []
        self._dropped: list[str] = []

    def new_group(self) -> None:
        """``^NQ``: a new OR'ed group of conditions begins."""
        self._groups.append([])
        self._written.append(False)

    def order(self, term: str) -> None:
        """``ORDERBY<field>`` or ``ORDERBYDESC<field>``; an unknown field is ignored."""
        descending = term.startswith("ORDERBYDESC")
        name = term[len("ORDERBYDESC") if descending else len("ORDERBY") :].strip(ASCII_WS)
        ftype = self._field_type(name) if _FIELD_NAME.fullmatch(name) else None
        if ftype is None:
            self._ignored_order_by.append(term)
        else:
            self._order_by.append(OrderKey(name, descending))
            self._order_types.append(ftype)

    def condition(self, term: str) -> None:
        """A condition, ANDed to the group's last OR-chain or (``OR``-prefixed) ORed to it."""
        dependent = term.startswith("OR")
        if dependent:
            term = term[2:].strip(ASCII_WS)
            if not term:
                return
        self._written[-1] = True
        chains = self._groups[-1]
        if not (dependent and chains):
            chains.append([])
        condition = _parse_condition(term, self._field_type, self._user_tz)
        if condition is None:
            self._dropped.append(term)
        else:
            chains[-1].append(condition)

    def parsed(self, *, matches_nothing_if_dropped: bool) -> ParsedQuery:
        groups = tuple(
            tuple(tuple(chain) for chain in chains if chain)
            for chains, has_conditions in zip(self._groups, self._written, strict=True)
            if has_conditions
        )
        return ParsedQuery(
            groups=groups,
            order_by=tuple(self._order_by),
            dropped=tuple(self._dropped),
            matches_nothing=matches_nothing_if_dropped and bool(self._dropped),
            order_types=tuple(self._order_types),
            ignored_order_by=tuple(self._ignored_order_by),
        )


def _parse_condition(
    text: str, field_type: Callable[[str], FieldType | None], user_tz: ZoneInfo
) -> Condition | None:
    """Compile one condition; ``None`` when it names an unknown field and must be dropped."""
    name, op, operand, ftype = _split_condition(text, field_type)
    if ftype is None:
        return None
    op = _ALIASES.get(op, op)
    if op in _FIELD_COMPARE:
        other = operand.strip(ASCII_WS)
        if not _FIELD_NAME.fullmatch(other) or field_type(other) is None:
            return None
        test = field_compare_test(name, op, other, ftype)
    else:
        test = compile_condition(name, op, operand, ftype, user_tz)
    return Condition(text=text, field=name, operator=op, operand=operand, test=test)
