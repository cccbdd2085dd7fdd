"""The hooks of one generation's streams (``engine.streams``), chosen by what each stream is.

A table's own stream gets :class:`TableHooks` (with its schema versions when its values are
registered, SPEC §15.1); its derived streams get theirs, sharing a :class:`SweepMark` with the
table where they wait for its sweeps (deletes, reconcile); a journal stream of a table whose
values are registered gets the journal's fixed schema.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Final

from snowsource.core.journal import JOURNAL_FIELDS
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.engine.ports import PageSource
from snowsource.engine.schemas import SchemaRegistrar, TableSchemas
from snowsource.engine.streams import (
    DeleteHooks,
    JournalHooks,
    ReconcileHooks,
    StreamHooks,
    SweepMark,
    TableHooks,
)

REGISTERED_FORMATS: Final = ("avro", "json_schema")


def stream_hooks(
    specs: Iterable[TableSpec],
    *,
    client: PageSource,
    retry: RetryPolicy,
    stop: asyncio.Event,
    registrar: SchemaRegistrar | None = None,
) -> dict[str, StreamHooks]:
    """The hooks of one generation's streams by alias; a table and the derived streams that
    wait for its sweeps (deletes, reconcile) share a mark. ``registrar``: the Schema Registry
    of tables whose values are registered (``avro``, ``json_schema``)."""
    specs = list(specs)
    marks = {
        spec.base.alias: SweepMark()
        for spec in specs
        if spec.base is not None and spec.stream in ("deletes", "reconcile")
    }
    hooks: dict[str, StreamHooks] = {}
    for spec in specs:
        if spec.base is not None and spec.stream == "deletes":
            hooks[spec.alias] = DeleteHooks(
                spec, mark=marks[spec.base.alias], client=client, retry=retry, stop=stop
            )
        elif spec.base is not None and spec.stream == "reconcile":
            hooks[spec.alias] = ReconcileHooks(spec, mark=marks[spec.base.alias])
        elif spec.stream == "journal":
            base = spec.base.value_format if spec.base is not None else "string"
            journal_schemas = None
            if base in REGISTERED_FORMATS:
                assert registrar is not None, "schema.registry is required for these formats"
                journal_schemas = TableSchemas(
                    spec, registrar, stop=stop, fixed=JOURNAL_FIELDS, value_format=base
                )
            hooks[spec.alias] = JournalHooks(spec, journal_schemas)
        else:
            schemas = None
            if spec.value_format in REGISTERED_FORMATS:
                assert registrar is not None, "schema.registry is required for these formats"
                schemas = TableSchemas(spec, registrar, stop=stop)
            hooks[spec.alias] = TableHooks(
                spec,
                client=client,
                retry=retry,
                stop=stop,
                mark=marks.get(spec.alias),
                schemas=schemas,
            )
    return hooks
