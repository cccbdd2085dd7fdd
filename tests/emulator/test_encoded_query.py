"""Tests for the emulator's encoded-query parser and evaluator."""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snowsource.emulator.encoded_query import (
    FieldType,
    OrderKey,
    ParsedQuery,
    QueryError,
    match_group,
    parse_encoded_query,
)

UTC_TZ = ZoneInfo("UTC")
LA = ZoneInfo("America/Los_Angeles")

FIELDS: dict[str, FieldType] = {
    "active": "boolean",
    "priority": "integer",
    "impact": "integer",
    "state": "integer",
    "cost": "decimal",
    "budget": "decimal",
    "number": "string",
    "short_description": "string",
    "description": "string",
    "category": "choice",
    "caller_id": "reference",
    "opened_by": "reference",
    "caller_id.name": "string",
    "sys_id": "sys_id",
    "sys_updated_on": "datetime",
    "sys_created_on": "datetime",
    "u_INdex": "integer",  # upper case inside a field name, to exercise the operator split
    "u_fooONE": "string",
}


def field_type(name: str) -> FieldType | None:
    return FIELDS.get(name)


def parse(query: str, *, tz: ZoneInfo = UTC_TZ, no_rows: bool = False) -> ParsedQuery:
    return parse_encoded_query(
        query, field_type=field_type, user_tz=tz, invalid_query_returns_no_rows=no_rows
    )


def matches(query: str, row: Mapping[str, str], *, tz: ZoneInfo = UTC_TZ) -> bool:
    return parse(query, tz=tz).matches(row)


# --- splitting a condition into field / operator / operand -----------------------------------


@pytest.mark.parametrize(
    ("text", "field", "op", "operand"),
    [
        ("priorityIN1,2", "priority", "IN", "1,2"),
        ("short_descriptionLIKEdisk", "short_description", "LIKE", "disk"),
        ("activeISEMPTY", "active", "ISEMPTY", ""),
        ("activeISNOTEMPTY", "active", "ISNOTEMPTY", ""),
        ("stateNOT IN6,7", "state", "NOT IN", "6,7"),
        ("short_descriptionNOT LIKEdisk", "short_description", "NOT LIKE", "disk"),
        ("numberSTARTSWITHINC", "number", "STARTSWITH", "INC"),
        ("numberENDSWITH01", "number", "ENDSWITH", "01"),
        ("priority>=2", "priority", ">=", "2"),
        ("priority<=2", "priority", "<=", "2"),
        ("priority!=2", "priority", "!=", "2"),
        ("priority=2=3", "priority", "=", "2=3"),
        ("short_description*disk", "short_description", "LIKE", "disk"),
        ("short_description!*disk", "short_description", "NOT LIKE", "disk"),
        ("number%01", "number", "ENDSWITH", "01"),
        ("impactBETWEEN1@2", "impact", "BETWEEN", "1@2"),
        ("priorityNSAMEASimpact", "priority", "NSAMEAS", "impact"),
        ("prioritySAMEASimpact", "priority", "SAMEAS", "impact"),
        ("priorityGT_OR_EQUALS_FIELDimpact", "priority", "GT_OR_EQUALS_FIELD", "impact"),
        ("categoryEMPTYSTRING", "category", "EMPTYSTRING", ""),
        ("categoryANYTHING", "category", "ANYTHING", ""),
        ("caller_id.name=Fred", "caller_id.name", "=", "Fred"),
        ("u_INdex=5", "u_INdex", "=", "5"),
        ("u_fooONE=1", "u_fooONE", "=", "1"),
        ("short_descriptionLIKEONE", "short_description", "LIKE", "ONE"),
    ],
)
def test_condition_split(text: str, field: str, op: str, operand: str) -> None:
    (((condition,),),) = parse(text).groups
    assert (condition.field, condition.operator, condition.operand) == (field, op, operand)
    assert condition.text == text


@pytest.mark.parametrize(
    "query",
    [
        "sys_updated_onONToday@javascript:gs.daysAgoStart(0)@javascript:gs.daysAgoEnd(0)",
        "sys_updated_onRELATIVEGT@hour@ago@3",
        "sys_updated_onDATEPARTMonday@javascript:gs.datePart('dayofweek','monday','EE')",
        "caller_idDYNAMIC90d1921e5f510100a9ad2572f2b477fe",
        "categoryINSTANCEOFtask",
        "categoryIN_HIERARCHYabc",
        "stateVALCHANGES",
        "active",  # no operator at all
        "=5",  # no field
        "priority>=2^garbage",
        "impactBETWEEN1",  # BETWEEN without '@'
        "impactBETWEEN1@2@3",
        "RLQUERYtask_sla.task,>=1^active=true^ENDRLQUERY",
        "active=true^RLQUERYtask_sla.task,>=1^ENDRLQUERY",
        "123TEXTQUERY321=disk",
        "active=true^123TEXTQUERY321=disk",
        "IR_AND_OR_QUERY=disk",
    ],
)
def test_unsupported_or_unparseable_raises(query: str) -> None:
    with pytest.raises(QueryError):
        parse(query)


def test_query_error_is_a_value_error() -> None:
    assert issubclass(QueryError, ValueError)


def test_unsupported_operator_on_unknown_field_is_dropped_not_refused() -> None:
    # The field is checked first, as for any other condition on an unknown field.
    parsed = parse("bogusONToday^active=true")
    assert parsed.dropped == ("bogusONToday",)
    assert parsed.matches({"active": "true"})
    assert not parsed.matches({"active": "false"})


# --- operators ---------------------------------------------------------------------------------

OPERATOR_CASES: list[tuple[str, dict[str, str], bool]] = [
    # = : strings exact and case-sensitive, numbers numerically, booleans leniently
    ("number=INC001", {"number": "INC001"}, True),
    ("number=INC001", {"number": "inc001"}, False),
    ("number=INC001", {"number": "INC0011"}, False),
    ("number=", {"number": ""}, True),
    ("number=", {}, True),
    ("number=", {"number": "x"}, False),
    ("priority=1", {"priority": "1"}, True),
    ("priority=1", {"priority": "01"}, True),
    ("priority=1", {"priority": "1.0"}, True),
    ("priority=1", {"priority": "2"}, False),
    ("priority=1", {"priority": ""}, False),
    ("priority=x", {"priority": "x"}, True),
    ("cost=1.50", {"cost": "1.5"}, True),
    ("active=true", {"active": "true"}, True),
    ("active=true", {"active": "TRUE"}, True),
    ("active=true", {"active": "1"}, True),
    ("active=true", {"active": "false"}, False),
    ("active=true", {"active": ""}, False),
    ("active=false", {"active": "0"}, True),
    # != : also matches empty / missing values
    ("number!=INC001", {"number": "INC002"}, True),
    ("number!=INC001", {"number": "INC001"}, False),
    ("number!=INC001", {"number": ""}, True),
    ("number!=INC001", {}, True),
    ("active!=true", {"active": "false"}, True),
    ("active!=true", {"active": ""}, True),
    ("active!=true", {"active": "true"}, False),
    ("priority!=1", {"priority": "01"}, False),
    ("priority!=1", {"priority": "2"}, True),
    ("number!=", {"number": "x"}, True),
    ("number!=", {"number": ""}, False),
    # ordered comparisons: integers numerically
    ("priority<2", {"priority": "1"}, True),
    ("priority<2", {"priority": "2"}, False),
    ("priority<=2", {"priority": "2"}, True),
    ("priority<=2", {"priority": "3"}, False),
    ("priority>9", {"priority": "10"}, True),  # lexically "10" < "9"
    ("priority>=10", {"priority": "9"}, False),
    ("priority>=10", {"priority": "10"}, True),
    ("priority>-1", {"priority": "0"}, True),
    ("priority<5", {"priority": ""}, False),  # empty never matches an ordered comparison
    ("priority<5", {}, False),
    ("priority<5", {"priority": "abc"}, False),  # non-numeric never matches
    ("priority>5", {"priority": "abc"}, False),
    ("priority<5", {"priority": "1_0"}, False),
    ("priority<5", {"priority": " 1"}, False),
    ("priority<5", {"priority": "1 "}, False),
    ("priority<5", {"priority": "\u0661"}, False),  # non-ASCII digit
    ("priority<abc", {"priority": "1"}, False),  # non-numeric operand matches nothing
    ("cost>1.5", {"cost": "1.25"}, False),
    ("cost>1.5", {"cost": "10"}, True),
    ("cost>=1.5", {"cost": "1.50"}, True),
    ("cost<1e3", {"cost": "999.9"}, True),
    ("cost<1", {"cost": "nan"}, False),
    ("cost>1", {"cost": "inf"}, False),
    # strings, choices, references, sys_ids lexically (Python order, case-sensitive)
    ("number<b", {"number": "a"}, True),
    ("number<b", {"number": "B"}, True),  # "B" < "b" in code-point order
    ("number>b", {"number": "a"}, False),
    ("category>=10", {"category": "9"}, True),  # choice: lexical
    ("sys_id>abc", {"sys_id": "abd0"}, True),
    ("sys_id>abc", {"sys_id": "abc"}, False),
    ("sys_id>abc", {"sys_id": "abc0"}, True),
    ("sys_id>abc", {"sys_id": "ab"}, False),
    ("sys_id>=abc", {"sys_id": "abc"}, True),
    ("number<b", {"number": ""}, False),
    ("caller_id>5", {"caller_id": "6"}, True),
    # datetimes as UTC strings
    ("sys_updated_on>2026-01-01 00:00:00", {"sys_updated_on": "2026-01-01 00:00:01"}, True),
    ("sys_updated_on>2026-01-01 00:00:00", {"sys_updated_on": "2026-01-01 00:00:00"}, False),
    ("sys_updated_on>=2026-01-01 00:00:00", {"sys_updated_on": "2026-01-01 00:00:00"}, True),
    ("sys_updated_on<2026-01-01 00:00:00", {"sys_updated_on": "2025-12-31 23:59:59"}, True),
    ("sys_updated_on<2026-01-01 00:00:00", {"sys_updated_on": ""}, False),
    ("sys_updated_on=2026-01-01 00:00:00", {"sys_updated_on": "2026-01-01 00:00:00"}, True),
    ("sys_updated_on=2026-01-01 00:00:00", {"sys_updated_on": "2026-01-01 00:00:01"}, False),
    ("sys_updated_on>2026-01-01", {"sys_updated_on": "2026-01-01 00:00:00"}, False),  # midnight
    ("sys_updated_on>2026-01-01", {"sys_updated_on": "2026-01-01 00:00:01"}, True),
    ("sys_updated_on=2026-01-01", {"sys_updated_on": "2026-01-01 00:00:00"}, True),
    # IN / NOT IN
    ("priorityIN1,2", {"priority": "1"}, True),
    ("priorityIN1,2", {"priority": "2"}, True),
    ("priorityIN1,2", {"priority": "3"}, False),
    ("priorityIN1,2", {"priority": "12"}, False),
    ("priorityIN1,2", {"priority": "02"}, True),
    ("priorityIN1,2", {"priority": ""}, False),
    ("priorityIN1, 2", {"priority": "2"}, True),
    ("categoryINa,b c", {"category": "b c"}, True),
    ("categoryINa,b", {"category": "ab"}, False),
    ("activeINtrue", {"active": "1"}, True),
    ("stateNOT IN6,7", {"state": "6"}, False),
    ("stateNOT IN6,7", {"state": "7"}, False),
    ("stateNOT IN6,7", {"state": "1"}, True),
    ("stateNOT IN6,7", {"state": ""}, True),
    ("stateNOT IN6,7", {}, True),
    ("categoryNOT INa,b", {"category": "c"}, True),
    ("categoryNOT INa,b", {"category": "a"}, False),
    # LIKE / NOT LIKE (contains, case-sensitive) and aliases
    ("short_descriptionLIKEdisk", {"short_description": "the disk is full"}, True),
    ("short_descriptionLIKEdisk", {"short_description": "Disk full"}, False),
    ("short_descriptionLIKEdisk", {"short_description": ""}, False),
    ("short_description*disk", {"short_description": "xdiskx"}, True),
    ("short_descriptionNOT LIKEdisk", {"short_description": "the disk"}, False),
    ("short_descriptionNOT LIKEdisk", {"short_description": "the network"}, True),
    ("short_descriptionNOT LIKEdisk", {"short_description": ""}, True),
    ("short_description!*disk", {"short_description": "disk"}, False),
    ("short_description!*disk", {"short_description": "dis"}, True),
    ("short_descriptionLIKE100%", {"short_description": "at 100% now"}, True),  # no wildcards
    ("short_descriptionLIKE100%", {"short_description": "at 1000 now"}, False),
    # STARTSWITH / ENDSWITH
    ("numberSTARTSWITHINC", {"number": "INC0001"}, True),
    ("numberSTARTSWITHINC", {"number": "CHG0001"}, False),
    ("numberSTARTSWITHINC", {"number": "inc0001"}, False),
    ("numberSTARTSWITHINC", {}, False),
    ("numberENDSWITH01", {"number": "INC0001"}, True),
    ("numberENDSWITH01", {"number": "INC0010"}, False),
    ("number%01", {"number": "INC0001"}, True),
    # ISEMPTY / ISNOTEMPTY / EMPTYSTRING / ANYTHING
    ("categoryISEMPTY", {"category": ""}, True),
    ("categoryISEMPTY", {}, True),
    ("categoryISEMPTY", {"category": "x"}, False),
    ("categoryISNOTEMPTY", {"category": "x"}, True),
    ("categoryISNOTEMPTY", {"category": ""}, False),
    ("categoryISNOTEMPTY", {}, False),
    ("categoryEMPTYSTRING", {"category": ""}, True),
    ("categoryEMPTYSTRING", {"category": " "}, False),
    ("categoryANYTHING", {"category": "x"}, True),
    ("categoryANYTHING", {}, True),
    # BETWEEN, inclusive
    ("impactBETWEEN1@2", {"impact": "1"}, True),
    ("impactBETWEEN1@2", {"impact": "2"}, True),
    ("impactBETWEEN1@2", {"impact": "0"}, False),
    ("impactBETWEEN1@2", {"impact": "3"}, False),
    ("impactBETWEEN2@10", {"impact": "9"}, True),  # numerically, not lexically
    ("impactBETWEEN1@2", {"impact": ""}, False),
    ("impactBETWEEN2@1", {"impact": "1"}, False),
    ("numberBETWEENa@c", {"number": "b"}, True),
    ("numberBETWEENa@c", {"number": "c"}, True),
    ("numberBETWEENa@c", {"number": "ca"}, False),
    (
        "sys_updated_onBETWEEN2026-01-01 00:00:00@2026-01-01 23:59:59",
        {"sys_updated_on": "2026-01-01 23:59:59"},
        True,
    ),
    (
        "sys_updated_onBETWEEN2026-01-01 00:00:00@2026-01-01 23:59:59",
        {"sys_updated_on": "2026-01-02 00:00:00"},
        False,
    ),
    # SAMEAS / NSAMEAS and field-to-field ordering
    ("prioritySAMEASimpact", {"priority": "2", "impact": "2"}, True),
    ("prioritySAMEASimpact", {"priority": "2", "impact": "02"}, True),
    ("prioritySAMEASimpact", {"priority": "2", "impact": "3"}, False),
    ("prioritySAMEASimpact", {}, True),
    ("priorityNSAMEASimpact", {"priority": "2", "impact": "3"}, True),
    ("priorityNSAMEASimpact", {"priority": "2", "impact": "2"}, False),
    ("caller_idSAMEASopened_by", {"caller_id": "a", "opened_by": "a"}, True),
    ("caller_idSAMEASopened_by", {"caller_id": "a", "opened_by": "A"}, False),
    ("priorityGT_FIELDimpact", {"priority": "10", "impact": "9"}, True),
    ("priorityGT_FIELDimpact", {"priority": "9", "impact": "9"}, False),
    ("priorityGT_OR_EQUALS_FIELDimpact", {"priority": "9", "impact": "9"}, True),
    ("priorityLT_FIELDimpact", {"priority": "2", "impact": "10"}, True),
    ("priorityLT_OR_EQUALS_FIELDimpact", {"priority": "", "impact": "10"}, False),
    ("sys_updated_onGT_FIELDsys_created_on", {"sys_updated_on": "b", "sys_created_on": "a"}, True),
]


@pytest.mark.parametrize(("query", "row", "expected"), OPERATOR_CASES)
def test_operator(query: str, row: dict[str, str], expected: bool) -> None:
    assert matches(query, row) is expected


def test_sameas_with_unknown_other_field_is_dropped() -> None:
    parsed = parse("prioritySAMEASbogus^active=true")
    assert parsed.dropped == ("prioritySAMEASbogus",)
    assert parsed.matches({"active": "true", "priority": "1"})


# --- structure and precedence ------------------------------------------------------------------

A, B, C, D = "priority=1", "impact=1", "state=1", "category=1"
BOOLS = [False, True]


def _row(a: bool, b: bool, c: bool, d: bool = False) -> dict[str, str]:
    return {
        "priority": "1" if a else "0",
        "impact": "1" if b else "0",
        "state": "1" if c else "0",
        "category": "1" if d else "0",
    }


@pytest.mark.parametrize("a", BOOLS)
@pytest.mark.parametrize("b", BOOLS)
@pytest.mark.parametrize("c", BOOLS)
def test_dependent_or_binds_to_previous_condition(a: bool, b: bool, c: bool) -> None:
    assert matches(f"{A}^{B}^OR{C}", _row(a, b, c)) is (a and (b or c))
    assert matches(f"{A}^OR{B}^{C}", _row(a, b, c)) is ((a or b) and c)
    assert matches(f"{A}^OR{B}^OR{C}", _row(a, b, c)) is (a or b or c)


def test_dependent_or_named_cases() -> None:
    query = f"{A}^{B}^OR{C}"
    assert not matches(query, _row(a=False, b=False, c=True))  # A false, C true
    assert matches(query, _row(a=True, b=False, c=True))  # A true, C true
    (group,) = parse(query).groups
    assert [[c.text for c in chain] for chain in group] == [[A], [B, C]]


@pytest.mark.parametrize("a", BOOLS)
@pytest.mark.parametrize("b", BOOLS)
@pytest.mark.parametrize("c", BOOLS)
@pytest.mark.parametrize("d", BOOLS)
def test_nq_is_or_of_and_groups(a: bool, b: bool, c: bool, d: bool) -> None:
    row = _row(a, b, c, d)
    assert matches(f"{A}^{B}^NQ{C}^{D}", row) is ((a and b) or (c and d))
    assert matches(f"{A}^NQ{B}^OR{C}^{D}", row) is (a or ((b or c) and d))
    assert matches(f"{A}^NQ{B}^NQ{C}", row) is (a or b or c)


def test_base_filter_must_be_repeated_in_every_nq_group() -> None:
    inactive_late = {"active": "false", "sys_updated_on": "2026-01-01 00:00:00", "sys_id": "b"}
    leaky = "active=true^sys_updated_on>2026-01-01 00:00:00^NQsys_updated_on=2026-01-01 00:00:00"
    repeated = (
        "active=true^sys_updated_on>2026-01-01 00:00:00"
        "^NQactive=true^sys_updated_on=2026-01-01 00:00:00"
    )
    assert matches(leaky, inactive_late)  # the base filter binds only to the first group
    assert not matches(repeated, inactive_late)
    assert matches(repeated, {**inactive_late, "active": "true"})


def test_wrong_or_cursor_form_drops_later_rows() -> None:
    # u>T^ORu=T^id>S is (u>T or u=T) and id>S: a later row with a small id is lost.
    later_small_id = {"sys_updated_on": "2026-01-01 00:00:05", "sys_id": "000"}
    wrong = "sys_updated_on>2026-01-01 00:00:00^ORsys_updated_on=2026-01-01 00:00:00^sys_id>abc"
    right = "sys_updated_on>=2026-01-01 00:00:00^sys_updated_on>2026-01-01 00:00:00^ORsys_id>abc"
    assert not matches(wrong, later_small_id)
    assert matches(right, later_small_id)


def test_empty_query_matches_everything() -> None:
    for query in ("", "^", "^^", "EQ", "^EQ", " ", "ORDERBYnumber"):
        parsed = parse(query)
        assert parsed.groups == ()
        assert parsed.matches({})
        assert parsed.matches({"active": "false"})


def test_trailing_eq_is_a_no_op() -> None:
    with_eq = parse("active=true^priority<3^EQ")
    without = parse("active=true^priority<3")
    assert with_eq == without
    assert with_eq.matches({"active": "true", "priority": "2"})
    assert not with_eq.matches({"active": "true", "priority": "3"})
    assert parse("active=true^ORDERBYnumber^EQ").order_by == (OrderKey("number", False),)


def test_empty_tokens_and_whitespace_are_ignored() -> None:
    parsed = parse("^active=true^^ priority<3 ^ ")
    assert [c.text for chain in parsed.groups[0] for c in chain] == [
        "active=true",
        "priority<3",
    ]
    assert parsed.matches({"active": "true", "priority": "2"})


def test_group_with_only_orderby_is_not_a_match_all_group() -> None:
    parsed = parse("active=true^NQORDERBYnumber")
    assert len(parsed.groups) == 1
    assert not parsed.matches({"active": "false"})
    assert parsed.order_by == (OrderKey("number", False),)


def test_leading_dependent_or_starts_a_chain() -> None:
    parsed = parse("ORactive=true^priority=1")
    assert parsed.matches({"active": "true", "priority": "1"})
    assert not parsed.matches({"active": "false", "priority": "1"})


# --- unknown fields ----------------------------------------------------------------------------


def test_unknown_field_condition_is_dropped_rest_applies() -> None:
    parsed = parse("active=true^bogus=1^priority<3")
    assert parsed.dropped == ("bogus=1",)
    assert not parsed.matches_nothing
    assert parsed.matches({"active": "true", "priority": "1", "bogus": "2"})
    assert not parsed.matches({"active": "false", "priority": "1"})


def test_unknown_field_with_no_rows_switch_matches_nothing() -> None:
    parsed = parse("active=true^bogus=1", no_rows=True)
    assert parsed.dropped == ("bogus=1",)
    assert parsed.matches_nothing
    assert not parsed.matches({"active": "true", "bogus": "1"})
    assert parsed.filter([{"active": "true"}, {}]) == []
    # the switch changes nothing when every field is known
    assert parse("active=true", no_rows=True).matches({"active": "true"})


def test_dropped_condition_inside_or_chain() -> None:
    parsed = parse("priority=1^ORbogus=1^impact=2")
    assert parsed.dropped == ("bogus=1",)
    assert parsed.matches({"priority": "1", "impact": "2"})
    assert not parsed.matches({"priority": "2", "impact": "2", "bogus": "1"})
    first_dropped = parse("bogus=1^ORpriority=1")
    assert first_dropped.matches({"priority": "1"})
    assert not first_dropped.matches({"priority": "2"})


def test_group_whose_conditions_were_all_dropped_matches_everything() -> None:
    parsed = parse("active=true^NQbogus=1")
    assert parsed.matches({"active": "false"})
    assert parse("active=true^NQbogus=1", no_rows=True).filter([{"active": "true"}]) == []


def test_orderby_unknown_field_is_ignored() -> None:
    parsed = parse("active=true^ORDERBYbogus^ORDERBYDESCnumber", no_rows=True)
    assert parsed.order_by == (OrderKey("number", True),)
    assert parsed.ignored_order_by == ("ORDERBYbogus",)
    assert parsed.dropped == ()
    assert not parsed.matches_nothing


# --- javascript operands -----------------------------------------------------------------------


def test_date_generate_is_converted_from_user_tz_to_utc() -> None:
    winter = "sys_updated_on>=javascript:gs.dateGenerate('2026-01-01','10:00:00')"
    # Los Angeles is UTC-8 in January: 10:00 local is 18:00 UTC.
    assert matches(winter, {"sys_updated_on": "2026-01-01 18:00:00"}, tz=LA)
    assert not matches(winter, {"sys_updated_on": "2026-01-01 17:59:59"}, tz=LA)
    # The same literal in a UTC session means 10:00 UTC: the cursor moves with the preference.
    assert matches(winter, {"sys_updated_on": "2026-01-01 10:00:00"}, tz=UTC_TZ)
    summer = "sys_updated_on=javascript:gs.dateGenerate('2026-07-01','10:00:00')"
    assert matches(summer, {"sys_updated_on": "2026-07-01 17:00:00"}, tz=LA)  # UTC-7 (PDT)
    crosses_midnight = "sys_updated_on=javascript:gs.dateGenerate('2026-01-01','20:30:00')"
    assert matches(crosses_midnight, {"sys_updated_on": "2026-01-02 04:30:00"}, tz=LA)


def test_date_generate_start_end_quotes_and_lists() -> None:
    start = 'sys_updated_on=javascript:gs.dateGenerate("2026-01-01","start")'
    assert matches(start, {"sys_updated_on": "2026-01-01 08:00:00"}, tz=LA)
    end = "sys_updated_on=javascript:gs.dateGenerate('2026-01-01','end')"
    assert matches(end, {"sys_updated_on": "2026-01-02 07:59:59"}, tz=LA)
    listed = (
        "sys_updated_onINjavascript:gs.dateGenerate('2026-01-01','00:00:00'),"
        "javascript:gs.dateGenerate('2026-01-02','00:00:00')"
    )
    assert matches(listed, {"sys_updated_on": "2026-01-02 08:00:00"}, tz=LA)
    assert not matches(listed, {"sys_updated_on": "2026-01-02 00:00:00"}, tz=LA)
    between = (
        "sys_updated_onBETWEENjavascript:gs.dateGenerate('2026-01-01','00:00:00')"
        "@javascript:gs.dateGenerate('2026-01-01','23:59:59')"
    )
    assert matches(between, {"sys_updated_on": "2026-01-02 07:59:59"}, tz=LA)
    assert not matches(between, {"sys_updated_on": "2026-01-01 07:59:59"}, tz=LA)


@pytest.mark.parametrize(
    "query",
    [
        "sys_updated_on>javascript:gs.daysAgoStart(0)",
        "sys_updated_on>javascript:gs.beginningOfToday()",
        "caller_id=javascript:gs.getUserID()",
        "sys_updated_on>JavaScript:gs.hoursAgo(1)",
        "sys_updated_on>javascript:gs.dateGenerate('2026-01-01','10:00')",
        "sys_updated_on>javascript:gs.dateGenerate('2026-02-30','10:00:00')",
        "sys_updated_onINa,javascript:gs.getUserID()",
        "short_descriptionLIKEjavascript:alert(1)",
    ],
)
def test_other_javascript_raises(query: str) -> None:
    with pytest.raises(QueryError):
        parse(query, tz=LA)


# --- ORDERBY and sort --------------------------------------------------------------------------


def test_orderby_collected_globally_in_written_order() -> None:
    parsed = parse("ORDERBYDESCcategory^active=true^NQpriority=1^ORDERBYnumber^ORDERBYsys_id")
    assert parsed.order_by == (
        OrderKey("category", True),
        OrderKey("number", False),
        OrderKey("sys_id", False),
    )
    assert len(parsed.groups) == 2


def test_sort_multi_key_with_desc_and_stability() -> None:
    rows = [
        {"category": "b", "priority": "2", "tag": "1"},
        {"category": "a", "priority": "10", "tag": "2"},
        {"category": "b", "priority": "10", "tag": "3"},
        {"category": "a", "priority": "2", "tag": "4"},
        {"category": "b", "priority": "2", "tag": "5"},
        {"category": "", "priority": "", "tag": "6"},
        {"priority": "3", "tag": "7"},
    ]
    parsed = parse("ORDERBYcategory^ORDERBYDESCpriority")
    tags = [r["tag"] for r in parsed.sort(rows)]
    # empty category first; within a category priority numerically descending; ties stable
    assert tags == ["7", "6", "2", "4", "3", "1", "5"]
    tags_desc = [r["tag"] for r in parse("ORDERBYDESCcategory^ORDERBYpriority").sort(rows)]
    assert tags_desc == ["1", "5", "3", "4", "2", "6", "7"]
    assert rows[0]["tag"] == "1"  # input untouched


def test_sort_integer_numerically_strings_lexically_empties_first() -> None:
    rows = [{"priority": v, "number": v} for v in ["10", "9", "", "abc", "-1", "2.5"]]
    by_int = [r["priority"] for r in parse("ORDERBYpriority").sort(rows)]
    assert by_int == ["", "-1", "2.5", "9", "10", "abc"]
    by_str = [r["number"] for r in parse("ORDERBYnumber").sort(rows)]
    assert by_str == ["", "-1", "10", "2.5", "9", "abc"]
    by_int_desc = [r["priority"] for r in parse("ORDERBYDESCpriority").sort(rows)]
    assert by_int_desc == ["abc", "10", "9", "2.5", "-1", ""]


def test_sort_without_orderby_keeps_input_order() -> None:
    rows = [{"number": "b"}, {"number": "a"}]
    assert parse("active=true").sort(rows) == rows


def test_apply_filters_then_sorts() -> None:
    rows = [
        {"active": "true", "number": "b"},
        {"active": "false", "number": "a"},
        {"active": "true", "number": "a"},
    ]
    out = parse("active=true^ORDERBYnumber").apply(rows)
    assert out == [rows[2], rows[0]]


# --- the keyset cursor query against a brute-force filter -------------------------------------

T = "2026-01-01 00:00:00"
HI = "2026-01-02 00:00:00"
S = "abc"
KEYSET = (
    "active=true^sys_updated_on>2026-01-01 00:00:00^sys_updated_on<=2026-01-02 00:00:00"
    "^NQactive=true^sys_updated_on=2026-01-01 00:00:00^sys_id>abc"
    "^sys_updated_on<=2026-01-02 00:00:00^ORDERBYsys_updated_on^ORDERBYsys_id"
)
TIMESTAMPS = [
    "2025-12-31 23:59:59",
    T,
    "2026-01-01 00:00:01",
    "2026-01-01 12:00:00",
    "2026-01-01 23:59:59",
    HI,
    "2026-01-02 00:00:01",
    "",
]
ID_PREFIXES = ["", "a", "ab", "abb", "abc", "abd", "b", "0", "f"]


def _keyset_expected(row: Mapping[str, str]) -> bool:
    u, i = row.get("sys_updated_on", ""), row.get("sys_id", "")
    return row.get("active", "") == "true" and u != "" and (T < u <= HI or (u == T and i > S))


def _random_table(rng: random.Random, n: int) -> list[dict[str, str]]:
    rows = []
    for _ in range(n):
        prefix = rng.choice(ID_PREFIXES)
        sys_id = prefix + "".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(0, 4)))
        rows.append(
            {
                "active": rng.choice(["true", "false", ""]),
                "sys_updated_on": rng.choice(TIMESTAMPS),
                "sys_id": sys_id,
            }
        )
    return rows


def test_keyset_query_against_brute_force() -> None:
    rows = _random_table(random.Random(20260101), 3000)
    parsed = parse(KEYSET)
    assert parsed.order_by == (OrderKey("sys_updated_on", False), OrderKey("sys_id", False))
    got = parsed.apply(rows)
    expected = sorted(
        (r for r in rows if _keyset_expected(r)), key=lambda r: (r["sys_updated_on"], r["sys_id"])
    )
    assert got == expected
    assert any(r["sys_updated_on"] == T for r in got)  # the second group did contribute
    assert any(r["sys_updated_on"] == HI for r in got)  # the upper bound is inclusive
    # the documented equivalent without ^NQ selects the same rows
    alt = parse(
        "active=true^sys_updated_on>=2026-01-01 00:00:00^sys_updated_on<=2026-01-02 00:00:00"
        "^sys_updated_on>2026-01-01 00:00:00^ORsys_id>abc^ORDERBYsys_updated_on^ORDERBYsys_id"
    )
    assert alt.apply(rows) == expected


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=0, max_value=80))
def test_keyset_query_against_brute_force_property(seed: int, n: int) -> None:
    rows = _random_table(random.Random(seed), n)
    parsed = parse(KEYSET)
    assert [parsed.matches(r) for r in rows] == [_keyset_expected(r) for r in rows]


# --- property tests: composition equals the documented precedence ------------------------------

PROP_FIELDS: dict[str, tuple[str, list[str]]] = {
    "priority": ("integer", ["", "1", "2", "10", "x"]),
    "number": ("string", ["", "a", "ab", "b", "B"]),
    "active": ("boolean", ["", "true", "false"]),
    "sys_updated_on": ("datetime", ["", "2026-01-01 00:00:00", "2026-01-01 00:00:01"]),
}
PROP_OPERATORS = [
    "=", "!=", "<", "<=", ">", ">=", "IN", "NOT IN", "LIKE", "NOT LIKE", "STARTSWITH",
    "ENDSWITH", "ISEMPTY", "ISNOTEMPTY", "ANYTHING", "BETWEEN",
]  # fmt: skip


@st.composite
def conditions(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(PROP_FIELDS)))
    values = PROP_FIELDS[name][1]
    op = draw(st.sampled_from(PROP_OPERATORS))
    if op in ("ISEMPTY", "ISNOTEMPTY", "ANYTHING"):
        return name + op
    if op in ("IN", "NOT IN"):
        return name + op + ",".join(draw(st.lists(st.sampled_from(values[1:]), min_size=1)))
    if op == "BETWEEN":
        return f"{name}{op}{draw(st.sampled_from(values[1:]))}@{draw(st.sampled_from(values))}"
    return name + op + draw(st.sampled_from(values))


rows_strategy = st.fixed_dictionaries(
    {},
    optional={name: st.sampled_from(values) for name, (_, values) in PROP_FIELDS.items()},
)
# a group: AND-terms, each an OR-chain of one or more conditions
groups_strategy = st.lists(
    st.lists(st.lists(conditions(), min_size=1, max_size=3), min_size=1, max_size=3),
    min_size=1,
    max_size=4,
)


def _render(groups: list[list[list[str]]]) -> str:
    return "^NQ".join("^".join("^OR".join(chain) for chain in group) for group in groups)


@settings(max_examples=300, deadline=None)
@given(groups_strategy, st.lists(rows_strategy, min_size=1, max_size=8))
def test_nq_equals_or_of_each_group(
    groups: list[list[list[str]]], rows: list[dict[str, str]]
) -> None:
    parsed = parse(_render(groups))
    per_group = [parse(_render([group])) for group in groups]
    assert len(parsed.groups) == len(groups)
    for row in rows:
        expected = any(g.matches(row) for g in per_group)
        assert parsed.matches(row) is expected
        assert expected is any(match_group(group, row) for group in parsed.groups)


@settings(max_examples=300, deadline=None)
@given(groups_strategy, st.lists(rows_strategy, min_size=1, max_size=8))
def test_matches_equals_documented_precedence(
    groups: list[list[list[str]]], rows: list[dict[str, str]]
) -> None:
    parsed = parse(_render(groups) + "^ORDERBYnumber^EQ")
    for row in rows:
        # each condition evaluated alone, combined here the way the API doc says
        expected = any(
            all(any(matches(cond, row) for cond in chain) for chain in group) for group in groups
        )
        assert parsed.matches(row) is expected


SORT_FIELDS = ["priority", "number", "sys_updated_on"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(SORT_FIELDS), st.booleans()), min_size=1, max_size=3),
    st.lists(rows_strategy, max_size=20),
)
def test_sort_equals_brute_force_comparator(
    keys: list[tuple[str, bool]], rows: list[dict[str, str]]
) -> None:
    query = "^".join(f"ORDERBY{'DESC' if desc else ''}{name}" for name, desc in keys)
    tagged = [{**row, "tag": str(i)} for i, row in enumerate(rows)]

    def key_of(name: str, row: Mapping[str, str]) -> tuple[int, float, str]:
        value = row.get(name, "")
        if value == "":
            return (0, 0.0, "")
        if PROP_FIELDS[name][0] == "integer":
            try:
                return (1, float(value), "")
            except ValueError:
                return (2, 0.0, value)
        return (1, 0.0, value)

    def compare(left: Mapping[str, str], right: Mapping[str, str]) -> int:
        for name, desc in keys:
            a, b = key_of(name, left), key_of(name, right)
            if a != b:
                return (1 if a > b else -1) * (-1 if desc else 1)
        return int(left["tag"]) - int(right["tag"])  # stable: input order breaks ties

    assert parse(query).sort(tagged) == sorted(tagged, key=functools.cmp_to_key(compare))
