"""Field governance decisions and their application to rows (core/governance.py)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.governance import (
    MASK,
    NO_GOVERNANCE,
    Action,
    ColumnRules,
    Governance,
    Hasher,
    config_problems,
    governed_columns,
    governed_projection,
    hmac_hex,
)
from snowsource.core.journal import govern_entries

PROTECTED = frozenset({"sys_updated_on", "sys_id", "sys_mod_count"})
KEY = b"k3y"


def gov(**kwargs: Any) -> Governance:
    return Governance(protected=PROTECTED, hash_key=KEY, **kwargs)


def test_hash_is_lower_hex_hmac_sha256_of_utf8_text() -> None:
    expected = hmac.new(KEY, "Zoë".encode(), hashlib.sha256).hexdigest()
    assert hmac_hex(KEY, "Zoë") == expected
    assert expected == expected.lower()
    assert len(expected) == 64


@pytest.mark.parametrize(
    ("column", "internal_type", "expected"),
    [
        ("user_password", "password2", Action.EXCLUDE),
        ("u_pin", "glide_encrypted", Action.EXCLUDE),
        ("old_pw", "password", Action.EXCLUDE),
        ("email", "string", Action.HASH),
        ("phone", None, Action.MASK),
        ("u_ssn", "string", Action.EXCLUDE),
        ("caller_id.email", None, Action.EXCLUDE),
        ("name", "string", Action.KEEP),
        ("sys_id", "GUID", Action.KEEP),
        ("sys_updated_on", "glide_date_time", Action.KEEP),
        ("sys_mod_count", "integer", Action.KEEP),
    ],
)
def test_action_per_column(column: str, internal_type: str | None, expected: Action) -> None:
    g = gov(exclude=("u_*", "caller_id.*", "sys_*"), hash=("email",), mask=("phone",))
    assert g.action(column, internal_type) is expected


def test_sensitive_include_leaves_passwords_to_the_lists() -> None:
    g = gov(sensitive_exclude=False, hash=("user_password",))
    assert g.action("user_password", "password2") is Action.HASH
    assert g.action("u_pin", "glide_encrypted") is Action.KEEP


def test_sensitive_wins_over_hash_and_mask() -> None:
    g = gov(hash=("user_password",), mask=("u_pin",))
    assert g.action("user_password", "password2") is Action.EXCLUDE
    assert g.action("u_pin", "glide_encrypted") is Action.EXCLUDE


def test_the_cursor_fields_are_never_governed_even_when_sensitive() -> None:
    g = gov(exclude=("*",))
    assert g.action("sys_id", "password2") is Action.KEEP
    assert not g.excluded_by_name("sys_updated_on")
    assert g.excluded_by_name("anything")


def test_no_governance_keeps_everything() -> None:
    assert NO_GOVERNANCE.action("user_password", "password2") is Action.KEEP
    assert not NO_GOVERNANCE.lists


def test_hash_key_stays_out_of_repr() -> None:
    assert "k3y" not in repr(gov(hash=("email",)))


def test_apply_governs_rows_in_place() -> None:
    rules = ColumnRules(
        gov(exclude=("u_ssn",), hash=("email",), mask=("phone",)),
        {"user_password": "password2", "email": "email", "phone": "ph_number"},
    )
    rows: list[dict[str, Any]] = [
        {
            "sys_id": "a" * 32,
            "sys_updated_on": "2026-01-01 00:00:00",
            "user_password": "hunter2",
            "u_ssn": "123-45-6789",
            "email": "ann@example.com",
            "phone": "555",
            "name": "Ann",
        },
        {"sys_id": "b" * 32, "email": "", "phone": "", "name": "Bob"},
    ]
    assert rules.apply(rows) == 6
    assert rows[0] == {
        "sys_id": "a" * 32,
        "sys_updated_on": "2026-01-01 00:00:00",
        "email": hmac_hex(KEY, "ann@example.com"),
        "phone": MASK,
        "name": "Ann",
    }
    assert rows[1] == {"sys_id": "b" * 32, "email": "", "phone": "", "name": "Bob"}


def test_apply_takes_the_raw_value_of_display_and_link_shapes() -> None:
    rules = ColumnRules(gov(hash=("caller_id",), mask=("location",)))
    rows: list[dict[str, Any]] = [
        {
            "caller_id": {"display_value": "Ann Lee", "value": "c" * 32, "link": "https://x"},
            "location": {"display_value": "Paris", "value": "d" * 32},
        },
        {"caller_id": {"display_value": "", "value": ""}, "location": {"value": ""}},
    ]
    rules.apply(rows)
    assert rows[0] == {"caller_id": hmac_hex(KEY, "c" * 32), "location": MASK}
    assert rows[1] == {"caller_id": "", "location": ""}


def test_apply_without_any_governed_column_changes_nothing() -> None:
    rules = ColumnRules(gov(), {"name": "string"})
    rows = [{"name": "x", "user_password": "y"}]
    assert rules.apply(rows) == 0
    assert rules.apply([]) == 0
    assert rows == [{"name": "x", "user_password": "y"}]


def test_learn_takes_every_decision_anew() -> None:
    rules = ColumnRules(gov())
    assert rules.decide("u_secret") is Action.KEEP
    rules.learn({"u_secret": "glide_encrypted"})
    assert rules.decide("u_secret") is Action.EXCLUDE
    rules.learn(None)
    assert rules.decide("u_secret") is Action.KEEP


def test_governed_columns_for_schemas() -> None:
    columns = {
        "sys_id": "GUID",
        "sys_updated_on": "glide_date_time",
        "priority": "integer",
        "user_password": "password2",
        "u_ssn": "string",
        "email": "email",
        "opened_at": "glide_date_time",
    }
    g = gov(exclude=("u_*",), hash=("email",), mask=("opened_at",))
    assert governed_columns(columns, g) == {
        "sys_id": "GUID",
        "sys_updated_on": "glide_date_time",
        "priority": "integer",
        "email": "string",
        "opened_at": "string",
    }


def test_projection_leaves_excluded_names_out() -> None:
    g = gov(exclude=("u_*", "caller_id.*"))
    fields = ("number", "u_ssn", "caller_id.email", "caller_id", "sys_id")
    assert governed_projection(fields, g) == ("number", "caller_id", "sys_id")


def test_config_problems_name_the_key_and_the_fix() -> None:
    found = config_problems(
        exclude=["sys_mod_count", "u_*"],
        hash_names=["sys_updated_on", "email"],
        mask=["email"],
        protected=PROTECTED,
    )
    keys = [key for key, _ in found]
    assert keys == ["fields.exclude", "fields.hash", "fields.mask"]
    assert "remove 'sys_mod_count' from fields.exclude" in found[0][1]
    assert "also in fields.hash" in found[2][1]
    assert config_problems(exclude=["sys_*"], hash_names=[], mask=[], protected=PROTECTED) == []


_NAMES = st.sampled_from(
    ["sys_id", "sys_updated_on", "sys_mod_count", "a", "b", "u_x", "u_y", "pw", "enc"]
)
_VALUES = st.one_of(
    st.text(max_size=8),
    st.fixed_dictionaries({"value": st.text(max_size=8), "display_value": st.text(max_size=8)}),
)
_TYPES = {"pw": "password2", "enc": "glide_encrypted", "a": "string"}


@given(
    rows=st.lists(st.dictionaries(_NAMES, _VALUES, max_size=9), max_size=5),
    exclude=st.lists(st.sampled_from(["u_*", "sys_*", "b", "*"]), max_size=2),
    hashed=st.lists(_NAMES.filter(lambda n: n not in PROTECTED), max_size=2),
    sensitive=st.booleans(),
)
def test_governed_rows_keep_protected_columns_and_leak_nothing(
    rows: list[dict[str, Any]], exclude: list[str], hashed: list[str], sensitive: bool
) -> None:
    g = Governance(
        exclude=tuple(exclude),
        hash=tuple(hashed),
        sensitive_exclude=sensitive,
        protected=PROTECTED,
        hash_key=KEY,
    )
    before = [dict(row) for row in rows]
    ColumnRules(g, _TYPES).apply(rows)
    for old, new in zip(before, rows, strict=True):
        for name, value in old.items():
            action = g.action(name, _TYPES.get(name))
            if name in PROTECTED or action is Action.KEEP:
                assert new[name] == value
            elif action is Action.EXCLUDE:
                assert name not in new
            else:
                raw = value["value"] if isinstance(value, dict) else value
                assert new[name] == (hmac_hex(KEY, raw) if raw else "")
        assert set(new) <= set(old)


def test_journal_entries_follow_the_table_governance() -> None:
    rows: list[dict[str, Any]] = [
        {"sys_id": "1", "element": "work_notes", "value": "internal"},
        {"sys_id": "2", "element": "comments", "value": "hello"},
        {"sys_id": "3", "element": "comments", "value": ""},
        {"sys_id": "4", "element": "u_note", "value": "kept"},
    ]
    skip = govern_entries(rows, gov(exclude=("work_*",), hash=("comments",)))
    assert skip == {"1"}
    assert "value" not in rows[0]
    assert rows[1]["value"] == hmac_hex(KEY, "hello")
    assert rows[2]["value"] == ""
    assert rows[3]["value"] == "kept"
    masked = [{"sys_id": "5", "element": "comments", "value": "hi"}]
    assert govern_entries(masked, gov(mask=("comments",))) == frozenset()
    assert masked[0]["value"] == MASK


def test_the_hasher_equals_hmac_hex_and_forgets_when_full() -> None:
    hasher = Hasher(KEY)
    texts = [f"value-{i}" for i in range(5000)]
    assert [hasher(t) for t in texts] == [hmac_hex(KEY, t) for t in texts]
    assert hasher("value-1") == hmac_hex(KEY, "value-1")  # remembered or not, the same


def test_rules_without_anything_to_govern_leave_rows_alone() -> None:
    rows = [{"name": "x", "u_pin": "1234"}]
    assert ColumnRules(gov(), {"name": "string"}).apply(rows) == 0
    assert ColumnRules(gov(), None).apply(rows) == 0
    assert rows == [{"name": "x", "u_pin": "1234"}]
    rules = ColumnRules(gov(), {"name": "string"})
    rules.learn({"name": "string", "u_pin": "glide_encrypted"})  # a column added meanwhile
    assert rules.apply(rows) == 1
    assert rows == [{"name": "x"}]
