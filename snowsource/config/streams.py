"""Which derived streams a table may have (``deletes``, ``journal``): the rules, in one place."""

from __future__ import annotations

from snowsource.config.fields import Deletes


def derived_stream_problems(
    *, id_field: str, deletes: Deletes, journal: bool, journal_topic: str | None
) -> list[tuple[str, str]]:
    """``(key, message)`` for every derived stream the table cannot have as configured."""
    found: list[tuple[str, str]] = []
    if journal_topic is not None and not journal:
        found.append(
            (
                "journal.topic",
                "is set but journal is false: set journal: true to stream the table's comments "
                "and work notes, or remove journal.topic",
            )
        )
    if id_field == "sys_id":
        return found
    # sys_audit_delete records deletions of tables; a view's rows are never deleted as such,
    # its documentkey would not be the view's prefixed id, a key sweep pages sys_id and journal
    # rows point at a record's sys_id.
    view = f"a table read through a database view (id.field is {id_field!r}, not 'sys_id')"
    if deletes is not Deletes.NONE:
        found.append(
            (
                "deletes",
                f"{deletes.value} is not possible for {view}: use deletes: none, or add an "
                "alias for the base table itself with the deletes mode you want",
            )
        )
    if journal:
        found.append(
            (
                "journal",
                f"true is not possible for {view}: use journal: false, or add an alias for the "
                "base table itself with journal: true",
            )
        )
    return found
