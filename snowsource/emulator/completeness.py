"""What an instance says about completeness (checklist (a), release 3): journals, delete auditing.

Mixed into :class:`~snowsource.emulator.emulator.Emulator`:

- ``sys_journal_field`` rows (comments and work notes, insert-only) and the journal ACL switch:
  a user without the journal read ACL gets ``200`` with an empty result, as on an instance;
- ``sys_properties`` rows, ``glide.ui.audit_deleted_tables`` among them;
- the ``no_audit_delete=true`` dictionary attribute of a table (its collection row's
  ``attributes``), which also stops its deletions from reaching ``sys_audit_delete``.

The Aggregate API that counts rows lives in :mod:`snowsource.emulator.aggregate`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Final

from snowsource.emulator.access import RowPredicate
from snowsource.emulator.schema import TableDef

JOURNAL_TABLE: Final = "sys_journal_field"
JOURNAL_ELEMENTS: Final = ("comments", "work_notes")
AUDITED_TABLES_PROPERTY: Final = "glide.ui.audit_deleted_tables"
# The property's out-of-box value: the sys_* tables whose deletions are recorded.
DEFAULT_AUDITED_TABLES: Final = (
    "sys_user,sys_user_group,sys_user_grmember,sys_user_role,sys_user_has_role,sys_group_has_role"
)
NO_AUDIT_DELETE: Final = "no_audit_delete=true"


def _hide_all(_row: Mapping[str, str]) -> bool:
    return True


class CompletenessData:
    """Journal entries, system properties and delete-audit attributes (state in the store)."""

    tables: dict[str, TableDef]

    if TYPE_CHECKING:  # provided by RowWrites, AccessRules and Emulator, mixed in beside

        def insert(
            self,
            table: str,
            values: Mapping[str, object] | None = None,
            *,
            at: datetime | None = None,
            visible_at: datetime | None = None,
            by: str = "system",
        ) -> dict[str, str]: ...

        def update(
            self,
            table: str,
            sys_id: str,
            values: Mapping[str, object],
            *,
            at: datetime | None = None,
            visible_at: datetime | None = None,
            auto_sys_fields: bool = True,
            by: str = "system",
        ) -> dict[str, str]: ...

        def rows(self, table: str) -> list[dict[str, str]]: ...

        def hide_rows(
            self, table: str, predicate: RowPredicate, *, user: str | None = None
        ) -> None: ...

    def add_journal_entry(
        self,
        table: str,
        sys_id: str,
        value: str,
        *,
        element: str = "comments",
        by: str = "admin",
        at: datetime | None = None,
    ) -> dict[str, str]:
        """A comment or work note on ``table``'s row ``sys_id``, as a ``sys_journal_field`` row."""
        if element not in JOURNAL_ELEMENTS:
            raise ValueError(f"element must be one of {JOURNAL_ELEMENTS}, not {element!r}")
        return self.insert(
            JOURNAL_TABLE,
            {"element_id": sys_id, "name": table, "element": element, "value": value},
            at=at,
            by=by,
        )

    def deny_journal(self, *, user: str | None = None) -> None:
        """The journal ACL switch: ``user`` (None: everyone) reads ``sys_journal_field`` as
        ``200`` with an empty result, the way an instance answers a user lacking the ACL."""
        self.hide_rows(JOURNAL_TABLE, _hide_all, user=user)

    def set_property(self, name: str, value: str) -> dict[str, str]:
        """Set a ``sys_properties`` value (creating the property)."""
        for row in self.rows("sys_properties"):
            if row["name"] == name:
                return self.update("sys_properties", row["sys_id"], {"value": value})
        return self.insert("sys_properties", {"name": name, "value": value, "type": "string"})

    def set_no_audit_delete(self, table: str, flag: bool = True) -> None:
        """Give ``table`` the ``no_audit_delete`` dictionary attribute (or take it away): its
        deletions stop being recorded in ``sys_audit_delete``."""
        self.tables[table] = dataclasses.replace(self.tables[table], no_audit_delete=flag)
        for row in self.rows("sys_dictionary"):
            if row["name"] == table and row["element"] == "":
                self.update(
                    "sys_dictionary", row["sys_id"], {"attributes": dictionary_attributes(flag)}
                )


def dictionary_attributes(no_audit_delete: bool) -> str:
    """The ``attributes`` of a table's collection row in ``sys_dictionary``."""
    return NO_AUDIT_DELETE if no_audit_delete else ""
