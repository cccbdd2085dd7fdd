"""Evaluation half of the emulator's encoded-query support: value rules and compiled tests.

Pure code, no I/O. :mod:`snowsource.emulator.encoded_query` splits a ``sysparm_query`` into
conditions; this module turns one ``<field><operator><operand>`` into a closure over a row, and
one ``ORDERBY`` key into a sort key. The comparison rules (numeric types, empty-as-NULL,
``gs.dateGenerate`` operands) are described in the ``encoded_query`` module docstring.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, Literal
from zoneinfo import ZoneInfo

FieldType = Literal[
    "string", "integer", "decimal", "boolean", "datetime", "reference", "choice", "sys_id"
]
Row = Mapping[str, str]
Predicate = Callable[[Row], bool]


class QueryError(ValueError):
    """The encoded query cannot be parsed or uses something the emulator does not support."""


def always(_row: Row) -> bool:
    return True


def never(_row: Row) -> bool:
    return False


# --- values -----------------------------------------------------------------------------------

_NUMERIC_TYPES = frozenset({"integer", "decimal"})
_DECIMAL_SHAPE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
DATE_ONLY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_BOOLEANS = {"true": "true", "1": "true", "false": "false", "0": "false"}
JAVASCRIPT = "javascript:"
_DATE_GENERATE = re.compile(
    r"""javascript:\s*gs\.dateGenerate\(\s*(['"])([0-9]{4}-[0-9]{2}-[0-9]{2})\1\s*,"""
    r"""\s*(['"])([0-9]{2}:[0-9]{2}:[0-9]{2}|start|end)\3\s*\)\s*;?\s*"""
)
ASCII_WS = " \t\n\v\f\r"

Number = int | Decimal


def _number(value: str) -> Number | None:
    """Parse a stored numeric value; ``None`` when it is not a plain number."""
    # int() alone would accept "1_000", surrounding spaces and non-ASCII digits.
    if (
        not value
        or not value.isascii()
        or "_" in value
        or value[0] in ASCII_WS
        or value[-1] in ASCII_WS
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
    if value[: len(JAVASCRIPT)].lower() != JAVASCRIPT:
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
    if ftype == "datetime" and DATE_ONLY.fullmatch(value):
        return value + " 00:00:00"
    return value


def _split_list(text: str) -> list[str]:
    """Split an ``IN`` list on commas, except inside quotes or parentheses (dateGenerate args)."""
    if JAVASCRIPT not in text.lower():
        return [item.strip(ASCII_WS) for item in text.split(",")]
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
            items.append("".join(current).strip(ASCII_WS))
            current = []
            continue
        current.append(char)
    items.append("".join(current).strip(ASCII_WS))
    return items


SortKey = Callable[[Row], Any]  # Any: a str, or a (rank, number, str) tuple for numbers


def sort_key(name: str, ftype: str) -> SortKey:
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


def combined_key(parts: list[SortKey]) -> SortKey:
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        first, second = parts
        return lambda row: (first(row), second(row))
    return lambda row: tuple(part(row) for part in parts)


# --- operators --------------------------------------------------------------------------------

# Recognised so that e.g. ``sys_class_nameINSTANCEOFtask`` is refused instead of being misread
# as ``IN`` with the operand ``STANCEOFtask``.
UNSUPPORTED_KEYWORDS = (
    "ON", "NOTON", "DATEPART", "RELATIVEGT", "RELATIVELT", "RELATIVEGE", "RELATIVELE",
    "RELATIVEEE", "MORETHAN", "LESSTHAN", "DYNAMIC", "INSTANCEOF", "IN_HIERARCHY", "VALCHANGES",
    "CHANGESFROM", "CHANGESTO"
)  # fmt: skip
# Longest first, so ISNOTEMPTY wins over ISEMPTY and IN_HIERARCHY over IN at one position.
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


def _ordered_test(name: str, ftype: FieldType, op: str, target_text: str) -> Predicate:
    """``<``, ``<=``, ``>`` or ``>=`` against a constant; empty/non-numeric values never match."""
    if ftype in _NUMERIC_TYPES:
        target = _number(target_text)
        if target is None:
            return never
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


def field_compare_test(name: str, op: str, other: str, ftype: FieldType) -> Predicate:
    if op in ("SAMEAS", "NSAMEAS"):
        negate = op == "NSAMEAS"
        return lambda row: _same(row.get(name, ""), row.get(other, ""), ftype) != negate
    compare = _ORDERED[op]

    def ordered(row: Row) -> bool:
        left = _key(row.get(name, ""), ftype)
        right = _key(row.get(other, ""), ftype)
        return left is not None and right is not None and bool(compare(left, right))

    return ordered


def compile_condition(
    name: str, op: str, operand: str, ftype: FieldType, user_tz: ZoneInfo
) -> Predicate:
    if op in UNSUPPORTED_KEYWORDS:
        raise QueryError(f"operator {op} is not supported by the emulator")
    if op in ("ISEMPTY", "EMPTYSTRING", "ISNOTEMPTY", "ANYTHING"):
        return _presence_test(name, op)
    if op in ("=", "!="):
        return _equality_test(name, op, _operand_value(operand, ftype, user_tz), ftype)
    if op in ("<", "<=", ">", ">="):
        return _ordered_test(name, ftype, op, _operand_value(operand, ftype, user_tz))
    if op == "BETWEEN":
        return _between_test(name, operand, ftype, user_tz)
    if op in ("IN", "NOT IN"):
        items = [_operand_value(item, ftype, user_tz) for item in _split_list(operand)]
        member = _in_test(name, ftype, items)
        if op == "IN":
            return member
        return lambda row: row.get(name, "") == "" or not member(row)
    if op in ("LIKE", "NOT LIKE", "STARTSWITH", "ENDSWITH"):
        return _text_test(name, op, _resolve_javascript(operand, user_tz))
    raise QueryError(f"operator {op} is not supported by the emulator")  # pragma: no cover


def _presence_test(name: str, op: str) -> Predicate:
    """``ISEMPTY``/``EMPTYSTRING``, ``ISNOTEMPTY`` and ``ANYTHING``."""
    if op == "ANYTHING":
        return always
    if op == "ISNOTEMPTY":
        return lambda row: row.get(name, "") != ""
    return lambda row: row.get(name, "") == ""


def _equality_test(name: str, op: str, target: str, ftype: FieldType) -> Predicate:
    """``=`` and ``!=`` against an operand already in stored form."""
    if op == "=":
        return _equals_test(name, ftype, target)
    if target == "":
        return lambda row: row.get(name, "") != ""
    equals = _equals_test(name, ftype, target)
    # ServiceNow documents that != also matches empty (NULL) values.
    return lambda row: row.get(name, "") == "" or not equals(row)


def _between_test(name: str, operand: str, ftype: FieldType, user_tz: ZoneInfo) -> Predicate:
    """``BETWEENlow@high``, both bounds included."""
    bounds = operand.split("@")
    if len(bounds) != 2:
        raise QueryError(f"BETWEEN needs 'low@high', got {operand!r}")
    low = _ordered_test(name, ftype, ">=", _operand_value(bounds[0], ftype, user_tz))
    high = _ordered_test(name, ftype, "<=", _operand_value(bounds[1], ftype, user_tz))
    return lambda row: low(row) and high(row)


def _text_test(name: str, op: str, needle: str) -> Predicate:
    """``LIKE``, ``NOT LIKE`` (which also matches empty values), ``STARTSWITH``, ``ENDSWITH``."""
    if op == "LIKE":
        return lambda row: needle in row.get(name, "")
    if op == "NOT LIKE":
        return lambda row: (value := row.get(name, "")) == "" or needle not in value
    if op == "STARTSWITH":
        return lambda row: row.get(name, "").startswith(needle)
    return lambda row: row.get(name, "").endswith(needle)
