"""The hooks of one generation's streams (``engine.streams``), chosen by what each stream is.

A table's own stream gets :class:`TableHooks` (with its schema versions when its values are
registered, SPEC §15.1); its derived streams get theirs, sharing a :class:`SweepMark` with the
table where they wait for its sweeps (deletes, reconcile); a journal stream of a table whose
values are registered gets the journal's fixed schema. Each is given as a factory: its poller
builds it around the stream's request path (``engine.snow_requests``), which the poller owns,
so every request a hook makes is retried and reported there, like the stream's pages.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from typing import Final

from snowsource.core.journal import JOURNAL_FIELDS
from snowsource.core.table import TableSpec
from snowsource.engine.schemas import SchemaRegistrar, TableSchemas
from snowsource.engine.snow_requests import SnowRequests
from snowsource.engine.streams import (
    DeleteHooks,
    JournalHooks,
    ReconcileHooks,
    StreamHooks,
    SweepMark,
    TableHooks,
)

REGISTERED_FORMATS: Final = ("avro", "json_schema")

#: Builds a stream's hooks around the request path its poller owns.
HooksFactory = Callable[[SnowRequests], StreamHooks]


def stream_hooks(
    specs: Iterable[TableSpec],
    *,
    stop: asyncio.Event | None = None,
    registrar: SchemaRegistrar | None = None,
) -> dict[str, HooksFactory]:
    """How to build the hooks of one generation's streams, by alias; a table and the derived
    streams that wait for its sweeps (deletes, reconcile) share a mark. ``registrar``: the
    Schema Registry of tables whose values are registered (``avro``, ``json_schema``), whose
    registrations wait on ``stop``."""
    specs = list(specs)
    marks = {
        spec.base.alias: SweepMark()
        for spec in specs
        if spec.base is not None and spec.stream in ("deletes", "reconcile")
    }
    hooks: dict[str, HooksFactory] = {}
    for spec in specs:
        if spec.base is not None and spec.stream == "deletes":
            hooks[spec.alias] = functools.partial(_delete_hooks, spec, marks[spec.base.alias])
        elif spec.base is not None and spec.stream == "reconcile":
            hooks[spec.alias] = _asks_nothing(ReconcileHooks(spec, mark=marks[spec.base.alias]))
        elif spec.stream == "journal":
            base = spec.base.value_format if spec.base is not None else "string"
            journal_schemas = None
            if base in REGISTERED_FORMATS:
                journal_schemas = TableSchemas(
                    spec,
                    _registrar(registrar),
                    stop=_stop(stop),
                    fixed=JOURNAL_FIELDS,
                    value_format=base,
                )
            hooks[spec.alias] = _asks_nothing(JournalHooks(spec, journal_schemas))
        else:
            schemas = None
            if spec.value_format in REGISTERED_FORMATS:
                schemas = TableSchemas(spec, _registrar(registrar), stop=_stop(stop))
            hooks[spec.alias] = functools.partial(
                _table_hooks, spec, marks.get(spec.alias), schemas
            )
    return hooks


def _registrar(registrar: SchemaRegistrar | None) -> SchemaRegistrar:
    assert registrar is not None, "schema.registry is required for these formats"
    return registrar


def _stop(stop: asyncio.Event | None) -> asyncio.Event:
    assert stop is not None, "registered values wait on the generation's stop"
    return stop


def _asks_nothing(hooks: StreamHooks) -> HooksFactory:
    def built(requests: SnowRequests) -> StreamHooks:
        del requests  # these hooks send no request of their own
        return hooks

    return built


def _delete_hooks(spec: TableSpec, mark: SweepMark, requests: SnowRequests) -> StreamHooks:
    return DeleteHooks(spec, mark=mark, requests=requests)


def _table_hooks(
    spec: TableSpec, mark: SweepMark | None, schemas: TableSchemas | None, requests: SnowRequests
) -> StreamHooks:
    return TableHooks(spec, requests=requests, mark=mark, schemas=schemas)
