"""``snow.discover``'s pure rules: globs, the extends walk, views, aliases, diffs, readability."""

from __future__ import annotations

import pytest

from snowsource.core.discovery import (
    VIEW_CLASS,
    DbObject,
    DiscoverRules,
    db_objects,
    diff,
    discovery_owner,
    select,
    unreadable,
)

OBJECTS = [
    DbObject("t", "task"),
    DbObject("i", "incident", "t"),
    DbObject("c", "change_request", "t"),
    DbObject("ct", "change_task", "t"),
    DbObject("pi", "u_priority_incident", "i"),  # a grandchild of task
    DbObject("ci", "cmdb_ci"),
    DbObject("srv", "cmdb_ci_server", "ci"),
    DbObject("lx", "cmdb_ci_linux_server", "srv"),
    DbObject("u", "sys_user"),
    DbObject("cu", "u_custom"),
    DbObject("up", "u_Upper"),  # not a valid alias
    DbObject("v", "incident_sla", "", VIEW_CLASS),
    DbObject("orphan", "u_orphan", "gone"),  # its parent is not visible
]


def names(rules: DiscoverRules, explicit: tuple[str, ...] = ()) -> tuple[str, ...]:
    return select(OBJECTS, rules, explicit).tables


def test_include_star_takes_every_table_but_views() -> None:
    got = names(DiscoverRules())
    assert "incident_sla" not in got
    assert set(got) == {o.name for o in OBJECTS if not o.is_view} - {"u_Upper"}
    assert list(got) == sorted(got)


def test_views_true_takes_views() -> None:
    assert "incident_sla" in names(DiscoverRules(views=True))


def test_include_and_exclude_globs() -> None:
    rules = DiscoverRules(include=("cmdb_ci*", "u_*"), exclude=("*linux*", "u_orphan"))
    assert names(rules) == ("cmdb_ci", "cmdb_ci_server", "u_custom", "u_priority_incident")


def test_globs_are_case_sensitive() -> None:
    assert names(DiscoverRules(include=("INCIDENT",))) == ()


def test_extends_walks_the_whole_chain_and_includes_the_root() -> None:
    got = names(DiscoverRules(extends=("task",)))
    assert got == ("change_request", "change_task", "incident", "task", "u_priority_incident")


def test_extends_of_a_leaf_is_the_leaf() -> None:
    assert names(DiscoverRules(extends=("cmdb_ci_linux_server",))) == ("cmdb_ci_linux_server",)


def test_extends_several_roots_with_include_and_exclude() -> None:
    rules = DiscoverRules(extends=("task", "cmdb_ci"), include=("c*",), exclude=("change_task",))
    assert names(rules) == ("change_request", "cmdb_ci", "cmdb_ci_linux_server", "cmdb_ci_server")


def test_extends_of_an_unknown_table_selects_nothing() -> None:
    assert names(DiscoverRules(extends=("nothing",))) == ()


def test_a_super_class_cycle_ends() -> None:
    objects = [DbObject("a", "u_a", "b"), DbObject("b", "u_b", "a")]
    assert select(objects, DiscoverRules(extends=("task",))).tables == ()
    assert select(objects, DiscoverRules(extends=("u_b",))).tables == ("u_a", "u_b")


def test_explicit_tables_are_never_discovered_twice() -> None:
    assert "incident" not in names(DiscoverRules(), explicit=("incident",))


def test_names_that_cannot_be_aliases_are_set_aside() -> None:
    selection = select(OBJECTS, DiscoverRules(include=("u_*",)))
    assert selection.invalid == ("u_Upper",)
    assert "u_Upper" not in selection.tables


def test_db_objects_reads_plain_and_reference_shapes() -> None:
    rows: list[dict[str, object]] = [
        {"sys_id": "1", "name": "task", "super_class": "", "sys_class_name": "sys_db_object"},
        {"sys_id": "2", "name": "incident", "super_class": {"value": "1", "link": "x"}},
        {"sys_id": "3", "name": "", "super_class": ""},
        {"sys_id": "4", "name": "v", "sys_class_name": VIEW_CLASS},
    ]
    got = db_objects(rows)
    assert got == [
        DbObject("1", "task"),
        DbObject("2", "incident", "1"),
        DbObject("4", "v", "", VIEW_CLASS),
    ]
    assert got[2].is_view


def test_diff() -> None:
    assert diff(["a", "b"], ["b", "c", "d"]) == (["c", "d"], ["a"])
    assert diff([], []) == ([], [])


@pytest.mark.parametrize(
    ("status", "rows", "next_link", "total", "skipped"),
    [
        (403, 0, False, None, True),
        (200, 0, False, 5, True),
        (200, 0, True, 5, False),  # rows further on may be readable
        (200, 0, False, 0, False),  # an empty table
        (200, 0, False, None, False),  # no count: nothing says rows exist
        (200, 3, False, 5, False),
    ],
)
def test_unreadable(
    status: int, rows: int, next_link: bool, total: int | None, skipped: bool
) -> None:
    reason = unreadable(status=status, rows=rows, next_link=next_link, total_count=total)
    assert (reason is not None) is skipped


def test_discovery_owner_is_stable_and_in_range() -> None:
    owners = {name: discovery_owner(name, 3) for name in ("a", "b", "incident", "u_x")}
    assert all(0 <= o < 3 for o in owners.values())
    assert owners == {name: discovery_owner(name, 3) for name in owners}
    assert discovery_owner("anything", 1) == 0
