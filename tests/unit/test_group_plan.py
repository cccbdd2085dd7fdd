"""Table -> live member by rendezvous hashing, and the withholding that keeps a moving table
from being polled twice (tasks.assignment: group)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.assignment import rendezvous_weight
from snowsource.core.group_plan import owner_among, plan

ALIASES = [f"table_{i}" for i in range(9)]
MEMBERS = ["host-a/101/1700000000000", "host-b/202/1700000000001", "host-c/303/1700000000002"]

keys = st.text(alphabet="abcdefghij/0123456789-", min_size=1, max_size=12)
member_sets = st.sets(keys, min_size=1, max_size=6)
alias_sets = st.sets(st.text(alphabet="abcdefgh_", min_size=1, max_size=10), max_size=20)


def test_owner_is_the_member_with_the_highest_weight() -> None:
    for alias in ALIASES:
        weights = {m: rendezvous_weight(alias, m) for m in MEMBERS}
        assert owner_among(alias, MEMBERS) == max(weights, key=lambda m: weights[m])


def test_weight_reuses_the_spec_hash_of_alias_hash_candidate() -> None:
    # The static assignment's weight of task 0 is the same function with candidate "0".
    assert rendezvous_weight("incident", "0") == 895225170


def test_a_tie_goes_to_the_smallest_member_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from snowsource.core import group_plan

    monkeypatch.setattr(group_plan, "rendezvous_weight", lambda alias, key: 7)
    assert owner_among("incident", ["b", "c", "a"]) == "a"


def test_no_member_is_an_error_naming_the_table() -> None:
    with pytest.raises(ValueError, match="incident"):
        owner_among("incident", [])
    with pytest.raises(ValueError, match="at least one member"):
        plan(["incident"], {})


@given(alias_sets, member_sets, st.permutations(range(6)))
def test_the_answer_ignores_member_order(
    aliases: set[str], members: set[str], order: list[int]
) -> None:
    listed = sorted(members)
    shuffled = [listed[i] for i in order if i < len(listed)]
    for alias in aliases:
        assert owner_among(alias, listed) == owner_among(alias, shuffled)


@given(alias_sets, member_sets, keys)
def test_a_joining_member_takes_only_tables_it_wins(
    aliases: set[str], members: set[str], newcomer: str
) -> None:
    before = {a: owner_among(a, members) for a in aliases}
    after = {a: owner_among(a, members | {newcomer}) for a in aliases}
    for alias in aliases:
        assert after[alias] in (before[alias], newcomer)


@given(alias_sets, member_sets)
def test_a_leaving_member_frees_only_its_own_tables(aliases: set[str], members: set[str]) -> None:
    for leaving in members:
        rest = members - {leaving}
        if not rest:
            continue
        for alias in aliases:
            before = owner_among(alias, members)
            if before != leaving:
                assert owner_among(alias, rest) == before


def test_nine_tables_over_three_members_all_get_some() -> None:
    # The group test relies on this spread: every member of three runs at least one of nine.
    result = plan(ALIASES, dict.fromkeys(MEMBERS, ()))
    assert sorted(itertools.chain.from_iterable(result.tables_of(m) for m in MEMBERS)) == ALIASES
    assert all(result.tables_of(m) for m in MEMBERS)
    assert result.withheld == []


def test_a_first_round_assigns_every_table_at_once() -> None:
    result = plan(ALIASES, dict.fromkeys(MEMBERS, ()))
    assert all(result.owners[a] == owner_among(a, MEMBERS) for a in ALIASES)


def test_a_table_moving_from_a_live_member_is_withheld_until_it_stops() -> None:
    old = {m: plan(ALIASES, dict.fromkeys(MEMBERS, ())).tables_of(m) for m in MEMBERS}
    newcomer = "host-d/404/1700000000003"
    joined = plan(ALIASES, {**old, newcomer: []})
    moving = [a for a in ALIASES if owner_among(a, [*MEMBERS, newcomer]) == newcomer]
    assert moving, "the vector needs the newcomer to win some table"
    assert joined.withheld == sorted(moving)
    # Tables that do not move stay where they run.
    for member in MEMBERS:
        assert joined.tables_of(member) == sorted(set(old[member]) - set(moving))
    assert joined.tables_of(newcomer) == []
    # Their runners stopped them and rejoined: now they go to the newcomer.
    released = {m: [a for a in old[m] if a not in moving] for m in MEMBERS}
    settled = plan(ALIASES, {**released, newcomer: []})
    assert settled.withheld == []
    assert settled.tables_of(newcomer) == sorted(moving)


def test_a_dead_members_tables_go_to_the_survivors_at_once() -> None:
    old = {m: plan(ALIASES, dict.fromkeys(MEMBERS, ())).tables_of(m) for m in MEMBERS}
    dead, survivors = MEMBERS[0], MEMBERS[1:]
    after = plan(ALIASES, {m: old[m] for m in survivors})
    assert after.withheld == []
    for alias in old[dead]:
        assert after.owners[alias] in survivors
    for member in survivors:
        assert set(old[member]) <= set(after.tables_of(member))


def test_the_owner_keeps_a_table_it_runs_even_when_another_member_still_runs_it() -> None:
    alias = ALIASES[0]
    owner = owner_among(alias, MEMBERS)
    other = next(m for m in MEMBERS if m != owner)
    running: dict[str, list[str]] = {m: [] for m in MEMBERS} | {owner: [alias], other: [alias]}
    result = plan([alias], running)
    assert result.owners[alias] == owner
    # Without the owner running it, the same table waits for the other member to stop.
    assert plan([alias], {**running, owner: []}).owners[alias] is None


def test_a_table_nobody_configured_is_never_planned() -> None:
    result = plan(["incident"], {MEMBERS[0]: ["problem"]})
    assert set(result.owners) == {"incident"}


@given(alias_sets, member_sets, st.data())
def test_no_table_is_ever_given_to_a_member_while_another_member_runs_it(
    aliases: set[str], members: set[str], data: st.DataObject
) -> None:
    running = {
        m: data.draw(st.sets(st.sampled_from(sorted(aliases)))) if aliases else set()
        for m in members
    }
    result = plan(aliases, running)
    for alias, owner in result.owners.items():
        if owner is None:
            continue
        others = {m for m, tables in running.items() if alias in tables} - {owner}
        # Either nobody else runs it, or the owner runs it too and the others drop it.
        assert not others or alias in running[owner]
