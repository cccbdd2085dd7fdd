"""KIP-875 offsets management: ``GET``, ``PATCH`` and ``DELETE /connectors/{name}/offsets``.

GET reads the offsets topic at that moment. PATCH and DELETE need the connector STOPPED (Connect's
400 otherwise); every submitted pair is validated exactly as the daemon validates a stored offset
before anything is written, and with ``tasks.max`` > 1 a process touches only its own tables.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
import structlog
from aiohttp import web

from snowsource.api.context import ApiContext
from snowsource.api.errors import (
    ALTERED_MESSAGE,
    MUST_BE_STOPPED_MESSAGE,
    NEED_OFFSETS_MESSAGE,
    RESET_MESSAGE,
    UNSUPPORTED_MEDIA_MESSAGE,
    RestError,
    json_response,
)
from snowsource.api.middleware import read_json_body
from snowsource.api.views import offset_dict
from snowsource.core.errors import OffsetError
from snowsource.core.offsets_codec import SourcePartition, StoredEntry, encode_value
from snowsource.core.offsets_plan import (
    OffsetChange,
    connect_listing,
    parse_offsets_document,
    validate_changes,
)
from snowsource.engine.facade import ConnectorState, OffsetsAdmin

__all__ = ["OffsetsHandlers"]

log = structlog.get_logger("snowsource.api.offsets")


def _by_table(item: Mapping[str, object]) -> tuple[str, bytes]:
    partition = item.get("partition")
    table = partition.get("table") if isinstance(partition, Mapping) else None
    return (str(table or ""), orjson.dumps(partition, option=orjson.OPT_SORT_KEYS))


class OffsetsHandlers:
    """The three offsets calls of one connector."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx

    async def get(self, request: web.Request) -> web.Response:
        """``GET offsets``: every stored partition of the connector, sorted by table."""
        ctx = self._ctx
        ctx.connector(request)
        own = ctx.daemon.offsets
        listing = connect_listing(
            ctx.name,
            # Read from the topic now, like Connect's GET.
            await ctx.daemon.read_offsets(),
            ctx.all_specs,
            # Partitions this process reset and has not read since: Connect lists them too.
            deleted=own.deleted_since_load() if own is not None else (),
        )
        # Connect lists partitions in hash order; by table (then the rest of the partition)
        # two calls diff cleanly.
        listing["offsets"].sort(key=_by_table)
        return json_response(listing)

    async def patch(self, request: web.Request) -> web.Response:
        """``PATCH offsets``: validated, then written under the canonical keys."""
        if request.content_type != "application/json":
            raise RestError(415, UNSUPPORTED_MEDIA_MESSAGE)
        document = await read_json_body(request)
        if not isinstance(document, Mapping) or not document.get("offsets"):
            raise RestError(400, NEED_OFFSETS_MESSAGE)
        ctx = self._ctx
        ctx.connector(request)
        await ctx.started()
        async with ctx.lock:
            self._require_stopped()
            changes = self._validated(document)
            store = self._store()
            await store.load()
            entries = store.entries()
            for change in changes:
                await self._apply(store, change, entries)
        log.info(
            "offsets altered through REST",
            changes=[
                {
                    "alias": c.alias,
                    "partition": c.partition.as_dict(),
                    "offset": offset_dict(c.offset),
                }
                for c in changes
            ],
        )
        return json_response({"message": ALTERED_MESSAGE})

    async def delete(self, request: web.Request) -> web.Response:
        """``DELETE offsets``: tombstones for every partition this task may reset."""
        ctx = self._ctx
        ctx.connector(request)
        await ctx.started()
        async with ctx.lock:
            self._require_stopped()
            store = self._store()
            await store.load()
            removed = 0
            for entry in store.entries():
                if self._may_reset(entry.partition):
                    # The exact stored bytes: a foreign key spelling is removed too.
                    await store.write_raw(entry.key, None)
                    removed += 1
        log.info("offsets reset through REST", partitions=removed)
        return json_response({"message": RESET_MESSAGE})

    def _store(self) -> OffsetsAdmin:
        store = self._ctx.daemon.offsets
        if store is None:
            raise RestError(503, "the offsets store is not open yet")
        return store

    def _require_stopped(self) -> None:
        ctx = self._ctx
        ctx.require_open()
        if ctx.daemon.state != ConnectorState.STOPPED:
            raise RestError(400, MUST_BE_STOPPED_MESSAGE.format(name=ctx.name))
        busy = ctx.daemon.busy_workers()
        if busy:
            # The connector is stopped only once every member is: another member would
            # overwrite the change with its next commit.
            raise RestError(
                400,
                MUST_BE_STOPPED_MESSAGE.format(name=ctx.name)
                + " Other members of the group still run tables: "
                + ", ".join(busy)
                + "; PUT /connectors/"
                + f"{ctx.name}/stop on each of them first.",
            )

    def _validated(self, document: Mapping[str, object]) -> list[OffsetChange]:
        """Every submitted pair checked like the daemon checks offsets, and owned by this
        task; one 400 names every problem and nothing is written."""
        ctx = self._ctx
        try:
            changes = validate_changes(parse_offsets_document(document), ctx.all_specs)
        except OffsetError as exc:
            raise RestError(400, str(exc)) from None
        s = ctx.options
        problems = []
        for i, change in enumerate(changes):
            owner = self._owner_of(change.partition)
            if owner is not None and owner != s.task_id:
                alias = change.alias or self._alias_of(change.partition)
                problems.append(
                    f"offsets[{i}]: the partition of table alias {alias!r} belongs to task "
                    f"{owner} (tasks.max={s.tasks_max}), not to this process's task "
                    f"{s.task_id}; send the request to task {owner}'s REST API"
                )
        if problems:
            raise RestError(400, "\n".join(problems))
        return changes

    async def _apply(
        self, store: OffsetsAdmin, change: OffsetChange, entries: list[StoredEntry]
    ) -> None:
        """Write one change under the canonical key; other spellings of it are deleted, since
        the daemon would fall back to them once the canonical key is gone."""
        canonical = change.key(self._ctx.name)
        await store.write(change.partition, encode_value(change.offset))
        doomed = {change.partition}
        if change.offset is None:
            # Deleting a table's offset means "replay from start.timestamp": the Java
            # connector's (legacy) offset of that table must go too, or the daemon's migration
            # fallback would adopt it instead (the offsets script's `delete` does the same).
            doomed |= {
                spec.legacy_partition
                for spec in self._ctx.all_specs
                if spec.partition == change.partition
            }
        for entry in entries:
            if entry.key != canonical and SourcePartition.from_mapping(entry.partition) in doomed:
                await store.write_raw(entry.key, None)

    def _owner_of(self, partition: SourcePartition | None) -> int | None:
        """The task owning a configured table's partition (or its legacy one), else None."""
        alias = self._alias_of(partition)
        return self._ctx.owners[alias] if alias is not None else None

    def _alias_of(self, partition: SourcePartition | None) -> str | None:
        if partition is None:
            return None
        for spec in self._ctx.all_specs:
            if partition in (spec.partition, spec.legacy_partition):
                return spec.alias
        return None

    def _may_reset(self, partition: Mapping[str, object]) -> bool:
        """DELETE touches this task's tables; partitions no configured table uses (orphaned,
        stale, foreign) belong to task 0, so a DELETE on every task resets everything."""
        settings = self._ctx.options
        if settings.tasks_max == 1:
            return True
        owner = self._owner_of(SourcePartition.from_mapping(partition))
        return (owner if owner is not None else 0) == settings.task_id
