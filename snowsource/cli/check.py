"""``snowsource check``: validate the configuration, then probe Kafka and ServiceNow (SPEC §1).

One line per check, in a fixed order: config valid; Kafka reachable; offsets topic compacted or
creatable (a WARN when it is missing while owned output topics hold records: ``run`` would
refuse to start); with ``exactly.once: true``, whether transactions work (``check_txn``); then
the ServiceNow lines (``check_servicenow``): reachable, credentials accepted, for every table
(all of ``snow.tables``, whichever task owns it) readable with its base query, cursor fields
visible, its ``fields`` known and what its delete stream or typed records read
(``check_access``); the integration user's time zone; with ``avro``/``json_schema`` tables the
Schema Registry lines (``check_registry``). Exit 0 when nothing
failed, 1 when a check failed, 2 when the configuration is invalid — in which case nothing is
contacted.

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
from typing import Any, Final

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, for_code

from snowsource.adapters.kafka import (
    KafkaConnection,
    LiveNodeAdmin,
    broker_defaults,
    describe_topic_configs,
    diagnose_security,
    existing_topics,
)
from snowsource.adapters.offset_store import topics_with_records
from snowsource.cli import check_txn
from snowsource.cli.check_registry import registry_checks
from snowsource.cli.check_report import CheckResult, Status, exit_code, format_result
from snowsource.cli.check_servicenow import display_offsets, snow_checks
from snowsource.config.loader import LoadedConfig, load_config
from snowsource.config.models import Settings
from snowsource.core.errors import (
    ConfigError,
)
from snowsource.engine.table_specs import owned_specs, table_owners
from snowsource.engine.wiring import kafka_connection
from snowsource.observability.redact import redact

__all__ = [
    "KAFKA_PROBE_MAX_SECONDS",
    "CheckResult",
    "Status",
    "display_offsets",
    "exit_code",
    "format_result",
    "kafka_probe_timeout",
    "main",
    "run_checks",
]

KAFKA_PROBE_MAX_SECONDS: Final = 10.0
"""Upper bound of the Kafka probe: ``check`` is interactive, a wrong address must fail fast."""


def kafka_probe_timeout(settings: Settings) -> float:
    """How long the check waits for Kafka: ``min(kafka.startup.timeout.seconds, 10)``."""
    return min(settings.kafka.startup_timeout_seconds, KAFKA_PROBE_MAX_SECONDS)


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------


def _config_result(loaded: LoadedConfig) -> CheckResult:
    settings = loaded.settings
    aliases = list(settings.tables)
    owners = table_owners(settings)
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
    snow = asyncio.create_task(snow_checks(settings), name="check:servicenow")
    try:
        report(await kafka)
        report(await snow)
        report(await registry_checks(settings))
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
    """The admin client could not talk to the cluster within the probe timeout.

    ``refused`` when a broker answered but refused us (authentication, TLS): retrying is futile.
    """

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


async def _connect_admin(
    conn: KafkaConnection, within: float
) -> tuple[AIOKafkaAdminClient, dict[str, Any]]:
    """A started admin client and the cluster description; the caller closes the client."""
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while True:
        remaining = max(deadline - time.monotonic(), 0.1)
        try:
            admin = LiveNodeAdmin(
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
            # aiokafka only says it could not bootstrap; a direct connection names a refusal.
            if conn.uses_security and (problem := await diagnose_security(conn)) is not None:
                raise _KafkaUnreachableError(str(problem), refused=True) from None
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
        notes = (
            ("the broker answered and refused this client; `snowsource run` exits 1 on it",)
            if exc.refused
            else (
                "check kafka.bootstrap.servers, kafka.security.protocol and the SASL/SSL "
                "settings, and that this machine can reach the brokers' advertised listeners",
                f"(check waits min(kafka.startup.timeout.seconds, "
                f"{KAFKA_PROBE_MAX_SECONDS:g}) = {timeout:g} s)",
            )
        )
        skipped = [CheckResult(offsets, Status.SKIP, "Kafka is not reachable")]
        if settings.exactly_once:
            skipped.append(CheckResult(check_txn.NAME, Status.SKIP, "Kafka is not reachable"))
        return [CheckResult(reachable, Status.FAIL, str(exc), notes), *skipped]
    try:
        brokers = cluster.get("brokers") or []
        cluster_id = cluster.get("cluster_id")
        detail = f"{settings.kafka.bootstrap_servers} ({len(brokers)} broker(s)"
        detail += f", cluster {cluster_id})" if cluster_id else ")"
        results = [CheckResult(reachable, Status.PASS, detail)]
        try:
            async with asyncio.timeout(max(timeout, 5.0)):
                results.append(await _offsets_topic(admin, conn, settings, offsets))
        except (KafkaError, OSError, TimeoutError) as exc:
            results.append(
                CheckResult(offsets, Status.FAIL, f"cannot inspect it ({_describe(exc)})")
            )
        if settings.exactly_once:
            results.append(await check_txn.transactions_check(settings, conn, max(timeout, 5.0)))
        return results
    finally:
        await admin.close()


async def _existing_offsets_topic(
    admin: AIOKafkaAdminClient, topic: str, partitions: int, name: str
) -> CheckResult:
    policy = (await describe_topic_configs(admin, topic)).get("cleanup.policy", "")
    if policy == "compact":
        return CheckResult(
            name, Status.PASS, f"exists, cleanup.policy=compact, {partitions} partition(s)"
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


async def _offsets_topic(
    admin: AIOKafkaAdminClient, conn: KafkaConnection, settings: Settings, name: str
) -> CheckResult:
    topic = settings.offset_storage_topic
    found = await existing_topics(admin, [topic])
    if topic in found:
        return await _existing_offsets_topic(admin, topic, found[topic], name)
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
    # The same question the daemon asks before creating it: were the offsets lost?
    nonempty = await topics_with_records(conn, [spec.topic for spec in owned_specs(settings)])
    if nonempty:
        # Looked at again after the records, as the daemon does: a process of this connector
        # that started meanwhile created the topic before it produced them.
        found = await existing_topics(admin, [topic])
        if topic in found:
            return await _existing_offsets_topic(admin, topic, found[topic], name)
        return CheckResult(
            name,
            Status.WARN,
            f"does not exist, but output topic(s) {', '.join(nonempty)} already hold records: "
            f"the stored offsets are gone (topic deleted, another cluster, or "
            f"offset.storage.topic changed), and `snowsource run` refuses to start rather "
            f"than replay every table from its start.timestamp",
            (
                "restore the offsets from an export: snowsource offsets import FILE",
                "or accept one full replay: snowsource run --allow-full-replay",
            ),
        )
    return CheckResult(
        name,
        Status.PASS,
        f"does not exist yet; will be created at start with {partitions} partition(s), "
        f"replication factor {replication}, cleanup.policy=compact (the broker accepted a dry run)",
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
        # Details quote servers and libraries: the redactor sees every line printed.
        print(redact(format_result(result, color=color)), flush=True)

    results = asyncio.run(run_checks(loaded, emit))
    counts = {status: sum(r.status is status for r in results) for status in Status}
    print(
        f"{len(results)} checks: {counts[Status.PASS]} passed, {counts[Status.WARN]} warning(s), "
        f"{counts[Status.FAIL]} failed, {counts[Status.SKIP]} skipped"
    )
    return exit_code(results)
