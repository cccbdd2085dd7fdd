"""Discovery at run time (SPEC §15.2): page ``sys_db_object``, probe new tables, start and stop.

At start and every ``interval.seconds`` the discoverer pages ``sys_db_object`` (keyset on
``sys_id``) through the process's one ServiceNow client at ``Priority.LOW``, so discovery takes
its turn behind every table page in the session pool and the rate budget. The selection rules
are ``core.discovery``'s. A table new to the selection (or SKIPPED at the last discovery) is
probed once with a one-row page: unreadable, it is SKIPPED until the next discovery; readable,
it is handed to the ``DiscoveryTarget`` (the daemon), which starts it beside the others. A table
no longer selected is stopped; its offsets stay. Nothing else is touched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

import structlog

from snowsource.config.discover import DiscoverConfig
from snowsource.config.fields import TasksAssignment
from snowsource.config.models import Settings
from snowsource.core.db_views import (
    VIEW_TABLE,
    VIEW_TABLE_FIELDS,
    ViewCursor,
    base_tables,
    joined_tables,
    no_base_reason,
    view_cursor,
)
from snowsource.core.discovery import (
    DbObject,
    db_objects,
    diff,
    discovery_owner,
    select,
    unreadable,
)
from snowsource.core.errors import TableError
from snowsource.core.grants import Priority
from snowsource.core.retry import RetryPolicy
from snowsource.core.table_status import TableState, TableStatus
from snowsource.engine.ports import InstanceClient
from snowsource.engine.snow_requests import SnowRequests
from snowsource.observability import metrics
from snowsource.runtime.retrying import StoppedError

__all__ = [
    "Collected",
    "Discoverer",
    "DiscoveryState",
    "DiscoveryTarget",
    "settings_discoverer",
    "static_discoverer",
    "until_discovered",
]

log = structlog.get_logger("snowsource.engine.discovery")

#: sys_db_object rows per page: a whole instance (a few thousand tables) in a handful of pages.
DB_OBJECT_PAGE: Final = 1000
#: Whose turn discovery takes in the session pool (one requester for all of it).
REQUESTER: Final = "discovery"
_FIELDS: Final = ("sys_id", "name", "super_class", "sys_class_name")
_Rows = list[dict[str, object]]


class DiscoveryTarget(Protocol):
    """What the discoverer starts and stops (the daemon)."""

    async def add_discovered(self, names: list[str]) -> None: ...

    async def remove_discovered(self, names: list[str]) -> None: ...


class Collected:
    """A discovery target that starts nothing: it remembers what would start (``check``, the
    demo)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    async def add_discovered(self, names: list[str]) -> None:
        self.names += names

    async def remove_discovered(self, names: list[str]) -> None:
        return None


@dataclass
class DiscoveryState:
    """What the last discovery found, for ``/status``, the console and tests."""

    running: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)
    discoveries: int = 0
    requests: int = 0
    invalid: tuple[str, ...] = ()
    # A selected database view's cursor fields: its base table's, prefixed (core.db_views).
    views: dict[str, ViewCursor] = field(default_factory=dict)


class Discoverer:
    """Runs discovery at start and every interval until ``stop`` is set."""

    def __init__(
        self,
        config: DiscoverConfig,
        *,
        client: Callable[[], InstanceClient | None],
        retry: RetryPolicy,
        target: DiscoveryTarget,
        explicit: Iterable[str],
        owns: Callable[[str], bool] = lambda name: True,
        probe_limit: int = 1000,
        cursor_fields: tuple[str, str] = ("sys_updated_on", "sys_id"),
        view_problem: Callable[[str, ViewCursor], str | None] = lambda name, cursor: None,
    ) -> None:
        self._config = config
        self._client = client
        self._retry = retry
        self._target = target
        self._explicit = frozenset(explicit)
        self._owns = owns
        # The probe asks for a first page as the table would (its batch.size): "no next link"
        # means the same thing then (SPEC §15.2), while only sys_id comes back.
        self._probe_limit = probe_limit
        # The template's cursor fields, prefixed for a view; a view whose settings cannot work
        # (the template's deletes or journal need sys_id) is SKIPPED with ``view_problem``'s
        # reason.
        self._cursor_fields = cursor_fields
        self._view_problem = view_problem
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._asked: set[str] = set()
        self.state = DiscoveryState()
        self.discovered = asyncio.Condition()

    def statuses(self) -> dict[str, TableStatus]:
        """A status per SKIPPED table, by alias (its name)."""
        return {
            name: TableStatus(state=TableState.SKIPPED, last_error=reason)
            for name, reason in self.state.skipped.items()
        }

    def ask(self, name: str) -> None:
        """The group gave this member ``name``, which another member's discovery found: discover
        now (once per name), so that this member reads it as its own discovery says (a view by
        its prefixed cursor fields, and only once its probe said it is readable)."""
        if name not in self._asked:
            self._asked.add(name)
            self.wake()

    def view_cursor(self, name: str) -> ViewCursor | None:
        """The cursor fields of ``name`` when discovery found it is a database view."""
        return self.state.views.get(name)

    def stop(self) -> None:
        """End the loop (shutdown)."""
        self._stop.set()

    def wake(self) -> None:
        """Discover now instead of at the end of the interval (tests, operators)."""
        self._wake.set()

    async def run(self) -> None:
        """Discover now, then every ``interval.seconds`` until stopped."""
        while not self._stop.is_set():
            # Cleared before, not after: a wake during this discovery (a member asking about a
            # table it may have missed) runs the next one at once.
            self._wake.clear()
            try:
                await self.discover_once()
            except StoppedError:
                return
            waits = [asyncio.ensure_future(e.wait()) for e in (self._stop, self._wake)]
            try:
                await asyncio.wait(
                    waits, timeout=self._config.interval_seconds, return_when="FIRST_COMPLETED"
                )
            finally:
                for w in waits:
                    w.cancel()

    async def discover_once(self) -> None:
        """One discovery: page sys_db_object, probe what is new or SKIPPED, start and stop."""
        objects = await self._db_objects()
        if objects is None:
            return  # sys_db_object unreadable: keep every table as it is until the next try
        selection = select(objects, self._config.rules, self._explicit)
        if selection.invalid and selection.invalid != self.state.invalid:
            log.warning(
                "discovered tables whose names cannot be aliases (a-z 0-9 _) are left out; "
                "list them under snow.tables with an alias to stream them",
                tables=list(selection.invalid),
            )
        self.state.invalid = selection.invalid
        wanted = {name for name in selection.tables if self._owns(name)}
        state = self.state
        added, removed = diff(state.running | set(state.skipped), wanted)
        for name in removed:
            state.skipped.pop(name, None)
            metrics.TABLE_STATE.labels(table=name, state="SKIPPED").set(0)
        gone = sorted(state.running - wanted)
        if gone:
            log.info("tables no longer discovered; stopping them (offsets stay)", tables=gone)
            await self._target.remove_discovered(gone)
            state.running -= set(gone)
        unusable = await self._settle_views(objects, wanted)
        probe = sorted((set(added) | (set(state.skipped) & wanted)) - unusable)
        readable = [name for name in probe if await self._readable(name)]
        if readable:
            log.info("discovered tables starting", tables=readable)
            await self._target.add_discovered(readable)
            state.running |= set(readable)
        state.discoveries += 1
        async with self.discovered:
            self.discovered.notify_all()

    async def _db_objects(self) -> list[DbObject] | None:
        """Every sys_db_object row (None: it cannot be read)."""
        rows = await self._all_rows("sys_db_object", _FIELDS)
        if not isinstance(rows, list):
            log.error("discovery cannot read sys_db_object; tables stay as they are", error=rows)
            return None
        return db_objects(rows)

    async def _settle_views(self, objects: list[DbObject], wanted: set[str]) -> set[str]:
        """Give each wanted view not yet running its cursor fields from ``sys_db_view_table``
        (asked only when views are wanted); the views that cannot have them are SKIPPED and
        returned, not probed."""
        views = {o.name: o.sys_id for o in objects if o.is_view and o.name in wanted}
        running = self.state.running
        pending = {name: view_id for name, view_id in views.items() if name not in running}
        for name in set(self.state.views) - set(views):
            del self.state.views[name]  # no longer a wanted view
        if not pending:
            return set()
        rows = await self._all_rows(VIEW_TABLE, VIEW_TABLE_FIELDS)
        # Unreadable, every pending view lacks its base; the reason says why.
        failure = "" if isinstance(rows, list) else f" ({rows})"
        bases = base_tables(joined_tables(rows)) if isinstance(rows, list) else {}
        unusable: set[str] = set()
        for name, view_id in pending.items():
            base = bases.get(view_id)
            cursor = view_cursor(base, *self._cursor_fields) if base is not None else None
            reason = (
                no_base_reason(name) + failure
                if cursor is None
                else self._view_problem(name, cursor)
            )
            self.state.views.pop(name, None)
            if reason is not None:
                self._skip(name, reason)
                unusable.add(name)
            elif cursor is not None:
                self.state.views[name] = cursor
        return unusable

    async def _all_rows(self, table: str, fields: tuple[str, ...]) -> _Rows | str:
        """Every row of a schema table, paged by a keyset on sys_id; or why it cannot be read."""
        found: _Rows = []
        after = ""
        while True:
            query = f"sys_id>{after}^ORDERBYsys_id" if after else "ORDERBYsys_id"
            params = {
                "sysparm_query": query,
                "sysparm_fields": ",".join(fields),
                "sysparm_limit": str(DB_OBJECT_PAGE),
                "sysparm_exclude_reference_link": "true",
                "sysparm_no_count": "true",
                "sysparm_suppress_pagination_header": "true",
            }
            answer = await self._get(table, params)
            if answer is None or answer[1] is not None:
                return f"{table} cannot be read: {answer[1] if answer else 'client closed'}"
            page = answer[0]
            if not page:
                return found
            found.extend(page)
            last = page[-1].get("sys_id")
            if not isinstance(last, str) or not last or last <= after:
                return found
            after = last

    def _skip(self, name: str, reason: str) -> None:
        """``name`` is SKIPPED until the next discovery (WARNed once while it stays so)."""
        if self.state.skipped.get(name) != reason:
            log.warning("discovered table SKIPPED", table=name, reason=reason)
        self.state.skipped[name] = reason
        metrics.set_state(name, "SKIPPED")

    async def _readable(self, name: str) -> bool:
        """Probe ``name`` with its first page (sys_id only); unreadable, it becomes SKIPPED."""
        view = self.state.views.get(name)
        params = {
            "sysparm_limit": str(self._probe_limit),
            # A view has no sys_id: its base table's prefixed one.
            "sysparm_fields": view.id_field if view is not None else "sys_id",
            "sysparm_no_count": "false",
            "sysparm_exclude_reference_link": "true",
        }
        answer = await self._get(name, params)
        if answer is None:
            reason: str | None = "the probe got no answer"
        elif isinstance(answer[1], TableError):
            error = answer[1]
            reason = (
                unreadable(status=403, rows=0, next_link=False, total_count=None)
                if error.status == 403
                else str(error)
            )
        else:
            rows, _, next_link, total = answer
            reason = unreadable(status=200, rows=len(rows), next_link=next_link, total_count=total)
        if reason is None:
            self.state.skipped.pop(name, None)
            return True
        self._skip(name, reason)
        return False

    async def _get(
        self, table: str, params: dict[str, str]
    ) -> tuple[list[dict[str, object]], TableError | None, bool, int | None] | None:
        """One page with the retry policy: ``(rows, None, next, total)``, or ``([], error, ...)``
        for a table error; None when the client is closed."""
        client = self._client()
        if client is None:
            return None
        # The one request path and its retry policy, at the lowest priority (SPEC §15.3).
        requests = SnowRequests(client, alias=REQUESTER, retry=self._retry, stop=self._stop)
        self.state.requests += 1
        try:
            page = await requests.get(table, params, priority=Priority.LOW, asking="discovery")
        except TableError as error:
            return [], error, False, None
        return page.rows, None, page.next_link, page.total_count


async def until_discovered(discoverer: Discoverer, count: int, stop: asyncio.Event) -> bool:
    """Wait until ``count`` discoveries ran (tests); False when ``stop`` came first."""
    async with discoverer.discovered:
        while discoverer.state.discoveries < count:
            if stop.is_set():
                return False
            await discoverer.discovered.wait()
    return True


def static_discoverer(
    settings: Settings,
    *,
    client: Callable[[], InstanceClient | None],
    retry: RetryPolicy,
    target: DiscoveryTarget,
) -> Discoverer:
    """The discoverer of a process: with ``tasks.assignment: static`` its task runs the
    discovered tables whose name hashes to its ``task.id`` (SPEC §10); in group mode it reports
    every one and the group's plan decides (``adapters.group_protocol``)."""
    group = settings.tasks_assignment == TasksAssignment.GROUP

    def owns(name: str) -> bool:
        return group or discovery_owner(name, settings.tasks_max) == settings.task_id

    return settings_discoverer(settings, client=client, retry=retry, target=target, owns=owns)


def settings_discoverer(
    settings: Settings,
    *,
    client: Callable[[], InstanceClient | None],
    retry: RetryPolicy,
    target: DiscoveryTarget,
    owns: Callable[[str], bool] = lambda name: True,
) -> Discoverer:
    """A discoverer for ``settings`` (the daemon's, ``check``'s and ``offsets``'): its rules,
    the explicit tables, and the template's page size and cursor fields."""
    discover = settings.snow.discover
    assert discover is not None
    template = settings.discovered_table("table")
    return Discoverer(
        discover,
        client=client,
        retry=retry,
        target=target,
        explicit=[table.name for table in settings.tables.values()],
        owns=owns,
        probe_limit=template.batch_size,
        cursor_fields=(template.timestamp_field, template.id_field),
        view_problem=settings.discovered_view_problem,
    )
