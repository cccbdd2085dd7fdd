"""The rules between a table's keys: which derived streams it may have (``deletes``,
``journal``), typed values, parallel backfill slices. In one place, outside ``snow.py``."""

from __future__ import annotations

from typing import Protocol

from snowsource.config.fields import Deletes, ValueFormat, ValueSchema


class TableKeys(Protocol):
    """The keys of a table's configuration (``config.snow.TableConfig``) the rules read."""

    @property
    def id_field(self) -> str: ...
    @property
    def deletes(self) -> Deletes: ...
    @property
    def journal(self) -> bool: ...
    @property
    def journal_topic(self) -> str | None: ...
    @property
    def value_format(self) -> ValueFormat: ...
    @property
    def display_value(self) -> str: ...
    @property
    def value_schema(self) -> ValueSchema: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def backfill_slices(self) -> int: ...
    @property
    def backfill_max_ahead_rows(self) -> int: ...


def table_problems(table: TableKeys) -> list[tuple[str, str]]:
    """``(key, message)`` for every combination of the table's keys that cannot work."""
    found = derived_stream_problems(
        id_field=table.id_field,
        deletes=table.deletes,
        journal=table.journal,
        journal_topic=table.journal_topic,
    )
    # display.value: true replaces every raw value by text in the integration user's
    # locale and format ("1,234", "29.09.2026"): typed conversion could only guess.
    if table.value_format is ValueFormat.TYPED and table.display_value == "true":
        found.append(
            (
                "value.format",
                "typed cannot convert display values (display.value is true, so every "
                "value is text in the integration user's format): use display.value: "
                "all (raw values typed, display text kept beside them) or false, or "
                "value.format: string",
            )
        )
    found.extend(_registered_problems(table))
    # Below one page the slices after the first could never fetch: a silent 1-slice backfill.
    if table.backfill_slices > 1 and table.backfill_max_ahead_rows < table.batch_size:
        why = f"must be at least batch.size ({table.batch_size}) with backfill.slices > 1"
        fix = "or no slice but the first could fetch a page: raise it, or set slices to 1"
        found.append(("backfill.max.ahead.rows", f"{why}, {fix}"))
    return found


def _registered_problems(table: TableKeys) -> list[tuple[str, str]]:
    """``value.format: avro | json_schema``: the schema is the registry's, one value per field."""
    if not table.value_format.registered:
        return []
    found: list[tuple[str, str]] = []
    if table.display_value == "all":
        found.append(
            (
                "display.value",
                f"all is not possible with value.format: {table.value_format.value} (a field "
                "holds one value, not a raw and a display pair): use display.value: false "
                "(typed raw values) or true (every field a string)",
            )
        )
    if table.value_schema is ValueSchema.CONNECT:
        found.append(
            (
                "value.schema",
                f"connect is not possible with value.format: {table.value_format.value} (its "
                "schema is in the Schema Registry, not in each value): use value.schema: none",
            )
        )
    return found


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
