"""Every Prometheus metric snowsource exposes, in one place (SPEC §9).

Call sites use these objects, never ad-hoc names. All per-table metrics carry the ``table`` label
(the table's alias, which is unique within a process).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

ROWS_EMITTED = Counter(
    "snowsource_rows_emitted", "Rows produced to Kafka", ["table"], registry=REGISTRY
)
ROWS_SUPPRESSED = Counter(
    "snowsource_rows_suppressed",
    "Rows read again but byte-identical to what was already emitted (dedup)",
    ["table"],
    registry=REGISTRY,
)
ROWS_LATE = Counter(
    "snowsource_rows_late",
    "Rows found below the cursor that had not been emitted (late commits)",
    ["table"],
    registry=REGISTRY,
)
PAGES = Counter("snowsource_pages", "Table API pages read", ["table"], registry=REGISTRY)
HTTP_REQUESTS = Counter(
    "snowsource_http_requests",
    "ServiceNow HTTP requests by status code (0 = no response)",
    ["table", "status"],
    registry=REGISTRY,
)
HTTP_LATENCY = Histogram(
    "snowsource_http_request_seconds",
    "ServiceNow request latency",
    ["table"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
RETRIES = Counter(
    "snowsource_retries", "ServiceNow requests retried after an error", ["table"], registry=REGISTRY
)
THROTTLED_SECONDS = Counter(
    "snowsource_throttled_seconds",
    "Seconds spent waiting because ServiceNow answered 429",
    ["table"],
    registry=REGISTRY,
)
LAG_SECONDS = Gauge(
    "snowsource_lag_seconds",
    "Instance time minus the point up to which the table is known complete",
    ["table"],
    registry=REGISTRY,
)
PHASE = Gauge(
    "snowsource_phase",
    "1 for the table's current phase (backfill or stream), 0 otherwise",
    ["table", "phase"],
    registry=REGISTRY,
)
TABLE_STATE = Gauge(
    "snowsource_table_state",
    "1 for the table's current state (RUNNING, FAILED, STOPPED, ...), 0 otherwise",
    ["table", "state"],
    registry=REGISTRY,
)
OFFSETS_COMMITTED = Counter(
    "snowsource_offsets_committed",
    "Offset records written to the offsets topic",
    ["table"],
    registry=REGISTRY,
)
PRODUCE_ERRORS = Counter(
    "snowsource_produce_errors", "Records Kafka did not acknowledge", ["table"], registry=REGISTRY
)
DEDUP_EVICTIONS = Counter(
    "snowsource_dedup_evictions",
    "Dedup cache entries evicted because dedup.max.entries was reached",
    ["table"],
    registry=REGISTRY,
)
DEDUP_ENTRIES = Gauge(
    "snowsource_dedup_entries",
    "Entries the table's dedup cache holds after its last page (the re-read window's rows)",
    ["table"],
    registry=REGISTRY,
)
ASYNCIO_TASKS = Gauge(
    "snowsource_asyncio_tasks",
    "asyncio tasks alive in the process at this scrape (flat in a steady state)",
    registry=REGISTRY,
)
CONSECUTIVE_FAILURES = Gauge(
    "snowsource_table_consecutive_failures",
    "Failed attempts (requests, produce, offset writes) since the table last worked; 0 when well",
    ["table"],
    registry=REGISTRY,
)
VALUES_UNPARSED = Counter(
    "snowsource_values_unparsed",
    "Values of typed records that did not parse as their column's type and stayed strings",
    ["table"],
    registry=REGISTRY,
)
SCHEMA_REGISTRY_REQUESTS = Counter(
    "snowsource_schema_registry_requests",
    "Requests to the Schema Registry by operation (register, lookup, latest, compatibility) "
    "and outcome (ok, refused, unavailable, auth, not_found)",
    ["operation", "outcome"],
    registry=REGISTRY,
)
SCHEMAS_REFUSED = Counter(
    "snowsource_schemas_refused",
    "Schema versions the registry refused (409 incompatible, 422 invalid); the table goes on "
    "writing with its last accepted schema",
    ["table"],
    registry=REGISTRY,
)
SCHEMA_VERSIONS = Counter(
    "snowsource_schema_versions_registered",
    "Schema versions of a table registered (or looked up) and written with",
    ["table"],
    registry=REGISTRY,
)
RECONCILE_MISSING = Gauge(
    "snowsource_reconcile_missing_keys",
    "Keys the last key sweep found missing: side=instance (live in Kafka, gone from the "
    "instance: tombstoned), side=kafka (in the instance, not live in the topic)",
    ["table", "side"],
    registry=REGISTRY,
)
OFFSET_COMMIT_SECONDS = Histogram(
    "snowsource_offset_commit_seconds",
    "Offset-topic write latency, from send to Kafka's acknowledgement",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
READY = Gauge(
    "snowsource_ready",
    "1 when GET /health/ready would answer 200, 0 otherwise; evaluated at each scrape",
    registry=REGISTRY,
)
BACKFILL_SLICES_ACTIVE = Gauge(
    "snowsource_backfill_slices_active",
    "Slices of the table's parallel backfill reading a range now (0 outside a sliced backfill)",
    ["table"],
    registry=REGISTRY,
)
BACKFILL_ROWS_AHEAD = Gauge(
    "snowsource_backfill_rows_ahead",
    "Rows the backfill's slices read past the committed prefix (bounded by max.ahead.rows)",
    ["table"],
    registry=REGISTRY,
)
SNOW_CONCURRENCY_LIMIT = Gauge(
    "snowsource_servicenow_concurrency_limit",
    "Requests the process may have in flight to ServiceNow now (AIMD, at most "
    "snow.http.max.concurrent.requests)",
    registry=REGISTRY,
)
SNOW_SESSIONS_OPEN = Gauge(
    "snowsource_servicenow_sessions_open",
    "ServiceNow sessions (cookie jars) the session pool holds open",
    registry=REGISTRY,
)
SNOW_REQUESTS_IN_FLIGHT = Gauge(
    "snowsource_servicenow_requests_in_flight",
    "ServiceNow requests sent and not yet answered",
    registry=REGISTRY,
)
SNOW_SATURATIONS = Counter(
    "snowsource_servicenow_saturations",
    "Times a 429 without Retry-After (node semaphores full) halved the concurrency limit",
    registry=REGISTRY,
)
SNOW_PAUSES = Counter(
    "snowsource_servicenow_pauses",
    "Times a 429 with Retry-After paused every ServiceNow request of the process",
    registry=REGISTRY,
)
SNOW_PAUSE_SECONDS = Gauge(
    "snowsource_servicenow_pause_seconds",
    "Seconds left before ServiceNow requests may leave again (a 429's Retry-After; 0: none)",
    registry=REGISTRY,
)
SNOW_BUDGET_PER_HOUR = Gauge(
    "snowsource_servicenow_rate_budget_per_hour",
    "Requests per hour this process paces itself to (its share of the instance's rate-limit "
    "rule or of snow.http.max.requests.per.hour, less the headroom; 0: no budget applies)",
    registry=REGISTRY,
)
SNOW_BUDGET_USED = Gauge(
    "snowsource_servicenow_rate_budget_used",
    "Requests this process sent in the current rate-limit window (X-RateLimit-Reset)",
    registry=REGISTRY,
)
SNOW_BUDGET_WAIT_SECONDS = Counter(
    "snowsource_servicenow_rate_budget_wait_seconds",
    "Time requests waited for the rate budget",
    registry=REGISTRY,
)
SNOW_NON_PAGE_RESPONSES = Counter(
    "snowsource_servicenow_non_page_responses",
    "2xx answers to a Table API read that were not a page (202 session queueing, other 2xx, "
    "200 without a JSON result list); each is retried",
    ["table", "status"],
    registry=REGISTRY,
)

PHASES = ("backfill", "stream")
STATES = ("STARTING", "RUNNING", "FAILED", "STOPPED", "PAUSED", "SKIPPED", "QUEUED")

ALL_METRIC_NAMES = (
    "snowsource_rows_emitted",
    "snowsource_rows_suppressed",
    "snowsource_rows_late",
    "snowsource_pages",
    "snowsource_http_requests",
    "snowsource_http_request_seconds",
    "snowsource_retries",
    "snowsource_throttled_seconds",
    "snowsource_lag_seconds",
    "snowsource_phase",
    "snowsource_table_state",
    "snowsource_offsets_committed",
    "snowsource_produce_errors",
    "snowsource_dedup_evictions",
    "snowsource_dedup_entries",
    "snowsource_asyncio_tasks",
    "snowsource_values_unparsed",
    "snowsource_schema_registry_requests",
    "snowsource_schemas_refused",
    "snowsource_schema_versions_registered",
    "snowsource_table_consecutive_failures",
    "snowsource_reconcile_missing_keys",
    "snowsource_offset_commit_seconds",
    "snowsource_ready",
    "snowsource_backfill_slices_active",
    "snowsource_backfill_rows_ahead",
    "snowsource_servicenow_concurrency_limit",
    "snowsource_servicenow_sessions_open",
    "snowsource_servicenow_requests_in_flight",
    "snowsource_servicenow_saturations",
    "snowsource_servicenow_pauses",
    "snowsource_servicenow_pause_seconds",
    "snowsource_servicenow_rate_budget_per_hour",
    "snowsource_servicenow_rate_budget_used",
    "snowsource_servicenow_rate_budget_wait_seconds",
    "snowsource_servicenow_non_page_responses",
)


def set_phase(table: str, phase: str) -> None:
    """Mark ``phase`` as the table's current phase."""
    for name in PHASES:
        PHASE.labels(table=table, phase=name).set(1 if name == phase else 0)


def set_state(table: str, state: str) -> None:
    """Mark ``state`` as the table's current state."""
    for name in STATES:
        TABLE_STATE.labels(table=table, state=name).set(1 if name == state else 0)


#: The per-table gauges: a table that stops running here (released to another group member, or
#: no longer discovered) loses these series, so a sum over members shows only the owner's.
_TABLE_GAUGES = (LAG_SECONDS, DEDUP_ENTRIES, CONSECUTIVE_FAILURES, BACKFILL_SLICES_ACTIVE,
                 BACKFILL_ROWS_AHEAD)  # fmt: skip


def forget_table(table: str) -> None:
    """Drop the gauges of a table that no longer runs in this process (counters stay: they
    only grow, and a rate over them is still right)."""
    for gauge in _TABLE_GAUGES:
        gauge.remove(table)
    for name in PHASES:
        PHASE.remove(table, name)
    for name in STATES:
        TABLE_STATE.remove(table, name)
    for side in ("instance", "kafka"):
        RECONCILE_MISSING.remove(table, side)
