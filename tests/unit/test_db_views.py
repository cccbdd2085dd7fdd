"""``core.db_views``: a view's joined tables, its base, its prefixed cursor and dictionary."""

from __future__ import annotations

from typing import Any

from snowsource.core.db_views import (
    JoinedTable,
    ViewCursor,
    base_tables,
    joined_tables,
    no_base_reason,
    prefixed_columns,
    view_cursor,
)

ROWS: list[dict[str, Any]] = [
    {"view": "v1", "table": "task_sla", "variable_prefix": "sla", "order": "200"},
    {
        "view": {"value": "v1", "link": "x"},
        "table": "incident",
        "variable_prefix": "inc",
        "order": "100",
    },
    {"view": "v2", "table": "cmdb_ci", "variable_prefix": "ci", "order": ""},
    {"view": "v2", "table": "cmdb_rel_ci", "variable_prefix": "rel", "order": "5"},
    {"view": "v3", "table": "sys_user", "variable_prefix": "", "order": "100"},  # no prefix
]


def test_joined_tables_sorted_by_order_rows_without_a_prefix_left_out() -> None:
    joined = joined_tables(ROWS)
    assert [(t.view, t.prefix) for t in joined] == [
        ("v2", "rel"),
        ("v1", "inc"),
        ("v1", "sla"),
        ("v2", "ci"),  # no order: after every numbered one
    ]


def test_the_base_is_the_lowest_order_and_a_view_without_one_has_none() -> None:
    bases = base_tables(joined_tables(ROWS))
    assert bases["v1"] == JoinedTable(100, "inc", "incident", "v1")
    assert bases["v2"].prefix == "rel"
    assert "v3" not in bases


def test_the_cursor_is_the_templates_fields_under_the_base_prefix() -> None:
    base = JoinedTable(100, "inc", "incident", "v1")
    assert view_cursor(base, "sys_updated_on", "sys_id") == ViewCursor(
        "inc_sys_updated_on", "inc_sys_id"
    )
    assert view_cursor(base, "sys_created_on", "number").id_field == "inc_number"


def test_a_views_dictionary_is_its_tables_columns_under_their_prefixes() -> None:
    joined = joined_tables(ROWS[:2])
    columns = {
        "incident": {"priority": "integer", "sys_id": "GUID"},
        "task_sla": {"sys_id": "GUID", "u_secret": "password2"},
    }
    assert prefixed_columns(joined, columns) == {
        "inc_priority": "integer",
        "inc_sys_id": "GUID",
        "sla_sys_id": "GUID",
        "sla_u_secret": "password2",
    }


def test_the_skip_reason_says_what_to_do() -> None:
    reason = no_base_reason("u_ci_view")
    assert "sys_db_view_table" in reason
    assert "timestamp.field and id.field" in reason
