"""A table's columns as its stream needs them: dictionary types and field governance.

The dictionary (``sys_db_object`` + ``sys_dictionary``, walking ``super_class``) is read when a
generation starts if the table converts values by type (``value.format: typed``) or excludes
sensitive columns (``sensitive.fields: exclude``, the default), and again when a page carries a
column it did not list (asked once per column name). Then every page's rows are governed in
place (``core.governance``) before anything else reads their values: dedup digests, records,
typed conversion and log lines only ever see governed rows.

A typed table cannot run without its dictionary (a refusal FAILs it, as before). A table that
reads it only to find sensitive columns runs without it when it is refused (403, or no
``sys_db_object`` row for the table): it WARNs once that sensitive columns are not verified and
asks no more in this generation. Retriable errors are retried either way, like a page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

import structlog

from snowsource.core.errors import TableError, TableFailedError
from snowsource.core.governance import Action, ColumnRules, governed_columns
from snowsource.core.records import TypedShaper
from snowsource.core.table import TableSpec
from snowsource.engine.dictionary_reader import read_columns
from snowsource.engine.snow_requests import SnowRequests


class TableColumns:
    """The dictionary and governance of one table's generation (its :class:`TableHooks`)."""

    def __init__(
        self,
        spec: TableSpec,
        typed: TypedShaper | None,
        *,
        requests: SnowRequests,
    ) -> None:
        self.spec = spec
        self.rules = ColumnRules(spec.governance)
        self._typed = typed
        self._requests = requests
        self._wanted = typed is not None or spec.governance.sensitive_exclude
        self._dictionary: dict[str, str] = {}
        # Columns seen in rows and looked up already: a column the dictionary does not list
        # (a dot-walked field, a column without a dictionary row) is asked about once.
        self._looked_up: set[str] = set()
        self._unverified = False
        self._log = structlog.get_logger("snowsource.engine.columns").bind(
            table=spec.alias, snow_table=spec.name
        )

    async def start(self) -> None:
        """Read the dictionary when the table needs it (a new generation reads it anew)."""
        if self._wanted:
            self._looked_up.clear()
            await self._read(())

    async def govern(self, rows: Sequence[MutableMapping[str, Any]]) -> set[str] | None:
        """Look up columns never seen before, then govern ``rows`` in place; the columns the
        rows carry when that was worked out on the way (None: not, or governance changed
        them)."""
        columns: set[str] | None = None
        if self._wanted and not self._unverified:
            governance = self.spec.governance
            # The union runs in C: a comprehension over every column of every row of a wide
            # page cost about a microsecond a row (bench/avro.py).
            columns = set().union(*rows)
            unknown = {
                name
                for name in columns - self._dictionary.keys() - self._looked_up
                # An excluded column is excluded whatever its type: no need to ask.
                if not governance.excluded_by_name(name)
            }
            if unknown:
                self._log.info(
                    "unknown columns; reading the table's dictionary again",
                    columns=sorted(unknown),
                )
                await self._read(unknown)
        if self.rules.apply(rows):
            return None  # an excluded column may have left the rows
        return columns

    async def _read(self, seen: Iterable[str]) -> None:
        # Each request of the walk is retried on its own by the stream's request path.
        client = self._requests.getter("the table's dictionary")
        try:
            found = await read_columns(client, self.spec.name, label=self.spec.alias)
        except (TableError, TableFailedError) as exc:
            if self._typed is not None:
                raise
            self._not_verified(exc)
            return
        self._learned(found)
        self._looked_up.update(seen)

    def _learned(self, found: Mapping[str, str]) -> None:
        self._dictionary = dict(found)
        self.rules.learn(found)
        if self._typed is not None:
            # Hashed and masked columns are strings, excluded ones never reach the shaper.
            self._typed.columns.clear()
            self._typed.columns.update(governed_columns(found, self.spec.governance))
        sensitive = sorted(
            name
            for name, action in self.rules.governed(found)
            if action is Action.EXCLUDE and not self.spec.governance.excluded_by_name(name)
        )
        self._log.info("table columns read", columns=len(found), sensitive_excluded=sensitive)

    def _not_verified(self, error: BaseException) -> None:
        self._unverified = True
        self.rules.learn(None)
        self._log.warning(
            "the table's dictionary cannot be read: sensitive columns (password, password2, "
            "glide_encrypted) are not verified and would be sent; grant the integration user "
            "read access to sys_db_object and sys_dictionary, or exclude them by name with "
            "fields.exclude",
            error=str(error),
        )
