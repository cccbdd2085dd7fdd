"""``snowsource check``: validate the configuration, then probe Kafka and ServiceNow (SPEC §1).

One line per check, in a fixed order: config valid; Kafka reachable; offsets topic compacted or
creatable; ServiceNow credentials accepted; for every table (all of ``snow.tables``, whichever
task owns it) readable with its base query and cursor fields visible; the integration user's
time zone. Exit 0 when nothing failed, 1 when a check failed, 2 when the configuration is
invalid — in which case nothing is contacted.

The check writes nothing anywhere: whether the offsets topic could be created is asked with a
CreateTopics dry run (``validate_only``). Kafka is probed for at most
``min(kafka.startup.timeout.seconds, 10)`` seconds so that a wrong address fails fast. The Kafka
and ServiceNow groups run concurrently; their lines are still printed in the order above.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, for_code

from snowsource.adapters.kafka import (
    KafkaConnection,
    broker_defaults,
    describe_topic_configs,
    existing_topics,
)
from snowsource.adapters.servicenow import Page, ServiceNowClient
from snowsource.config.settings import (
    AuthType,
    LoadedConfig,
    OAuthGrantType,
    Settings,
    TableConfig,
    load_config,
)
from snowsource.core.assignment import assign
from snowsource.core.errors import (
    AuthError,
    ConfigError,
    RateLimitedError,
    RetriableError,
    ServiceNowError,
)
from snowsource.core.query import normalise_query
from snowsource.core.tableapi import probe_params
from snowsource.core.timestamps import is_valid_ts
from snowsource.engine.wiring import kafka_connection, snow_auth

__all__ = [
    "KAFKA_PROBE_MAX_SECONDS",
    "CheckResult",
    "Status",
    "exit_code",
    "format_result",
    "kafka_probe_timeout",
    "main",
    "run_checks",
]

KAFKA_PROBE_MAX_SECONDS: Final = 10.0
"""Upper bound of the Kafka probe: ``check`` is interactive, a wrong address must fail fast."""

# A check retries a transient ServiceNow answer (429, 5xx, timeout) a few times, not forever.
_SNOW_ATTEMPTS: Final = 3
_SNOW_MAX_WAIT: Final = 10.0
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


class Status(StrEnum):
    """Outcome of one check. Only FAIL (and SKIP, which follows a FAIL) make the exit code 1."""

    PASS = "PASS"  # noqa: S105 - a status word, not a credential
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class CheckResult:
    """One line of the report, with optional indented explanation lines."""

    name: str
    status: Status
    detail: str = ""
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """Whether this result makes ``check`` exit 1."""
        return self.status in (Status.FAIL, Status.SKIP)


def kafka_probe_timeout(settings: Settings) -> float:
    """How long the check waits for Kafka: ``min(kafka.startup.timeout.seconds, 10)``."""
    return min(settings.kafka.startup_timeout_seconds, KAFKA_PROBE_MAX_SECONDS)


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 when no check failed (warnings allowed), else 1."""
    return 1 if any(result.failed for result in results) else 0


_COLORS: Final = {
    Status.PASS: "\x1b[32m",
    Status.WARN: "\x1b[33m",
    Status.FAIL: "\x1b[31m",
    Status.SKIP: "\x1b[2m",
}


def format_result(result: CheckResult, *, color: bool = False) -> str:
    """``PASS  name: detail`` plus indented notes; ANSI colours on request."""
    word = result.status.value
    if color:
        word = f"{_COLORS[result.status]}{word}\x1b[0m"
    line = f"{word}  {result.name}"
    if result.detail:
        line += f": {result.detail}"
    return "\n".join([line, *(f"      {note}" for note in result.notes)])


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------


def _config_result(loaded: LoadedConfig) -> CheckResult:
    settings = loaded.settings
    aliases = list(settings.tables)
    owners = assign(aliases, settings.tasks_max)
    owned = [alias for alias in aliases if owners[alias] == settings.task_id]
    detail = f"{loaded.path} ({len(aliases)} table(s): {', '.join(aliases)}"
    if settings.tasks_max > 1:
        detail += (
            f"; task.id {settings.task_id} of tasks.max {settings.tasks_max} runs "
            f"{', '.join(owned) or 'none'}"
        )
    detail += ")"
    notes = tuple(f"warning: {warning}" for warning in loaded.warnings)
    return CheckResult("config valid", Status.PASS, detail, notes)


async def run_checks(
    loaded: LoadedConfig, emit: Callable[[CheckResult], None] | None = None
) -> list[CheckResult]:
    """Run every check of a loaded (hence valid) configuration, in report order.

    ``emit`` receives each result as soon as it and all before it are known.
    """
    settings = loaded.settings
    results: list[CheckResult] = []

    def report(items: Iterable[CheckResult]) -> None:
        for item in items:
            results.append(item)
            if emit is not None:
                emit(item)

    report([_config_result(loaded)])
    kafka = asyncio.create_task(_kafka_checks(settings), name="check:kafka")
    snow = asyncio.create_task(_snow_checks(settings), name="check:servicenow")
    try:
        report(await kafka)
        report(await snow)
    finally:
        for task in (kafka, snow):
            if not task.done():
                task.cancel()
        await asyncio.gather(kafka, snow, return_exceptions=True)
    return results


# --------------------------------------------------------------------------------------------
# Kafka
# --------------------------------------------------------------------------------------------


def _describe(exc: BaseException | None) -> str:
    """``Type: message`` once (aiokafka's messages already start with their type)."""
    if exc is None:
        return "no error"
    name, text = type(exc).__name__, str(exc)
    if not text or text == name:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


class _KafkaUnreachableError(Exception):
    """The admin client could not talk to the cluster within the probe timeout."""


async def _connect_admin(
    conn: KafkaConnection, within: float
) -> tuple[AIOKafkaAdminClient, dict[str, Any]]:
    """A started admin client and the cluster description; the caller closes the client."""
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while True:
        remaining = max(deadline - time.monotonic(), 0.1)
        try:
            admin = AIOKafkaAdminClient(
                **conn.client_kwargs(), request_timeout_ms=max(int(remaining * 1000), 1000)
            )
        except (OSError, ValueError) as exc:  # e.g. an unreadable SSL certificate
            raise _KafkaUnreachableError(f"cannot set up the client: {exc}") from None
        try:
            async with asyncio.timeout(remaining):
                await admin.start()
                cluster = await admin.describe_cluster()
            return admin, cluster
        except (KafkaError, OSError, TimeoutError) as exc:
            last = exc
            await admin.close()
        if time.monotonic() + 0.5 >= deadline:
            raise _KafkaUnreachableError(
                f"no answer from {conn.bootstrap_servers} within {within:g} s ({_describe(last)})"
            )
        await asyncio.sleep(0.5)


async def _kafka_checks(settings: Settings) -> list[CheckResult]:
    reachable = "Kafka reachable"
    topic = settings.offset_storage_topic
    offsets = f"offsets topic {topic!r} compacted or creatable"
    timeout = kafka_probe_timeout(settings)
    conn = kafka_connection(settings, client_id="snowsource-check")
    try:
        admin, cluster = await _connect_admin(conn, timeout)
    except _KafkaUnreachableError as exc:
        return [
            CheckResult(
                reachable,
                Status.FAIL,
                str(exc),
                (
                    "check kafka.bootstrap.servers, kafka.security.protocol and the SASL/SSL "
                    "settings, and that this machine can reach the brokers' advertised listeners",
                    f"(check waits min(kafka.startup.timeout.seconds, "
                    f"{KAFKA_PROBE_MAX_SECONDS:g}) = {timeout:g} s)",
                ),
            ),
            CheckResult(offsets, Status.SKIP, "Kafka is not reachable"),
        ]
    try:
        brokers = cluster.get("brokers") or []
        cluster_id = cluster.get("cluster_id")
        detail = f"{settings.kafka.bootstrap_servers} ({len(brokers)} broker(s)"
        detail += f", cluster {cluster_id})" if cluster_id else ")"
        results = [CheckResult(reachable, Status.PASS, detail)]
        try:
            async with asyncio.timeout(max(timeout, 5.0)):
                results.append(await _offsets_topic(admin, settings, offsets))
        except (KafkaError, OSError, TimeoutError) as exc:
            results.append(
                CheckResult(offsets, Status.FAIL, f"cannot inspect it ({_describe(exc)})")
            )
        return results
    finally:
        await admin.close()


async def _offsets_topic(admin: AIOKafkaAdminClient, settings: Settings, name: str) -> CheckResult:
    topic = settings.offset_storage_topic
    found = await existing_topics(admin, [topic])
    if topic in found:
        policy = (await describe_topic_configs(admin, topic)).get("cleanup.policy", "")
        if policy == "compact":
            return CheckResult(
                name, Status.PASS, f"exists, cleanup.policy=compact, {found[topic]} partition(s)"
            )
        return CheckResult(
            name,
            Status.FAIL,
            f"exists with cleanup.policy={policy!r}; it must be exactly 'compact' "
            f"(anything else can delete offsets)",
            (
                f"fix: kafka-configs.sh --bootstrap-server ... --alter --entity-type topics "
                f"--entity-name {topic} --add-config cleanup.policy=compact",
                "or point offset.storage.topic at another topic",
            ),
        )
    partitions = settings.offset_storage_partitions
    replication = settings.offset_storage_replication_factor
    if replication == -1:
        replication = (await broker_defaults(admin))[1]
    response = await admin.create_topics(
        [NewTopic(topic, partitions, replication, topic_configs={"cleanup.policy": "compact"})],
        validate_only=True,
    )
    for topic_name, error_code, *rest in response.topic_errors:
        if topic_name == topic and error_code:
            message = rest[0] if rest and rest[0] else for_code(error_code).__name__
            return CheckResult(
                name,
                Status.FAIL,
                f"does not exist and the broker refused to create it ({message})",
                (
                    "create it yourself with cleanup.policy=compact, or fix "
                    "offset.storage.partitions / offset.storage.replication.factor and the ACLs",
                ),
            )
    return CheckResult(
        name,
        Status.PASS,
        f"does not exist yet; will be created at start with {partitions} partition(s), "
        f"replication factor {replication}, cleanup.policy=compact (the broker accepted a dry run)",
    )


# --------------------------------------------------------------------------------------------
# ServiceNow
# --------------------------------------------------------------------------------------------


async def _get(client: ServiceNowClient, table: str, params: dict[str, str]) -> Page:
    """One Table API read, with a few retries for transient answers (429, 5xx, timeouts)."""
    attempt = 0
    while True:
        try:
            return await client.get_page(table, params)
        except RetriableError as exc:
            attempt += 1
            if attempt >= _SNOW_ATTEMPTS:
                raise
            wait = 0.5 * 2**attempt
            if isinstance(exc, RateLimitedError) and exc.retry_after is not None:
                wait = exc.retry_after
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


@dataclass
class _TableProbe:
    """What the two checks of one table found; ``row`` is a sample row, if any."""

    readable: CheckResult
    cursor: CheckResult
    row: dict[str, Any] | None = None


async def _snow_checks(settings: Settings) -> list[CheckResult]:
    credentials = "ServiceNow credentials accepted"
    http = settings.snow.http
    client = ServiceNowClient(
        settings.snow.url,
        snow_auth(settings),
        connect_timeout=http.connect_timeout_ms / 1000,
        request_timeout=http.request_timeout_ms / 1000,
        max_concurrent_requests=http.max_concurrent_requests,
        proxy=http.proxy_url,
        ca_file=http.ca_file,
    )
    try:
        async with client:
            return await _snow_checks_with(client, settings, credentials)
    except ConfigError as exc:  # an unusable CA bundle is only found when the client starts
        return [
            CheckResult(credentials, Status.FAIL, str(exc).replace("\n", " ")),
            *_skipped_after_credentials(settings, "the HTTP client could not start"),
        ]


def _skipped_after_credentials(settings: Settings, why: str) -> list[CheckResult]:
    out: list[CheckResult] = []
    for alias in settings.tables:
        out.append(CheckResult(f"table {alias} readable", Status.SKIP, why))
        out.append(CheckResult(f"table {alias} cursor fields visible", Status.SKIP, why))
    out.append(CheckResult("integration user's time zone", Status.SKIP, why))
    return out


async def _snow_checks_with(
    client: ServiceNowClient, settings: Settings, name: str
) -> list[CheckResult]:
    login = _login_name(settings)
    user_row: dict[str, Any] | None = None
    user_note = ""
    try:
        if login is not None:
            page = await _get(
                client,
                "sys_user",
                {
                    "sysparm_query": f"user_name={login}",
                    "sysparm_fields": "user_name,time_zone",
                    "sysparm_limit": "1",
                    "sysparm_display_value": "false",
                    "sysparm_no_count": "true",
                },
            )
            user_row = page.rows[0] if page.rows else None
        else:
            first = next(iter(settings.tables.values()))
            await _get(client, first.name, {"sysparm_limit": "1", "sysparm_fields": "sys_id"})
    except AuthError as exc:
        return [
            CheckResult(name, Status.FAIL, _failure(exc)),
            *_skipped_after_credentials(settings, "ServiceNow refused the credentials"),
        ]
    except RetriableError as exc:
        return [
            CheckResult(name, Status.FAIL, f"ServiceNow did not answer usably: {_failure(exc)}"),
            *_skipped_after_credentials(settings, "ServiceNow did not answer"),
        ]
    except ServiceNowError as exc:
        # 403/404/400 come after authentication: the user is known, it just may not read this.
        user_note = f"its sys_user record is not readable ({exc.status or 'error'})"
    detail = f"{settings.snow.url}, {_auth_description(settings)}"
    results = [CheckResult(name, Status.PASS, detail)]
    probes = await asyncio.gather(
        *(_probe_table(client, alias, table) for alias, table in settings.tables.items())
    )
    for probe in probes:
        results += [probe.readable, probe.cursor]
    results.append(
        await _time_zone(
            client, settings, login=login, user_row=user_row, user_note=user_note, probes=probes
        )
    )
    return results


def _table_params(table: TableConfig, *, with_query: bool) -> dict[str, str]:
    return probe_params(
        id_field=table.id_field,
        timestamp_field=table.timestamp_field,
        query_domain=table.query_domain,
        query_category=table.query_category,
        query=normalise_query(table.query) if with_query else "",
        count=True,
    )


async def _probe_table(client: ServiceNowClient, alias: str, table: TableConfig) -> _TableProbe:
    readable = f"table {alias} readable"
    cursor = f"table {alias} cursor fields visible"
    query = normalise_query(table.query)
    try:
        page = await _get(client, table.name, _table_params(table, with_query=True))
    except ServiceNowError as exc:
        return _TableProbe(
            CheckResult(readable, Status.FAIL, _failure(exc)),
            CheckResult(cursor, Status.SKIP, "the table is not readable"),
        )
    what = f"{table.name} with query {query!r}" if query else f"{table.name} (no query)"
    if page.total_count is not None:
        what += f", {page.total_count} row(s) match"
    ok = CheckResult(readable, Status.PASS, what)
    rows = page.rows
    if not rows and query:
        # Nothing matches the query yet: any row of the table shows whether the fields are there.
        try:
            rows = (await _get(client, table.name, _table_params(table, with_query=False))).rows
        except ServiceNowError:
            rows = []
    if not rows:
        return _TableProbe(
            ok,
            CheckResult(
                cursor, Status.WARN, "cannot verify: the integration user sees no rows yet"
            ),
        )
    row = rows[0]
    return _TableProbe(ok, _cursor_result(cursor, table, row), row)


def _cursor_result(name: str, table: TableConfig, row: dict[str, Any]) -> CheckResult:
    problems: list[str] = []
    for key, field in (("id.field", table.id_field), ("timestamp.field", table.timestamp_field)):
        value = row.get(field)
        if field not in row:
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
                f"grant the integration user read access to {table.name}."
                f"{table.timestamp_field} and {table.name}.{table.id_field}, or set "
                f"timestamp.field / id.field",
            ),
        )
    return CheckResult(name, Status.PASS, f"{table.timestamp_field}, {table.id_field}")


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
    settings: Settings,
    *,
    login: str | None,
    user_row: dict[str, Any] | None,
    user_note: str,
    probes: list[_TableProbe],
) -> CheckResult:
    name = "integration user's time zone"
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
    for (alias, table), probe in zip(settings.tables.items(), probes, strict=True):
        if probe.row is None:
            continue
        params = _table_params(table, with_query=False)
        params.update({"sysparm_fields": table.timestamp_field, "sysparm_display_value": "all"})
        params.pop("sysparm_no_count")
        try:
            page = await _get(client, table.name, params)
        except ServiceNowError:
            continue
        cell = page.rows[0].get(table.timestamp_field) if page.rows else None
        if not isinstance(cell, dict):
            continue
        display, value = cell.get("display_value"), cell.get("value")
        if not isinstance(display, str) or not isinstance(value, str):
            continue
        offsets = display_offsets(display, value)
        source = f"from display values of {alias}"
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


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def main(config_path: str | None) -> int:
    """``snowsource check --config PATH``: print one line per check; 0, 1 or 2 (see module)."""
    color = sys.stdout.isatty()
    try:
        loaded = load_config(config_path)
    except ConfigError as exc:
        problems = tuple(f"{path}: {msg}" if path else msg for path, msg in exc.problems)
        print(format_result(CheckResult("config valid", Status.FAIL, "", problems), color=color))
        return 2
    # The report is the output; library chatter about retries would only blur it.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL + 1)

    def emit(result: CheckResult) -> None:
        print(format_result(result, color=color), flush=True)

    results = asyncio.run(run_checks(loaded, emit))
    counts = {status: sum(r.status is status for r in results) for status in Status}
    print(
        f"{len(results)} checks: {counts[Status.PASS]} passed, {counts[Status.WARN]} warning(s), "
        f"{counts[Status.FAIL]} failed, {counts[Status.SKIP]} skipped"
    )
    return exit_code(results)
