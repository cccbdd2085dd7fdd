"""The ServiceNow half of ``snowsource check``: reachable, credentials, each table, time zone.

Lines, in order: ServiceNow reachable (an HTTP answer at all; a refused connection is not a
credentials problem); credentials accepted; per table (all of ``snow.tables``): readable with its
base query, cursor fields visible, and, when the table lists ``fields``, those fields exist, then
what its extra streams need (``check_access``: the audit table, the dictionary); the
integration user's time zone. Field names are compared with a sampled row read without
``sysparm_fields``: every field the integration user can see.
"""

from __future__ import annotations

import asyncio
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.cli.check_access import access_checks, skipped_access
from snowsource.cli.check_completeness import completeness_checks, skipped_completeness
from snowsource.cli.check_discovery import discovery_checks
from snowsource.cli.check_report import CheckResult, Status
from snowsource.config.fields import AuthType, OAuthGrantType
from snowsource.config.models import Settings
from snowsource.config.snow import TableConfig
from snowsource.core.errors import (
    AuthError,
    ConfigError,
    RetriableError,
    ServiceNowError,
)
from snowsource.core.retry import RetryPolicy
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import Page, probe_params, sample_params, user_params
from snowsource.core.timestamps import is_valid_ts
from snowsource.engine.table_specs import stream_specs
from snowsource.engine.wiring import snow_client

__all__ = ["display_offsets", "snow_checks"]

# A check retries a transient ServiceNow answer (429, 5xx, timeout) a few times, not forever,
# with the daemon's policy (full jitter, Retry-After obeyed) but never waiting long.
_SNOW_ATTEMPTS: Final = 3
_SNOW_MAX_WAIT: Final = 10.0
_SNOW_RETRY: Final = RetryPolicy(0.5, _SNOW_MAX_WAIT)
_TIMESTAMP_FORMAT: Final = "%Y-%m-%d %H:%M:%S"

# Zone names that are UTC all year round (a zone like Europe/London is not: it has summer time).
_UTC_ZONES: Final = frozenset(
    {
        "utc",
        "etc/utc",
        "gmt",
        "etc/gmt",
        "etc/gmt0",
        "etc/gmt+0",
        "etc/gmt-0",
        "gmt0",
        "gmt+0",
        "gmt-0",
        "universal",
        "etc/universal",
        "zulu",
        "etc/zulu",
        "uct",
        "etc/uct",
        "greenwich",
        "etc/greenwich",
    }
)

# Date and time formats a ServiceNow user can pick, as strptime patterns: used to read the
# user's UTC offset off a display value when its sys_user record cannot be read.
_DISPLAY_DATE_FORMATS: Final = (
    "%Y-%m-%d",
    "%m/%d/%Y",
    "%d/%m/%Y",
    "%d-%m-%Y",
    "%m-%d-%Y",
    "%d.%m.%Y",
    "%Y/%m/%d",
)
_DISPLAY_TIME_FORMATS: Final = ("%H:%M:%S", "%I:%M:%S %p")

_TZ_EXPLANATION: Final = (
    "Capture is not affected: snowsource reads its cursor fields raw, always in UTC.",
    "Affected: date/time values of tables with display.value true or all (rendered in this "
    "zone and the user's date format), and javascript: date helpers in a table's query "
    "(gs.daysAgo*, gs.beginningOfToday, gs.dateGenerate run in this zone).",
    "To make both unambiguous, set the integration user's Time zone to UTC (its sys_user record).",
)


async def _get(client: ServiceNowClient, table: str, params: dict[str, str]) -> Page:
    """One Table API read, with a few retries for transient answers (429, 5xx, timeouts)."""
    attempt = 0
    while True:
        try:
            return await client.get_page(table, params)
        except RetriableError as exc:
            if attempt + 1 >= _SNOW_ATTEMPTS:
                raise
            wait = _SNOW_RETRY.next_delay(attempt, getattr(exc, "retry_after", None))
            attempt += 1
            await asyncio.sleep(min(wait, _SNOW_MAX_WAIT))


def _login_name(settings: Settings) -> str | None:
    """The user name snowsource logs in as, when the configuration says it."""
    auth = settings.snow.auth
    if auth.type is AuthType.BASIC or (
        auth.type is AuthType.OAUTH2 and auth.oauth_grant_type is OAuthGrantType.PASSWORD
    ):
        return auth.username
    return None


def _auth_description(settings: Settings) -> str:
    auth = settings.snow.auth
    if auth.type is AuthType.BASIC:
        return f"basic auth as {auth.username!r}"
    if auth.type is AuthType.OAUTH2:
        who = f" as {auth.username!r}" if auth.oauth_grant_type is OAuthGrantType.PASSWORD else ""
        return (
            f"OAuth2 {auth.oauth_grant_type.value} grant, client id {auth.oauth_client_id!r}{who}"
        )
    return "API key (x-sn-apikey)"


def _failure(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# The adapter words every 400 for the daemon's log; a check that knows better replaces the advice.
_BAD_REQUEST: Final = re.compile(r"HTTP 400(?::\s*(?P<said>.*?))?: bad request \(")


def _server_said(exc: ServiceNowError) -> str:
    """What the instance itself answered, without the general advice the client adds."""
    found = _BAD_REQUEST.search(str(exc))
    if found is None:
        return _failure(exc)
    return found.group("said") or "no error message"


@dataclass
class _TableProbe:
    """What the checks of one table found; ``row`` is a sample row, if any."""

    results: list[CheckResult]
    row: dict[str, Any] | None = None


async def snow_checks(settings: Settings) -> list[CheckResult]:
    """Every ServiceNow line of the report, in order."""
    client = snow_client(settings)
    try:
        async with client:
            results = await _snow_checks_with(client, settings)
            if results[-1].name == _TIME_ZONE:  # every check ran: what the pool saw, last
                results.append(_sessions_result(client))
            return results
    except ConfigError as exc:  # an unusable CA bundle is only found when the client starts
        return [
            CheckResult(_REACHABLE, Status.FAIL, str(exc).replace("\n", " ")),
            *_skipped(settings, "the HTTP client could not start", credentials=True),
        ]


_REACHABLE: Final = "ServiceNow reachable"
_CREDENTIALS: Final = "ServiceNow credentials accepted"
_TIME_ZONE: Final = "integration user's time zone"


def _skipped(settings: Settings, why: str, *, credentials: bool = False) -> list[CheckResult]:
    out: list[CheckResult] = []
    if credentials:
        out.append(CheckResult(_CREDENTIALS, Status.SKIP, why))
    for alias, table in settings.tables.items():
        out.append(CheckResult(f"table {alias} readable", Status.SKIP, why))
        out.append(CheckResult(f"table {alias} cursor fields visible", Status.SKIP, why))
        if table.fields:
            out.append(CheckResult(f"table {alias} fields exist", Status.SKIP, why))
        out += skipped_access(alias, table, why)
        out += skipped_completeness(alias, table, why)
    out.append(CheckResult(_TIME_ZONE, Status.SKIP, why))
    return out


async def _snow_checks_with(client: ServiceNowClient, settings: Settings) -> list[CheckResult]:
    # Each table's streams as the daemon resolves them: the table's, then its delete stream's.
    streams = [stream_specs(settings, alias, table) for alias, table in settings.tables.items()]
    login = _login_name(settings)
    user_row: dict[str, Any] | None = None
    user_note = ""
    url = settings.snow.url
    reachable = CheckResult(_REACHABLE, Status.PASS, url)
    try:
        if login is not None:
            page = await _get(client, "sys_user", user_params(login))
            user_row = page.rows[0] if page.rows else None
        elif streams:
            first = streams[0][0]
            await _get(client, first.name, probe_params(first))
        else:  # only discovered tables: the catalog discovery reads
            await _get(client, "sys_db_object", {"sysparm_limit": "1"})
    except AuthError as exc:
        return [
            reachable,
            CheckResult(_CREDENTIALS, Status.FAIL, _failure(exc)),
            *_skipped(settings, "ServiceNow refused the credentials"),
        ]
    except RetriableError as exc:
        if exc.status is None:  # no HTTP answer at all: connection, DNS, TLS or a timeout
            failed = CheckResult(
                _REACHABLE,
                Status.FAIL,
                _failure(exc),
                (
                    "check snow.url (scheme, host, port), snow.http.proxy.url, and that this "
                    "machine can reach the instance",
                ),
            )
            return [failed, *_skipped(settings, "ServiceNow is not reachable", credentials=True)]
        return [
            CheckResult(_REACHABLE, Status.FAIL, f"the instance answered, but not usably: {exc}"),
            *_skipped(settings, "ServiceNow did not answer usably", credentials=True),
        ]
    except ServiceNowError as exc:
        # 403/404/400 come after authentication: the user is known, it just may not read this.
        user_note = f"its sys_user record is not readable ({exc.status or 'error'})"
    results = [reachable, CheckResult(_CREDENTIALS, Status.PASS, _auth_description(settings))]
    lines, probes = await _table_lines(client, settings, streams)
    results += lines
    results += await discovery_checks(client, settings)
    tables = [specs[0] for specs in streams]
    results.append(
        await _time_zone(
            client, tables, login=login, user_row=user_row, user_note=user_note, probes=probes
        )
    )
    return results


async def _table_lines(
    client: ServiceNowClient, settings: Settings, streams: list[list[TableSpec]]
) -> tuple[list[CheckResult], list[_TableProbe]]:
    """Each table's own lines followed by its extra streams' (``check_access``), in order."""
    probes = await asyncio.gather(*(_probe_table(client, specs[0]) for specs in streams))
    access = await asyncio.gather(
        *(
            _stream_checks(client, alias, table, specs)
            for (alias, table), specs in zip(settings.tables.items(), streams, strict=True)
        )
    )
    lines: list[CheckResult] = []
    for probe, needs in zip(probes, access, strict=True):
        lines += probe.results + needs
    return lines, list(probes)


async def _stream_checks(
    client: ServiceNowClient, alias: str, table: TableConfig, specs: list[TableSpec]
) -> list[CheckResult]:
    """What the table's derived streams need (access), then whether the instance will tell
    them everything (completeness)."""
    access = await access_checks(client, alias, table, specs)
    return access + await completeness_checks(client, alias, table, specs)


def _sessions_result(client: ServiceNowClient) -> CheckResult:
    """What the session pool saw during the checks: sessions opened, the concurrency limit."""
    pool = client.pool_status()
    name = "ServiceNow sessions"
    if pool is None:  # pragma: no cover - the checks ran on a started client
        return CheckResult(name, Status.SKIP, "the client is closed")
    detail = (
        f"{pool.sessions_opened} session(s) opened by the instance for {pool.sessions_open} "
        f"pool slot(s); concurrency limit {pool.limit} of {pool.max_concurrent_requests} "
        f"(snow.http.max.concurrent.requests), {pool.requests_per_session} request(s) per "
        f"session"
    )
    if pool.limit < pool.max_concurrent_requests:
        return CheckResult(
            name,
            Status.WARN,
            detail,
            (
                "the instance answered 429 without Retry-After: its nodes' API semaphores were "
                "full; lower snow.http.max.concurrent.requests or ask the instance admin about "
                "the API_INT semaphore (docs/operations.md#sessions-nodes-and-semaphores)",
            ),
        )
    return CheckResult(name, Status.PASS, detail)


async def _unreadable(
    client: ServiceNowClient, table: TableSpec, exc: ServiceNowError
) -> CheckResult:
    """Why the first read failed. A 400 that goes away without the query is the query's."""
    alias = table.alias
    name = f"table {alias} readable"
    if exc.status == 400 and table.normalised_query:
        try:
            await _get(client, table.name, probe_params(table, count=True))
        except ServiceNowError:
            pass
        else:
            return CheckResult(
                name,
                Status.FAIL,
                f"the instance refused the query of {table.name} (HTTP 400): {_server_said(exc)}",
                (
                    f"fix snow.tables.{alias}.query: build the filter in {table.name}'s list "
                    "view, then use 'Copy query' on the breadcrumb",
                ),
            )
    return CheckResult(name, Status.FAIL, _failure(exc))


async def _probe_table(client: ServiceNowClient, table: TableSpec) -> _TableProbe:
    alias = table.alias
    readable = f"table {alias} readable"
    cursor = f"table {alias} cursor fields visible"
    query = table.normalised_query
    try:
        page = await _get(client, table.name, probe_params(table, with_query=True, count=True))
    except ServiceNowError as exc:
        skipped = [CheckResult(cursor, Status.SKIP, "the table is not readable")]
        if table.fields:
            skipped.append(CheckResult(f"table {alias} fields exist", Status.SKIP, "not readable"))
        return _TableProbe([await _unreadable(client, table, exc), *skipped])
    what = f"{table.name} with query {query!r}" if query else f"{table.name} (no query)"
    if page.total_count is not None:
        what += f", {page.total_count} row(s) match"
    results = [CheckResult(readable, Status.PASS, what)]
    # One row read without sysparm_fields shows every field the integration user can see.
    sample = await _sample_row(client, table)
    rows = page.rows
    if not rows and query:
        # Nothing matches the query yet: any row of the table shows whether the fields are there.
        try:
            rows = (await _get(client, table.name, probe_params(table, count=True))).rows
        except ServiceNowError:
            rows = []
    if not rows:
        results.append(
            CheckResult(cursor, Status.WARN, "cannot verify: the integration user sees no rows yet")
        )
    else:
        results.append(_cursor_result(cursor, table, rows[0], sample))
    if table.fields:
        results.append(_fields_result(f"table {alias} fields exist", alias, table, sample))
    return _TableProbe(results, rows[0] if rows else None)


async def _sample_row(client: ServiceNowClient, table: TableSpec) -> dict[str, Any] | None:
    try:
        rows = (await _get(client, table.name, sample_params(table))).rows
    except ServiceNowError:
        return None
    return rows[0] if rows else None


def _did_you_mean(field: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(field, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _cursor_result(
    name: str, table: TableSpec, row: dict[str, Any], sample: dict[str, Any] | None
) -> CheckResult:
    problems: list[str] = []
    for key, field in (("id.field", table.id_field), ("timestamp.field", table.timestamp_field)):
        value = row.get(field)
        if field not in row:
            if sample is not None and field not in sample:
                problems.append(
                    f"{key} {field!r}: {table.name} has no such field"
                    f"{_did_you_mean(field, sample)}, or a field ACL hides it from the "
                    f"integration user"
                )
            else:
                problems.append(
                    f"{key} {field!r} is missing from the answer: a field ACL hides it from the "
                    f"integration user, or {table.name} has no such field"
                )
        elif not isinstance(value, str) or not value:
            problems.append(f"{key} {field!r} is empty (got {value!r}): a field ACL may hide it")
        elif field == table.timestamp_field and not is_valid_ts(value):
            problems.append(
                f"{key} {field!r} = {value!r} is not a YYYY-MM-DD HH:MM:SS date/time field"
            )
    if problems:
        return CheckResult(
            name,
            Status.FAIL,
            "; ".join(problems),
            (
                f"set timestamp.field / id.field to fields of {table.name}, or grant the "
                f"integration user read access to {table.name}.{table.timestamp_field} and "
                f"{table.name}.{table.id_field}",
            ),
        )
    return CheckResult(name, Status.PASS, f"{table.timestamp_field}, {table.id_field}")


def _fields_result(
    name: str, alias: str, table: TableSpec, sample: dict[str, Any] | None
) -> CheckResult:
    """``fields`` compared with a sampled row: a typo would silently drop the field from every
    record (the Table API ignores unknown names in ``sysparm_fields``)."""
    if sample is None:
        return CheckResult(name, Status.WARN, "cannot verify: the integration user sees no rows")
    # A dot-walked field (caller_id.name) exists when its reference field does.
    missing = [f for f in table.fields if f.split(".", 1)[0] not in sample]
    if not missing:
        return CheckResult(name, Status.PASS, f"{len(table.fields)} field(s)")
    described = ", ".join(f"{f!r}{_did_you_mean(f, sample)}" for f in missing)
    return CheckResult(
        name,
        Status.WARN,
        f"not fields of {table.name} that the integration user can see: {described}; they "
        f"would be missing from every record",
        (f"fix snow.tables.{alias}.fields, or grant read access to those fields",),
    )


def display_offsets(display: str, value: str) -> set[timedelta]:
    """UTC offsets that turn the raw UTC ``value`` into ``display`` (user-formatted).

    Every date/time format a user may choose is tried; only offsets a time zone can have
    (multiples of 15 minutes, at most 14 hours) are kept. Empty when the display is unreadable.
    """
    try:
        raw = datetime.strptime(value.strip(), _TIMESTAMP_FORMAT)
    except ValueError:
        return set()
    found: set[timedelta] = set()
    for date_format in _DISPLAY_DATE_FORMATS:
        for time_format in _DISPLAY_TIME_FORMATS:
            try:
                shown = datetime.strptime(display.strip(), f"{date_format} {time_format}")
            except ValueError:
                continue
            offset = shown - raw
            if abs(offset) <= timedelta(hours=14) and offset.total_seconds() % 900 == 0:
                found.add(offset)
    return found


def _offset_text(offset: timedelta) -> str:
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


async def _time_zone(
    client: ServiceNowClient,
    tables: list[TableSpec],
    *,
    login: str | None,
    user_row: dict[str, Any] | None,
    user_note: str,
    probes: list[_TableProbe],
) -> CheckResult:
    name = _TIME_ZONE
    who = f"user {login!r}" if login else "the integration user"
    zone = str(user_row.get("time_zone") or "") if user_row else ""
    if zone:
        if zone.strip().lower() in _UTC_ZONES:
            return CheckResult(name, Status.PASS, f"{zone} ({who})")
        return CheckResult(
            name, Status.WARN, f"{who} has time zone {zone}, not UTC", _TZ_EXPLANATION
        )
    # No zone on record (system default) or the record is unreadable: the offset between a raw
    # value and its display value is the session's time zone at that instant.
    for table, probe in zip(tables, probes, strict=True):
        if probe.row is None:
            continue
        try:
            page = await _get(client, table.name, sample_params(table, display=True))
        except ServiceNowError:
            continue
        cell = page.rows[0].get(table.timestamp_field) if page.rows else None
        if not isinstance(cell, dict):
            continue
        display, value = cell.get("display_value"), cell.get("value")
        if not isinstance(display, str) or not isinstance(value, str):
            continue
        offsets = display_offsets(display, value)
        source = f"from display values of {table.alias}"
        if timedelta(0) in offsets:
            return CheckResult(name, Status.PASS, f"UTC ({who}, {source})")
        if offsets:
            text = " or ".join(sorted(_offset_text(o) for o in offsets))
            return CheckResult(
                name,
                Status.WARN,
                f"{who} sees date/time values in {text}, not UTC ({source})",
                _TZ_EXPLANATION,
            )
    why = user_note or (
        "no time zone on its sys_user record (the system default applies)"
        if user_row is not None
        else "no sys_user record to read"
    )
    return CheckResult(
        name,
        Status.WARN,
        f"could not determine the time zone of {who}: {why}, and no display value to compare",
        _TZ_EXPLANATION,
    )
