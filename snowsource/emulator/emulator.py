"""The emulated ServiceNow instance: data, users, access rules, faults and the Python test API.

This is the object tests hold (``docs/dev/emulator-api.md``). It owns the state; the HTTP layer
(``tableapi``, ``app``) only reads it through the query methods at the bottom, and imports this
module, never the reverse: :func:`snowsource.emulator.make_app` builds the application for an
emulator. All writes go
through :meth:`Emulator.insert`, :meth:`Emulator.update` and :meth:`Emulator.delete`, which stamp
the system fields from the emulator clock; those live in :mod:`snowsource.emulator.mutations`
and the table/row/field ACLs in :mod:`snowsource.emulator.access`, both mixed into
:class:`Emulator`, so every method is still called on the emulator itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from snowsource.emulator import seeding
from snowsource.emulator.access import AccessRules, RowPredicate
from snowsource.emulator.auth import Auth, OAuthClient, User
from snowsource.emulator.clock import Clock
from snowsource.emulator.completeness import (
    AUDITED_TABLES_PROPERTY,
    DEFAULT_AUDITED_TABLES,
    CompletenessData,
    dictionary_attributes,
)
from snowsource.emulator.encoded_query import FieldType
from snowsource.emulator.faults import Faults
from snowsource.emulator.instance import InstanceModel
from snowsource.emulator.journal import Journal, Request
from snowsource.emulator.mutations import RowWrites
from snowsource.emulator.ratelimit import RateLimiter, RateLimitRule
from snowsource.emulator.schema import FIELD_TYPES, Field, TableDef, builtin_tables
from snowsource.emulator.store import Store
from snowsource.emulator.views import ViewDef, make_view, view_rows

DEFAULT_DATE_FORMAT = "yyyy-MM-dd"
DEFAULT_TIME_FORMAT = "HH:mm:ss"


@dataclasses.dataclass(frozen=True)
class UserPrefs:
    """A caller's display preferences, read from its ``sys_user`` row."""

    tz: ZoneInfo
    date_format: str
    time_format: str


class Emulator(RowWrites, AccessRules, CompletenessData):
    """An in-memory ServiceNow instance serving the Table API (see ``docs/dev/emulator-api.md``).

    ``user=""`` turns authentication off (requests then act as an ``admin`` user with the given
    time zone). The default user is an admin with roles ``("admin",)`` in domain ``global``,
    time zone ``user_tz`` and formats ``user_date_format``/``user_time_format``, chosen so a
    display value visibly differs from the stored UTC value.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        now: datetime | None = None,
        user: str = "admin",
        password: str = "admin",  # noqa: S107 - the documented demo default (SPEC §11)
        user_tz: str = "America/Los_Angeles",
        user_date_format: str = "MM/dd/yyyy",
        user_time_format: str = "hh:mm:ss a",
        system_tz: str = "America/Los_Angeles",
    ) -> None:
        self.clock = Clock(now)
        self._seed = seed
        self._rng = random.Random(seed)
        self.tables: dict[str, TableDef] = {}
        self.views: dict[str, ViewDef] = {}
        self.store = Store()
        self.auth = Auth()
        self.auth.enabled = bool(user)
        self.faults = Faults()
        self.journal = Journal()
        self.rate_limiter = RateLimiter()
        self.instance = InstanceModel()  # sessions, nodes, semaphores: off until configure()
        self.system_tz = ZoneInfo(system_tz)
        self._instance_settings()
        self._bookkeeping()
        for table in builtin_tables().values():
            self._register(table)
        self._write_schema_rows(self.tables.values())
        self.set_property(AUDITED_TABLES_PROPERTY, DEFAULT_AUDITED_TABLES)
        self.default_user = self.add_user(
            user or "admin",
            password,
            tz=user_tz,
            roles=("admin",),
            admin=True,
            date_format=user_date_format,
            time_format=user_time_format,
        )

    def _instance_settings(self) -> None:
        """How this instance answers, as a real one's system properties would say."""
        #: glide.invalid_query.returns_no_rows
        self.invalid_query_returns_no_rows = False
        #: page cost (rows * (len(sysparm_fields) or 1) * (2 with display values)) above which a
        #: list request fails with 500 "Transaction cancelled: maximum execution time exceeded".
        self.max_page_cost: int | None = None
        #: hard cap on sysparm_limit (None: no cap, like a real instance).
        self.max_limit: int | None = None
        self.default_limit = 10000
        #: v1 answers 404 for an empty list; False makes v1 behave like v2 (200 []).
        self.v1_empty_list_404 = True
        #: wall-clock delay added to every request (the CLI's --latency-ms).
        self.latency_ms = 0.0

    def _bookkeeping(self) -> None:
        """The emulator's own state: access rules, numbering, seeding, activity, hooks."""
        self._denied: set[tuple[str, str]] = set()
        self._row_acls: list[tuple[str, str | None, RowPredicate]] = []
        self._field_acls: list[tuple[str, str | None, str]] = []
        self._replica_lag = 0.0
        self._numbers: dict[str, int] = {}
        self._ids: dict[str, list[str]] = {}
        self._templates = {}
        self._request_counter = 0
        self._activity_rate = 0.0
        self._activity_tables: tuple[str, ...] = ()
        self._activity_task: asyncio.Task[None] | None = None
        self._running_apps = 0
        self._request_hooks: list[Callable[[Request], object]] = []

    # --- users and auth -----------------------------------------------------------------------

    def add_user(
        self,
        name: str,
        password: str,
        *,
        tz: str = "Europe/Berlin",
        roles: Iterable[str] = (),
        domains: Iterable[str] = ("global",),
        api_key: str | None = None,
        admin: bool = False,
        date_format: str = DEFAULT_DATE_FORMAT,
        time_format: str = DEFAULT_TIME_FORMAT,
    ) -> User:
        """Add a user (and its ``sys_user`` row holding time zone and formats)."""
        ZoneInfo(tz)  # fail now on a typo rather than on the first display value
        first, _, last = name.partition(".")
        row = self.insert(
            "sys_user",
            {
                "user_name": name,
                "name": f"{first.title()} {last.title()}".strip(),
                "first_name": first.title(),
                "last_name": last.title(),
                "email": f"{name}@example.com",
                "time_zone": tz,
                "date_format": date_format,
                "time_format": time_format,
                "active": "true",
                "locked_out": "false",
            },
            at=self.clock.now() - timedelta(days=400),
            visible_at=self.clock.now() - timedelta(days=400),
        )
        user = User(
            name=name,
            password=password,
            sys_id=row["sys_id"],
            roles=frozenset(roles),
            domains=tuple(domains),
            api_key=api_key,
            admin=admin,
        )
        self.auth.add_user(user)
        return user

    def user(self, name: str) -> User:
        """A registered user by name (KeyError when unknown)."""
        return self.auth.users[name]

    def prefs(self, user: User) -> UserPrefs:
        """The user's time zone and formats, from its ``sys_user`` row (empty = system default)."""
        row = self.store.latest("sys_user", user.sys_id) or {}
        tz_name = row.get("time_zone", "")
        try:
            tz = ZoneInfo(tz_name) if tz_name else self.system_tz
        except (ValueError, KeyError):
            tz = self.system_tz
        return UserPrefs(
            tz=tz,
            date_format=row.get("date_format", "") or DEFAULT_DATE_FORMAT,
            time_format=row.get("time_format", "") or DEFAULT_TIME_FORMAT,
        )

    def add_oauth_client(
        self,
        client_id: str,
        secret: str,
        *,
        user: str | None = None,
        access_lifetime: int = 1800,
        refresh_lifetime: int = 8_640_000,
    ) -> OAuthClient:
        """Register an OAuth client; ``user`` is its identity for the client_credentials grant."""
        client = OAuthClient(client_id, secret, user, access_lifetime, refresh_lifetime)
        self.auth.clients[client_id] = client
        return client

    @property
    def client_credentials_enabled(self) -> bool:
        """glide.oauth.inbound.client.credential.grant_type.enabled (True by default here)."""
        return self.auth.client_credentials_enabled

    @client_credentials_enabled.setter
    def client_credentials_enabled(self, enabled: bool) -> None:
        self.auth.client_credentials_enabled = enabled

    @property
    def auth_enabled(self) -> bool:
        """False when the emulator was created with ``user=""`` (every request is admin)."""
        return self.auth.enabled

    # --- schema -------------------------------------------------------------------------------

    def _register(self, table: TableDef) -> None:
        self.tables[table.name] = table
        self.store.add_table(table)
        self._ids.setdefault(table.name, [])

    def create_table(
        self,
        name: str,
        fields: Mapping[str, str | Field],
        *,
        parent: str | None = None,
        label: str | None = None,
        display_field: str | None = None,
        no_update: bool = False,
        no_audit_delete: bool = False,
        domain_separated: bool = True,
    ) -> TableDef:
        """Create a table. A field spec is a type name, ``"reference:<table>"`` or a Field."""
        if name in self.tables or name in self.views:
            raise ValueError(f"table {name} already exists")
        own: list[Field] = []
        for field_name, spec in fields.items():
            if isinstance(spec, Field):
                own.append(dataclasses.replace(spec, name=field_name))
            elif spec.startswith("reference:"):
                own.append(Field(field_name, "reference", reference=spec.split(":", 1)[1]))
            elif spec in FIELD_TYPES:
                own.append(Field(field_name, spec))  # type: ignore[arg-type]
            else:
                raise ValueError(f"unknown field type {spec!r} for {name}.{field_name}")
        parent_def = self.tables[parent] if parent else None
        table = TableDef(
            name,
            label or name,
            tuple(own),
            parent=parent_def,
            display_field=display_field or (parent_def.display_field if parent_def else "sys_id"),
            no_update=no_update,
            no_audit_delete=no_audit_delete,
            domain_separated=domain_separated,
        )
        self._register(table)
        self._write_schema_rows([table])
        return table

    def create_view(
        self,
        name: str,
        prefixes: Mapping[str, str],
        join: tuple[str, str] | Sequence[tuple[str, str]] | None = None,
        *,
        left_join: bool = True,
        max_records: int | None = None,
    ) -> ViewDef:
        """Create a read-only database view, e.g. ``create_view("incident_sla", {"inc":
        "incident", "sla": "task_sla"}, join=("inc_sys_id", "sla_task"))``.

        Columns are ``<prefix>_<field>``; the first prefix is the base table, each later table
        is left-joined (``left_join=False``: inner) on one ``(column, column)`` pair.
        """
        if name in self.tables or name in self.views:
            raise ValueError(f"table {name} already exists")
        view = make_view(
            name, prefixes, join, self.tables, left_join=left_join, max_records=max_records
        )
        self.views[name] = view
        # A view is a sys_db_object row too, of class sys_db_view (discovery leaves it out
        # unless views: true), and one sys_db_view_table row per joined table, in join order.
        when = self.clock.now() - timedelta(days=1)
        row = self.insert(
            "sys_db_object",
            {"name": name, "label": name, "sys_class_name": "sys_db_view"},
            at=when,
            visible_at=when,
        )
        for position, (prefix, table) in enumerate(view.prefixes, start=1):
            self.insert(
                "sys_db_view_table",
                {
                    "view": row["sys_id"],
                    "table": table,
                    "variable_prefix": prefix,
                    "order": str(100 * position),
                    "left_join": "true" if left_join and position > 1 else "false",
                },
                at=when,
                visible_at=when,
            )
        return view

    def table_def(self, name: str) -> TableDef | None:
        """The definition of a table or view."""
        view = self.views.get(name)
        return view.table if view is not None else self.tables.get(name)

    def field_type(self, table: str) -> Callable[[str], FieldType | None]:
        """The ``field_type`` callable the query parser needs (dot-walks resolved)."""
        tdef = self.table_def(table)

        def lookup(name: str) -> FieldType | None:
            current = tdef
            found: Field | None = None
            for part in name.split("."):
                if current is None:
                    return None
                found = current.fields.get(part)
                if found is None:
                    return None
                current = self.tables.get(found.reference) if found.reference else None
            return found.type if found is not None else None

        return lookup

    def _write_schema_rows(self, tables: Iterable[TableDef]) -> None:
        """``sys_db_object``/``sys_dictionary`` rows (inherited columns live on the parent)."""
        when = self.clock.now() - timedelta(days=365)
        for table in tables:
            parent_id = ""
            if table.parent is not None:
                parent_rows = [
                    r
                    for r in self.store.latest_rows("sys_db_object")
                    if r["name"] == table.parent.name
                ]
                parent_id = parent_rows[0]["sys_id"] if parent_rows else ""
            self.insert(
                "sys_db_object",
                {
                    "name": table.name,
                    "label": table.label,
                    "super_class": parent_id,
                    "is_extendable": "true",
                },
                at=when,
                visible_at=when,
            )
            own = table.own_fields if table.parent is not None else tuple(table.fields.values())
            # The first row of a table is its "collection" entry (no element), as on an instance.
            entries = [("", table.label, "collection", "", 40)]
            entries += [
                (f.name, f.label or f.name, f.dictionary_type, f.reference or "", f.max_length)
                for f in own
            ]
            for element, label, internal_type, reference, max_length in entries:
                self.insert(
                    "sys_dictionary",
                    {
                        "name": table.name,
                        "element": element,
                        "column_label": label,
                        "internal_type": internal_type,
                        "reference": reference,
                        "max_length": str(max_length),
                        "active": "true",
                        "attributes": dictionary_attributes(table.no_audit_delete and not element),
                    },
                    at=when,
                    visible_at=when,
                )

    # --- seeding and activity -----------------------------------------------------------------

    def seed(
        self, tables: Sequence[str] = ("incident", "change_request", "cmdb_ci"), rows: int = 100
    ) -> None:
        """Create ``rows`` realistic rows per table, stamped over the past ~30 days.

        Deterministic for the emulator's ``seed`` and clock. Seedable: incident,
        change_request, cmdb_ci (some rows land in the child class cmdb_ci_server), task_sla
        (for seeded incidents) and sys_user.
        """
        seeding.seed(self, tuple(tables), rows, self._rng)
        self._activity_tables = (
            tuple(t for t in tables if t in ("incident", "change_request", "cmdb_ci"))
            or self._activity_tables
        )

    def burst(
        self,
        table: str,
        n: int,
        *,
        at: datetime | None = None,
        values: Mapping[str, object] | None = None,
        visible_at: datetime | None = None,
    ) -> list[dict[str, str]]:
        """``n`` inserts stamped in the same second ``at`` (realistic values unless given)."""
        when = at or self.clock.now()
        return seeding.burst(
            self, table, n, self._rng, at=when, values=values, visible_at=visible_at
        )

    def start_activity(self, rows_per_s: float, tables: Sequence[str] | None = None) -> None:
        """Insert/update/delete about ``rows_per_s`` rows a second, with same-second bursts.

        The task runs while an app made by :func:`snowsource.emulator.make_app` is running (it
        starts at once if one is) and is cancelled when the app closes.
        """
        self._activity_rate = rows_per_s
        if tables is not None:
            self._activity_tables = tuple(tables)
        if not self._activity_tables:
            self._activity_tables = ("incident",)
        if self._running_apps:
            self._restart_activity()

    @property
    def activity_running(self) -> bool:
        """Whether the background activity task is currently running."""
        return self._activity_task is not None and not self._activity_task.done()

    async def stop_activity(self) -> None:
        """Stop the activity task (idempotent)."""
        self._activity_rate = 0.0
        await self._cancel_activity()

    def _restart_activity(self) -> None:
        if self._activity_task is not None:
            self._activity_task.cancel()
            self._activity_task = None
        if self._activity_rate > 0:
            rng = random.Random(f"{self._seed}:activity")
            self._activity_task = asyncio.get_running_loop().create_task(
                seeding.run_activity(self, self._activity_rate, self._activity_tables, rng),
                name="emulator:activity",
            )

    async def _cancel_activity(self) -> None:
        task, self._activity_task = self._activity_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def app_started(self) -> None:
        """Called by the app on startup: starts pending background activity."""
        self._running_apps += 1
        if self._running_apps == 1 and self._activity_task is None:
            self._restart_activity()

    async def app_stopped(self) -> None:
        """Called by the app on cleanup: the last app to stop cancels the activity."""
        self._running_apps = max(0, self._running_apps - 1)
        if self._running_apps == 0:
            await self._cancel_activity()

    # --- domains, replica lag, rate limits and request hooks ----------------------------------

    def set_domains(self, user: str, domains: Iterable[str]) -> None:
        """The domains ``user`` is configured for (``("global",)`` sees everything)."""
        self.auth.users[user].domains = tuple(domains)

    def replica_lag(self, seconds: float) -> None:
        """Reads with ``sysparm_query_category`` see the data as it was ``seconds`` ago.

        Set it before the writes it should apply to: older versions are kept only that long.
        """
        self._replica_lag = max(0.0, seconds)
        self.store.retention = max(60.0, self._replica_lag + 60.0)

    @property
    def replica_lag_seconds(self) -> float:
        """The current replica lag."""
        return self._replica_lag

    def rate_limit(
        self,
        limit_per_hour: int,
        *,
        user: str | None = None,
        role: str | None = None,
        table: str | None = None,
    ) -> str:
        """Add a rate-limit rule (per user, per role, or everyone); returns the rule's sys_id."""
        rule = RateLimitRule(self.new_sys_id(), limit_per_hour, user, role, table)
        self.rate_limiter.add(rule)
        return rule.sys_id

    def on_request(self, hook: Callable[[Request], object]) -> None:
        """Call ``hook(entry)`` for every authenticated Table API request before it is answered.

        ``entry`` is the request's journal entry. Writes made by the hook are visible to that
        request: this is how a test mutates data between two page requests (there is no
        snapshot isolation across pages).
        """
        self._request_hooks.append(hook)

    def run_request_hooks(self, entry: Request) -> None:
        """Run the ``on_request`` hooks (called by the app)."""
        for hook in list(self._request_hooks):
            hook(entry)

    # --- reads for the HTTP layer --------------------------------------------------------------

    def next_request_seed(self) -> str:
        """A per-request seed for the deliberate shuffle of unordered results."""
        self._request_counter += 1
        return f"{self._seed}:{self._request_counter}"

    def read_at(
        self, table: str, at: float, user: User, *, all_domains: bool
    ) -> list[Mapping[str, str]]:
        """Rows of a table or view visible at ``at`` to ``user`` (domain rule applied)."""
        check = None if all_domains or user.sees_all_domains else user.sees_domain

        def read(name: str) -> Iterable[Mapping[str, str]]:
            rows = self.store.read(name, at)
            if check is None:
                return rows
            return (r for r in rows if check(r.get("sys_domain", "")))

        view = self.views.get(table)
        if view is not None:
            return list(view_rows(view, read, self.tables))
        return list(read(table))

    def read_ordered_at(
        self,
        table: str,
        ts_field: str,
        at: float,
        user: User,
        *,
        all_domains: bool,
        low: tuple[str, ...] | None,
    ) -> Iterator[Mapping[str, str]]:
        """:meth:`read_at` of a concrete table in ``(ts, sys_id)`` order, from key ``low`` on."""
        rows = self.store.read_ordered(table, ts_field, at, low)
        if all_domains or user.sees_all_domains:
            return rows
        check = user.sees_domain
        return (r for r in rows if check(r.get("sys_domain", "")))
