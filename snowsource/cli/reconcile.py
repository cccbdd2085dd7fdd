"""``snowsource reconcile --config FILE [--table ALIAS] [--json]`` (SPEC §14.3).

Answers "does my topic hold exactly what the instance holds?" per table: the instance's row
count (the Aggregate API, with the table's query), the keys live in the table's compacted topic,
and samples of the keys each side lacks (the instance's sys_ids paged like the daemon's key
sweep). Nothing is written anywhere; the daemon's ``deletes: reconcile`` acts on the same
comparison.

A 403 from the Aggregate API means an ACL hides rows from the integration user: its reads
silently leave those rows out, which is the other way rows go missing, so it is reported as
such and counts as a difference.

Exit codes: 0 every table matches, 1 a table differs (or could not be compared), 2 invalid
configuration or usage (nothing was contacted).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, TextIO

import orjson
from aiokafka.errors import KafkaError

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.adapters.topic_keys import read_live_keys
from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.dictionary import raw
from snowsource.core.errors import ConfigError, ServiceNowError
from snowsource.core.reconcile import (
    KEY_PAGE_SIZE,
    SAMPLE_SIZE,
    LiveKeys,
    compare_page,
    key_query,
    missing_others,
    pack,
)
from snowsource.core.table import TableSpec
from snowsource.core.tableapi import scope_params
from snowsource.engine.table_specs import table_spec
from snowsource.engine.wiring import kafka_connection, snow_client
from snowsource.observability.redact import redact

EXIT_EQUAL: Final = 0
EXIT_DIFFER: Final = 1
EXIT_USAGE: Final = 2
ACL_HIDES_ROWS: Final = "the integration user cannot see every row (an ACL hides some)"
_CLIENT_ID: Final = "snowsource-reconcile"


@dataclass
class TableReport:
    """One table compared: what each side holds and what the other lacks."""

    alias: str
    table: str
    topic: str
    instance_rows: int | None = None
    instance_keys: int = 0
    kafka_keys: int = 0
    missing_in_kafka: int = 0
    missing_in_instance: int = 0
    sample_missing_in_kafka: list[str] = field(default_factory=list)
    sample_missing_in_instance: list[str] = field(default_factory=list)
    problem: str | None = None

    @property
    def equal(self) -> bool:
        """The topic holds exactly the instance's rows (and the count agrees)."""
        return (
            self.problem is None
            and self.missing_in_kafka == 0
            and self.missing_in_instance == 0
            and self.instance_rows == self.kafka_keys
        )


def _count_params(spec: TableSpec) -> dict[str, str]:
    params = {"sysparm_count": "true", "sysparm_query": spec.normalised_query}
    params.update(scope_params(spec.query_domain, spec.query_category))
    return params


async def _instance_count(client: ServiceNowClient, spec: TableSpec) -> int:
    doc = await client.get_json(f"/api/now/stats/{spec.name}", _count_params(spec))
    try:
        return int(doc["result"]["stats"]["count"])
    except (KeyError, TypeError, ValueError):
        raise ServiceNowError(
            f"the Aggregate API answered without result.stats.count for {spec.name}"
        ) from None


def _note(report: TableReport, page: Sequence[str], live: LiveKeys, after: str, last: bool) -> None:
    sys_ids = [key for key in page if pack(key) is not None]
    diff = compare_page(live, after, sys_ids, last_page=last)
    report.missing_in_instance += len(diff.missing_in_instance)
    report.missing_in_kafka += len(diff.missing_in_kafka)
    for sample, found in (
        (report.sample_missing_in_instance, diff.missing_in_instance),
        (report.sample_missing_in_kafka, diff.missing_in_kafka),
    ):
        sample.extend(found[: SAMPLE_SIZE - len(sample)])


async def _compare_keys(client: ServiceNowClient, spec: TableSpec, live: LiveKeys) -> TableReport:
    report = TableReport(spec.alias, spec.name, spec.topic, kafka_keys=len(live))
    after, others = "", list[str]()
    while True:
        params = {
            "sysparm_query": key_query(spec.normalised_query, after),
            "sysparm_fields": "sys_id",
            "sysparm_limit": str(KEY_PAGE_SIZE),
            "sysparm_no_count": "true",
            "sysparm_suppress_pagination_header": "true",
            **scope_params(spec.query_domain, spec.query_category),
        }
        page = [raw(row, "sys_id") for row in (await client.get_page(spec.name, params)).rows]
        last = len(page) < KEY_PAGE_SIZE
        others.extend(key for key in page if pack(key) is None)
        report.instance_keys += len(page)
        _note(report, page, live, after, last)
        sys_ids = [key for key in page if pack(key) is not None]
        if last or not sys_ids:
            break
        after = sys_ids[-1]
    unseen = missing_others(live, others)
    report.missing_in_instance += len(unseen)
    report.sample_missing_in_instance += unseen[
        : SAMPLE_SIZE - len(report.sample_missing_in_instance)
    ]
    return report


async def reconcile_table(
    client: ServiceNowClient, conn: KafkaConnection, spec: TableSpec
) -> TableReport:
    """Compare one table's instance rows with its topic's live keys."""
    live = await read_live_keys(conn, spec.topic, instance=spec.partition.instance, table=spec.name)
    report = await _compare_keys(client, spec, live)
    try:
        report.instance_rows = await _instance_count(client, spec)
    except ServiceNowError as exc:
        if exc.status != 403:
            raise
        report.problem = ACL_HIDES_ROWS
    return report


async def reconcile(settings: Settings, aliases: Sequence[str]) -> list[TableReport]:
    """The reports of ``aliases``; a table that cannot be compared says why."""
    conn = kafka_connection(settings, client_id=_CLIENT_ID)
    reports: list[TableReport] = []
    async with snow_client(settings) as client:
        for alias in aliases:
            spec = table_spec(settings, alias, settings.tables[alias])
            try:
                reports.append(await reconcile_table(client, conn, spec))
            except (ServiceNowError, KafkaError, OSError) as exc:
                failed = TableReport(alias, spec.name, spec.topic)
                failed.problem = f"could not compare: {redact(str(exc))}"
                reports.append(failed)
    return reports


def _human(report: TableReport, out: TextIO) -> None:
    verdict = "equal" if report.equal else "DIFFER"
    rows = "unknown" if report.instance_rows is None else f"{report.instance_rows:,}"
    print(f"{report.alias} (table {report.table}, topic {report.topic}): {verdict}", file=out)
    print(f"  instance rows (Aggregate API): {rows}", file=out)
    print(f"  instance keys read:            {report.instance_keys:,}", file=out)
    print(f"  keys live in Kafka:            {report.kafka_keys:,}", file=out)
    for label, count, sample in (
        ("missing in Kafka:   ", report.missing_in_kafka, report.sample_missing_in_kafka),
        ("missing in instance:", report.missing_in_instance, report.sample_missing_in_instance),
    ):
        shown = f" e.g. {', '.join(sample)}" if sample else ""
        print(f"  {label}           {count:,}{shown}", file=out)
    if report.problem:
        print(f"  {report.problem}", file=out)


def _json(reports: Sequence[TableReport], out: TextIO) -> None:
    doc: list[dict[str, Any]] = [{**asdict(r), "equal": r.equal} for r in reports]
    out.write(orjson.dumps({"tables": doc}, option=orjson.OPT_INDENT_2).decode() + "\n")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="snowsource reconcile",
        description=(
            "Compare each table's rows in the instance with the keys live in its Kafka topic:\n"
            "the instance's row count (Aggregate API), the live keys, and samples of the keys\n"
            "missing on either side. Reads only; writes nothing."
        ),
        epilog=(
            "exit codes:\n  0  every table matches\n  1  a table differs, or could not be "
            "compared\n  2  invalid configuration or usage (nothing was contacted)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="configuration file (default: $SNOWSOURCE_CONFIG)")
    parser.add_argument("--table", metavar="ALIAS", help="only this table (its snow.tables key)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    return parser


def main(argv: Sequence[str], out: TextIO = sys.stdout) -> int:
    """``snowsource reconcile``: 0 equal, 1 differ, 2 configuration or usage error."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_EQUAL if exc.code in (0, None) else EXIT_USAGE
    try:
        settings = load_config(args.config).settings
    except ConfigError as exc:
        print(f"snowsource reconcile: {exc}", file=sys.stderr)
        return EXIT_USAGE
    aliases = list(settings.tables)
    if args.table is not None:
        if args.table not in settings.tables:
            print(
                f"snowsource reconcile: unknown table alias {args.table!r}: the configuration "
                f"has {', '.join(aliases)} (aliases are the keys under snow.tables)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        aliases = [args.table]
    # The report is the output; library chatter about retries would only blur it.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL + 1)
    reports = asyncio.run(reconcile(settings, aliases))
    if args.json:
        _json(reports, out)
    else:
        for report in reports:
            _human(report, out)
    return EXIT_EQUAL if all(r.equal for r in reports) else EXIT_DIFFER
