"""Encoded-query parser and evaluator for the ServiceNow Table API emulator.

Pure code, no I/O. A ``sysparm_query`` string is parsed once into a :class:`ParsedQuery` whose
conditions are compiled into closures, so filtering a 100k-row table costs a few dictionary
lookups and string comparisons per row, never a regular expression.

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
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, Literal, TypeVar
from zoneinfo import ZoneInfo

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

FieldType = Literal[
    "string", "integer", "decimal", "boolean", "datetime", "reference", "choice", "sys_id"
]
Row = Mapping[str, str]
Predicate = Callable[[Row], bool]
R = TypeVar("R", bound=Mapping[str, str])


class QueryError(ValueError):
    """The encoded query cannot be parsed or uses something the emulator does not support."""


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


def _always(_row: Row) -> bool:
    return True


def _never(_row: Row) -> bool:
    return False


def _compile_chain(chain: OrChain) -> Predicate:
    tests = tuple(c.test for c in chain)
    if not tests:
        return _never
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
        return _always
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
            matcher: Predicate = _never
        elif not self.groups:
            matcher = _always
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
                _sort_key(keys[i].field, self.order_types[i] if i < len(self.order_types) else "")
                for i in range(start, end)
            ]
            out.sort(key=_combined_key(parts), reverse=descending)
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
    if operand[: len(_JAVASCRIPT)].lower() == _JAVASCRIPT or _DATE_ONLY.fullmatch(operand):
        return None
    return operand


# --- values -----------------------------------------------------------------------------------

_NUMERIC_TYPES = frozenset({"integer", "decimal"})
_DECIMAL_SHAPE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE_ONLY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_BOOLEANS = {"true": "true", "1": "true", "false": "false", "0": "false"}
_JAVASCRIPT = "javascript:"
_DATE_GENERATE = re.compile(
    r"""javascript:\s*gs\.dateGenerate\(\s*(['"])([0-9]{4}-[0-9]{2}-[0-9]{2})\1\s*,"""
    r"""\s*(['"])([0-9]{2}:[0-9]{2}:[0-9]{2}|start|end)\3\s*\)\s*;?\s*"""
)
_ASCII_WS = " \t\n\v\f\r"

Number = int | Decimal


def _number(value: str) -> Number | None:
    """Parse a stored numeric value; ``None`` when it is not a plain number."""
    # int() alone would accept "1_000", surrounding spaces and non-ASCII digits.
    if (
        not value
        or not value.isascii()
        or "_" in value
        or value[0] in _ASCII_WS
        or value[-1] in _ASCII_WS
    ):
        return None
    try:
        return int(value)
    except ValueError:
        pass
    if _DECIMAL_SHAPE.fullmatch(value) is None:
        return None
    return Decimal(value)


def _bool(value: str) -> str:
    return _BOOLEANS.get(value.lower(), value)


def _resolve_javascript(value: str, user_tz: ZoneInfo) -> str:
    """Evaluate a ``javascript:`` operand; only ``gs.dateGenerate`` is emulated."""
    if value[: len(_JAVASCRIPT)].lower() != _JAVASCRIPT:
        return value
    match = _DATE_GENERATE.fullmatch(value)
    if match is None:
        raise QueryError(
            f"unsupported javascript: operand {value!r} (the emulator only evaluates "
            "gs.dateGenerate('YYYY-MM-DD','HH:MM:SS'))"
        )
    day_text, time_text = match.group(2), match.group(4)
    time_text = {"start": "00:00:00", "end": "23:59:59"}.get(time_text, time_text)
    try:
        local = datetime.combine(
            date.fromisoformat(day_text), time.fromisoformat(time_text), tzinfo=user_tz
        )
    except ValueError as exc:
        raise QueryError(f"invalid date in {value!r}: {exc}") from exc
    u = local.astimezone(UTC)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d} {u.hour:02d}:{u.minute:02d}:{u.second:02d}"


def _operand_value(value: str, ftype: FieldType, user_tz: ZoneInfo) -> str:
    value = _resolve_javascript(value, user_tz)
    if ftype == "datetime" and _DATE_ONLY.fullmatch(value):
        return value + " 00:00:00"
    return value


def _split_list(text: str) -> list[str]:
    """Split an ``IN`` list on commas, except inside quotes or parentheses (dateGenerate args)."""
    if _JAVASCRIPT not in text.lower():
        return [item.strip(_ASCII_WS) for item in text.split(",")]
    items: list[str] = []
    current: list[str] = []
    depth = 0
    quote = ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            items.append("".join(current).strip(_ASCII_WS))
            current = []
            continue
        current.append(char)
    items.append("".join(current).strip(_ASCII_WS))
    return items


SortKey = Callable[[Row], Any]  # Any: a str, or a (rank, number, str) tuple for numbers


def _sort_key(name: str, ftype: str) -> SortKey:
    if ftype not in _NUMERIC_TYPES:
        # "" is the smallest string, so empty values come first without special-casing.
        return lambda row: row.get(name, "")

    def numeric_key(row: Row) -> tuple[int, Number, str]:
        value = row.get(name, "")
        if value == "":
            return (0, 0, "")
        number = _number(value)
        if number is None:
            return (2, 0, value)
        return (1, number, "")

    return numeric_key


def _combined_key(parts: list[SortKey]) -> SortKey:
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        first, second = parts
        return lambda row: (first(row), second(row))
    return lambda row: tuple(part(row) for part in parts)


# --- operators --------------------------------------------------------------------------------

_ALIASES = {"*": "LIKE", "!*": "NOT LIKE", "%": "ENDSWITH"}
_SYMBOL_OPERATORS = ("!=", "<=", ">=", "!*", "=", "<", ">", "*", "%")  # longest first
_SUPPORTED_KEYWORDS = (
    "IN", "NOT IN", "LIKE", "NOT LIKE", "STARTSWITH", "ENDSWITH", "ISEMPTY", "ISNOTEMPTY",
    "EMPTYSTRING", "ANYTHING", "BETWEEN", "SAMEAS", "NSAMEAS", "GT_FIELD", "LT_FIELD",
    "GT_OR_EQUALS_FIELD", "LT_OR_EQUALS_FIELD"
)  # fmt: skip
# Recognised so that e.g. ``sys_class_nameINSTANCEOFtask`` is refused instead of being misread
# as ``IN`` with the operand ``STANCEOFtask``.
_UNSUPPORTED_KEYWORDS = (
    "ON", "NOTON", "DATEPART", "RELATIVEGT", "RELATIVELT", "RELATIVEGE", "RELATIVELE",
    "RELATIVEEE", "MORETHAN", "LESSTHAN", "DYNAMIC", "INSTANCEOF", "IN_HIERARCHY", "VALCHANGES",
    "CHANGESFROM", "CHANGESTO"
)  # fmt: skip
# Longest first, so ISNOTEMPTY wins over ISEMPTY and IN_HIERARCHY over IN at one position.
_KEYWORDS = tuple(sorted((*_SUPPORTED_KEYWORDS, *_UNSUPPORTED_KEYWORDS), key=len, reverse=True))
_FIELD_PREFIX = re.compile(r"[A-Za-z0-9_.]*")
_FIELD_NAME = re.compile(r"[A-Za-z0-9_.]+")
_RESERVED_PREFIXES = (
    "RLQUERY", "ENDRLQUERY", "SUBQUERY", "ENDSUBQUERY", "123TEXTQUERY321", "IR_AND_OR_QUERY",
    "IR_OR_QUERY", "IR_AND_QUERY"
)  # fmt: skip
# Any: operator.lt & co. compare numbers with numbers and strings with strings.
_ORDERED: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "GT_FIELD": operator.gt,
    "LT_FIELD": operator.lt,
    "GT_OR_EQUALS_FIELD": operator.ge,
    "LT_OR_EQUALS_FIELD": operator.le,
}
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


def _ordered_test(name: str, ftype: FieldType, op: str, target_text: str) -> Predicate:
    """``<``, ``<=``, ``>`` or ``>=`` against a constant; empty/non-numeric values never match."""
    if ftype in _NUMERIC_TYPES:
        target = _number(target_text)
        if target is None:
            return _never
        compare = _ORDERED[op]

        def numeric(row: Row) -> bool:
            number = _number(row.get(name, ""))
            return number is not None and compare(number, target)

        return numeric
    # One closure per operator, without an operator.* call: this is the keyset cursor's hot path.
    if op == "<":
        return lambda row: (value := row.get(name, "")) != "" and value < target_text
    if op == "<=":
        return lambda row: (value := row.get(name, "")) != "" and value <= target_text
    if op == ">":
        return lambda row: (value := row.get(name, "")) != "" and value > target_text
    return lambda row: (value := row.get(name, "")) != "" and value >= target_text


def _equals_test(name: str, ftype: FieldType, target: str) -> Predicate:
    if ftype == "boolean":
        wanted = _bool(target)
        return lambda row: _bool(row.get(name, "")) == wanted
    if ftype in _NUMERIC_TYPES:
        number = _number(target)
        if number is not None:

            def numeric(row: Row) -> bool:
                value = row.get(name, "")
                if value == target:
                    return True
                parsed = _number(value)
                return parsed is not None and parsed == number

            return numeric
    return lambda row: row.get(name, "") == target


def _in_test(name: str, ftype: FieldType, items: list[str]) -> Predicate:
    if ftype == "boolean":
        wanted = frozenset(_bool(item) for item in items)
        return lambda row: _bool(row.get(name, "")) in wanted
    texts = frozenset(items)
    if ftype in _NUMERIC_TYPES:
        numbers = frozenset(n for n in map(_number, items) if n is not None)

        def numeric(row: Row) -> bool:
            value = row.get(name, "")
            return value in texts or _number(value) in numbers

        return numeric
    return lambda row: row.get(name, "") in texts


def _key(value: str, ftype: FieldType) -> Number | str | None:
    """Ordering key of a value, ``None`` when it takes part in no ordered comparison."""
    if ftype in _NUMERIC_TYPES:
        return _number(value)
    return value if value != "" else None


def _same(left: str, right: str, ftype: FieldType) -> bool:
    if ftype == "boolean":
        return _bool(left) == _bool(right)
    if left == right:
        return True
    if ftype in _NUMERIC_TYPES:
        number = _number(left)
        return number is not None and number == _number(right)
    return False


def _field_compare_test(name: str, op: str, other: str, ftype: FieldType) -> Predicate:
    if op in ("SAMEAS", "NSAMEAS"):
        negate = op == "NSAMEAS"
        return lambda row: _same(row.get(name, ""), row.get(other, ""), ftype) != negate
    compare = _ORDERED[op]

    def ordered(row: Row) -> bool:
        left = _key(row.get(name, ""), ftype)
        right = _key(row.get(other, ""), ftype)
        return left is not None and right is not None and bool(compare(left, right))

    return ordered


def _compile_condition(
    name: str, op: str, operand: str, ftype: FieldType, user_tz: ZoneInfo
) -> Predicate:
    if op in _UNSUPPORTED_KEYWORDS:
        raise QueryError(f"operator {op} is not supported by the emulator")
    if op in ("ISEMPTY", "EMPTYSTRING"):
        return lambda row: row.get(name, "") == ""
    if op == "ISNOTEMPTY":
        return lambda row: row.get(name, "") != ""
    if op == "ANYTHING":
        return _always
    if op == "=":
        return _equals_test(name, ftype, _operand_value(operand, ftype, user_tz))
    if op == "!=":
        target = _operand_value(operand, ftype, user_tz)
        if target == "":
            return lambda row: row.get(name, "") != ""
        equals = _equals_test(name, ftype, target)
        # ServiceNow documents that != also matches empty (NULL) values.
        return lambda row: row.get(name, "") == "" or not equals(row)
    if op in ("<", "<=", ">", ">="):
        target = _operand_value(operand, ftype, user_tz)
        return _ordered_test(name, ftype, op, target)
    if op in ("IN", "NOT IN"):
        items = [_operand_value(item, ftype, user_tz) for item in _split_list(operand)]
        member = _in_test(name, ftype, items)
        if op == "IN":
            return member
        return lambda row: row.get(name, "") == "" or not member(row)
    if op in ("LIKE", "NOT LIKE", "STARTSWITH", "ENDSWITH"):
        needle = _resolve_javascript(operand, user_tz)
        if op == "LIKE":
            return lambda row: needle in row.get(name, "")
        if op == "NOT LIKE":
            return lambda row: (value := row.get(name, "")) == "" or needle not in value
        if op == "STARTSWITH":
            return lambda row: row.get(name, "").startswith(needle)
        return lambda row: row.get(name, "").endswith(needle)
    if op == "BETWEEN":
        bounds = operand.split("@")
        if len(bounds) != 2:
            raise QueryError(f"BETWEEN needs 'low@high', got {operand!r}")
        low = _ordered_test(name, ftype, ">=", _operand_value(bounds[0], ftype, user_tz))
        high = _ordered_test(name, ftype, "<=", _operand_value(bounds[1], ftype, user_tz))
        return lambda row: low(row) and high(row)
    raise QueryError(f"operator {op} is not supported by the emulator")  # pragma: no cover


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
    # Per group: the OR-chains, and whether any condition was written in it at all (a group
    # holding only ORDERBY/EQ tokens is no group, not "match everything").
    groups: list[list[list[Condition]]] = [[]]
    written: list[bool] = [False]
    order_by: list[OrderKey] = []
    order_types: list[FieldType] = []
    ignored_order_by: list[str] = []
    dropped: list[str] = []

    for raw in query.split("^"):
        term = raw.strip(_ASCII_WS)
        if term.startswith("NQ"):
            groups.append([])
            written.append(False)
            term = term[2:].strip(_ASCII_WS)
        if not term or term == "EQ":
            continue
        if term.startswith(_RESERVED_PREFIXES):
            raise QueryError(f"unsupported query construct {term!r} in the emulator")
        if term.startswith("ORDERBY"):
            descending = term.startswith("ORDERBYDESC")
            name = term[len("ORDERBYDESC") if descending else len("ORDERBY") :].strip(_ASCII_WS)
            ftype = field_type(name) if _FIELD_NAME.fullmatch(name) else None
            if ftype is None:
                ignored_order_by.append(term)
            else:
                order_by.append(OrderKey(name, descending))
                order_types.append(ftype)
            continue
        dependent = term.startswith("OR")
        if dependent:
            term = term[2:].strip(_ASCII_WS)
            if not term:
                continue
        written[-1] = True
        chains = groups[-1]
        if not (dependent and chains):
            chains.append([])
        condition = _parse_condition(term, field_type, user_tz)
        if condition is None:
            dropped.append(term)
        else:
            chains[-1].append(condition)

    parsed_groups = tuple(
        tuple(tuple(chain) for chain in chains if chain)
        for chains, has_conditions in zip(groups, written, strict=True)
        if has_conditions
    )
    return ParsedQuery(
        groups=parsed_groups,
        order_by=tuple(order_by),
        dropped=tuple(dropped),
        matches_nothing=invalid_query_returns_no_rows and bool(dropped),
        order_types=tuple(order_types),
        ignored_order_by=tuple(ignored_order_by),
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
        other = operand.strip(_ASCII_WS)
        if not _FIELD_NAME.fullmatch(other) or field_type(other) is None:
            return None
        test = _field_compare_test(name, op, other, ftype)
    else:
        test = _compile_condition(name, op, operand, ftype, user_tz)
    return Condition(text=text, field=name, operator=op, operand=operand, test=test)
