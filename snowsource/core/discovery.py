"""Which tables of an instance ``snow.discover`` selects (SPEC §15.2): pure rules, no I/O.

The engine pages ``sys_db_object`` and hands the rows here: ``select`` applies include/exclude
globs, the ``extends`` walk over ``super_class`` and the views rule, leaves out the explicitly
configured names, and sets aside the names that cannot be aliases; ``diff`` says what changed
between two discoveries; ``unreadable`` reads a table's first page as readable or not.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Final

__all__ = [
    "VIEW_CLASS",
    "DbObject",
    "DiscoverRules",
    "Selection",
    "db_objects",
    "diff",
    "discovery_owner",
    "select",
    "unreadable",
]

#: ``sys_db_object.sys_class_name`` of a database view (SPEC §15.2).
VIEW_CLASS: Final = "sys_db_view"
# The rule of an alias (``config.fields``): a table name outside it cannot be one.
_ALIAS_RE: Final = re.compile(r"^[a-z0-9_]+$")
# A column of sys_db_object may come back as {"value": ...} (display values, reference links).
_DB_OBJECT_FIELDS: Final = ("sys_id", "name", "super_class", "sys_class_name")


@dataclass(frozen=True)
class DbObject:
    """One ``sys_db_object`` row: a table (or view) and the sys_id of its parent table."""

    sys_id: str
    name: str
    super_class: str = ""
    sys_class_name: str = "sys_db_object"

    @property
    def is_view(self) -> bool:
        return self.sys_class_name == VIEW_CLASS


@dataclass(frozen=True)
class DiscoverRules:
    """``snow.discover``'s selection keys."""

    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    extends: tuple[str, ...] = ()
    views: bool = False


@dataclass(frozen=True)
class Selection:
    """What one discovery selected: table names in order, and those that cannot be aliases."""

    tables: tuple[str, ...] = ()
    invalid: tuple[str, ...] = field(default=())


def _plain(value: Any) -> str:
    """A column's raw value: ``{"value": v}`` (a reference with its link) is ``v``."""
    if isinstance(value, Mapping):
        value = value.get("value", "")
    return value if isinstance(value, str) else ""


def db_objects(rows: Iterable[Mapping[str, Any]]) -> list[DbObject]:
    """Rows of a ``sys_db_object`` page as ``DbObject`` (rows without a name left out)."""
    found: list[DbObject] = []
    for row in rows:
        sys_id, name, parent, cls = (_plain(row.get(key)) for key in _DB_OBJECT_FIELDS)
        if name:
            found.append(DbObject(sys_id, name, parent, cls or "sys_db_object"))
    return found


def _extends(objects: Sequence[DbObject], roots: Iterable[str]) -> set[str]:
    """Names of every table whose ``super_class`` chain reaches a root (the roots included).

    A cycle or a dangling ``super_class`` (a parent the user cannot see) ends a chain.
    """
    wanted = set(roots)
    by_id = {o.sys_id: o for o in objects if o.sys_id}
    reached: set[str] = set()
    for obj in objects:
        seen: set[str] = set()
        current: DbObject | None = obj
        while current is not None and current.sys_id not in seen:
            if current.name in wanted:
                reached.add(obj.name)
                break
            seen.add(current.sys_id)
            current = by_id.get(current.super_class) if current.super_class else None
    return reached


def select(
    objects: Sequence[DbObject], rules: DiscoverRules, explicit: Iterable[str] = ()
) -> Selection:
    """The tables ``rules`` select, sorted by name, leaving out the ``explicit`` names (they keep
    their own settings) and setting aside names that are not valid aliases."""
    taken = set(explicit)
    family = _extends(objects, rules.extends) if rules.extends else None
    chosen: set[str] = set()
    for obj in objects:
        name = obj.name
        if obj.is_view and not rules.views:
            continue
        if family is not None and name not in family:
            continue
        if not any(fnmatchcase(name, pattern) for pattern in rules.include):
            continue
        if any(fnmatchcase(name, pattern) for pattern in rules.exclude):
            continue
        if name not in taken:
            chosen.add(name)
    ordered = sorted(chosen)
    return Selection(
        tables=tuple(n for n in ordered if _ALIAS_RE.match(n)),
        invalid=tuple(n for n in ordered if not _ALIAS_RE.match(n)),
    )


def diff(before: Iterable[str], after: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(added, removed)`` between two discovered sets, each sorted."""
    old, new = set(before), set(after)
    return sorted(new - old), sorted(old - new)


def unreadable(*, status: int, rows: int, next_link: bool, total_count: int | None) -> str | None:
    """Why a table's first page says the integration user cannot read it, or None.

    403: a table ACL refuses it. An empty page with no ``next`` link while ``X-Total-Count``
    says rows exist: every row is hidden by row ACLs (ACLs apply after the limit, so an empty
    page *with* a ``next`` link may still lead to readable rows, SPEC §15.2).
    """
    if status == 403:
        return "403 Forbidden: the integration user may not read this table"
    if status == 200 and rows == 0 and not next_link and total_count:
        return (
            f"every row hidden by ACL: the first page is empty while X-Total-Count says "
            f"{total_count} rows exist"
        )
    return None


def discovery_owner(name: str, tasks_max: int) -> int:
    """The static task that runs a discovered table: a stable hash of its name, so one table's
    appearing or going never moves another (``core.assignment`` spreads a fixed list)."""
    return zlib.crc32(name.encode()) % tasks_max
