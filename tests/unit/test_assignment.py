"""Table → task assignment by rendezvous hashing (SPEC §10) against the shared vectors."""

from __future__ import annotations

from typing import Any

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.assignment import SEED, assign, owner
from tests.vectors import vector

CASES = vector("assignment.json")["cases"]


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{len(c['aliases'])}-aliases-{c['tasks_max']}-tasks" for c in CASES]
)
def test_assignment_vector(case: dict[str, Any]) -> None:
    aliases, tasks_max = case["aliases"], case["tasks_max"]
    assert assign(aliases, tasks_max) == case["owner"]
    for alias, task in case["owner"].items():
        assert owner(alias, tasks_max, len(aliases)) == task
    for task in range(tasks_max):
        expected = [alias for alias in aliases if case["owner"][alias] == task]
        assert _tables_of(aliases, tasks_max, task) == expected


def test_vectors_spread_tables_over_several_tasks() -> None:
    # Guards against a vector file where every table lands on task 0 (which any bug passes).
    assert any(len(set(case["owner"].values())) > 2 for case in CASES)


def test_weight_is_unsigned_murmur3_with_the_spec_seed() -> None:
    assert SEED == 0x5F3759DF
    assert mmh3.hash(b"incident#0", SEED, signed=False) == 895225170


def test_ties_go_to_the_lowest_task(monkeypatch: pytest.MonkeyPatch) -> None:
    from snowsource.core import assignment

    monkeypatch.setattr(assignment, "_weight", lambda alias, task: 7 if task in (2, 3) else 1)
    assert owner("x", 5, 5) == 2


def test_candidates_are_capped_by_the_number_of_aliases() -> None:
    for alias in ("incident", "problem", "a", "b"):
        assert owner(alias, 100, 1) == 0
    assert set(assign(["a", "b"], 64).values()) <= {0, 1}


def test_a_task_beyond_the_aliases_owns_nothing() -> None:
    assert _tables_of(["incident", "problem"], 8, 5) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: owner("a", 0, 1), "tasks_max"),
        (lambda: owner("a", 1, 0), "n_aliases"),
        (lambda: assign(["a", "a"], 2), "unique"),
    ],
)
def test_invalid_arguments(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


_ALIAS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
_ALIASES = st.lists(_ALIAS, min_size=1, max_size=40, unique=True)


@given(_ALIASES, st.integers(min_value=1, max_value=40))
def test_every_alias_has_exactly_one_owner(aliases: list[str], tasks_max: int) -> None:
    owners = assign(aliases, tasks_max)
    assert list(owners) == aliases
    assert all(0 <= task < min(tasks_max, len(aliases)) for task in owners.values())
    per_task = [_tables_of(aliases, tasks_max, task) for task in range(tasks_max)]
    assert sorted(alias for tables in per_task for alias in tables) == sorted(aliases)


@given(_ALIASES, st.integers(min_value=1, max_value=40))
def test_adding_a_task_moves_tables_only_to_it(aliases: list[str], tasks_max: int) -> None:
    before = assign(aliases, tasks_max)
    after = assign(aliases, tasks_max + 1)
    new_task = min(tasks_max, len(aliases))  # the one extra candidate, if there is one
    for alias in aliases:
        if after[alias] != before[alias]:
            assert after[alias] == new_task


@given(_ALIASES, st.integers(min_value=2, max_value=40))
def test_removing_a_task_moves_only_its_tables(aliases: list[str], tasks_max: int) -> None:
    before = assign(aliases, tasks_max)
    after = assign(aliases, tasks_max - 1)
    removed = tasks_max - 1
    for alias in aliases:
        if after[alias] != before[alias]:
            assert before[alias] == removed


@given(_ALIASES, _ALIAS, st.integers(1, 40))
def test_adding_a_table_never_moves_another_beyond_the_new_candidate(
    aliases: list[str], extra: str, tasks_max: int
) -> None:
    if extra in aliases:
        return
    before = assign(aliases, tasks_max)
    after = assign([*aliases, extra], tasks_max)
    grew = len(aliases) < tasks_max  # one more candidate task appears only then
    for alias in aliases:
        if grew:
            assert after[alias] in (before[alias], len(aliases))
        else:
            assert after[alias] == before[alias]


def test_movement_is_small_in_practice() -> None:
    aliases = [f"table_{i}" for i in range(100)]
    before, after = assign(aliases, 4), assign(aliases, 5)
    moved = [a for a in aliases if before[a] != after[a]]
    assert 0 < len(moved) < 40  # about 1/5 of the tables, never a reshuffle
    assert {after[a] for a in moved} == {4}


def _tables_of(aliases: list[str], tasks_max: int, task: int) -> list[str]:
    return [alias for alias, owner_task in assign(aliases, tasks_max).items() if owner_task == task]
