"""``tasks.assignment: group`` is accepted, and a group member considers every table."""

from __future__ import annotations

from pathlib import Path

import yaml

from snowsource.config.fields import TasksAssignment
from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.engine.table_specs import owned_specs


def _load(tmp_path: Path, **top: object) -> Settings:
    doc = {
        "name": "c",
        "snow": {
            "url": "https://acme.service-now.com",
            "auth": {"type": "basic", "username": "u", "password": "p"},
            "tables": {f"t{i}": {"name": "incident", "query": f"number={i}"} for i in range(6)},
        },
        "kafka": {"bootstrap.servers": "127.0.0.1:9092"},
        **top,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path, env={}).settings


def test_group_assignment_loads_and_owns_every_table(tmp_path: Path) -> None:
    settings = _load(tmp_path, **{"tasks.assignment": "group"})
    assert settings.tasks_assignment == TasksAssignment.GROUP
    specs = owned_specs(settings)
    assert sorted(s.alias for s in specs) == [f"t{i}" for i in range(6)]


def test_static_assignment_still_owns_only_this_tasks_share(tmp_path: Path) -> None:
    settings = _load(tmp_path, **{"tasks.max": 3, "task.id": 1})
    specs = owned_specs(settings)
    assert 0 < len(specs) < 6
