"""The dictionary walk: sys_db_object + sys_dictionary rows -> a table's columns."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core.dictionary import (
    columns,
    db_object_query,
    dictionary_query,
    lineage,
    parent_query,
)
from snowsource.core.errors import TableFailedError

TASK = {"sys_id": "t" * 32, "name": "task", "super_class": ""}
INCIDENT = {
    "sys_id": "i" * 32,
    "name": "incident",
    "super_class": {"link": "https://x/api/now/table/sys_db_object/" + "t" * 32, "value": "t" * 32},
}
OTHER = {"sys_id": "o" * 32, "name": "cmdb_ci", "super_class": ""}


def _col(
    table: str, element: str, internal_type: object, active: str = "true"
) -> dict[str, object]:
    return {"name": table, "element": element, "internal_type": internal_type, "active": active}


def test_lineage_walks_super_class_in_any_shape() -> None:
    assert lineage("incident", [OTHER, INCIDENT, TASK]) == ["incident", "task"]
    assert lineage("task", [INCIDENT, TASK]) == ["task"]


def test_lineage_errors_name_the_table_and_the_fix() -> None:
    with pytest.raises(TableFailedError, match="'u_missing' has no sys_db_object row"):
        lineage("u_missing", [TASK])
    with pytest.raises(TableFailedError, match="read access to sys_db_object"):
        lineage("incident", [INCIDENT])
    loop = [
        {"sys_id": "a" * 32, "name": "a", "super_class": "b" * 32},
        {"sys_id": "b" * 32, "name": "b", "super_class": "a" * 32},
    ]
    with pytest.raises(TableFailedError, match=r"loops \(a -> b -> a\)"):
        lineage("a", loop)


def test_columns_nearest_definition_wins_and_collection_rows_are_skipped() -> None:
    rows = [
        _col("task", "", "collection"),
        _col("task", "number", "string"),
        _col("task", "state", "integer"),
        _col("task", "sys_id", {"link": "https://x", "value": "GUID"}),
        _col("incident", "state", "choice"),
        _col("incident", "caller_id", "reference"),
        _col("incident", "u_retired", "integer", active="false"),
        _col("cmdb_ci", "cost", "decimal"),
    ]
    assert columns(["incident", "task"], rows) == {
        "caller_id": "reference",
        "number": "string",
        "state": "choice",
        "sys_id": "GUID",
    }
    assert columns(["task"], rows)["state"] == "integer"


def test_queries_for_each_step() -> None:
    assert db_object_query("incident") == "name=incident"
    assert parent_query(INCIDENT) == "sys_id=" + "t" * 32
    assert parent_query(TASK) is None
    assert dictionary_query(["incident", "task"]) == (
        "nameINincident,task^ORDERBYname^ORDERBYelement"
    )


@given(
    depth=st.integers(min_value=1, max_value=6),
    # (level, element) is unique on an instance: one dictionary row per column of a table.
    defs=st.dictionaries(
        st.tuples(st.integers(min_value=0, max_value=5), st.sampled_from(["a", "b", "c", "d"])),
        st.sampled_from(["string", "integer", "boolean", "reference"]),
        max_size=20,
    ),
    shuffle=st.randoms(use_true_random=False),
)
def test_walk_finds_the_nearest_definition_of_every_column(
    depth: int, defs: dict[tuple[int, str], str], shuffle: Any
) -> None:
    names = [f"t{level}" for level in range(depth)]  # t0 extends t1 extends ... (nearest first)
    objects = [
        {"sys_id": f"{level:032x}", "name": name, "super_class": f"{level + 1:032x}"}
        for level, name in enumerate(names)
    ]
    objects[-1]["super_class"] = ""
    rows = [_col(f"t{level}", element, kind) for (level, element), kind in defs.items()]
    shuffle.shuffle(objects)
    shuffle.shuffle(rows)
    chain = lineage("t0", objects)
    assert chain == names
    nearest: dict[str, tuple[int, str]] = {}
    for (level, element), kind in defs.items():
        if level < depth and (element not in nearest or level < nearest[element][0]):
            nearest[element] = (level, kind)
    assert columns(chain, rows) == {element: kind for element, (_, kind) in nearest.items()}
