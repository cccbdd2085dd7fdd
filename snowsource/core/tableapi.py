"""The Table API request parameters of a table (SPEC §5): built here only.

The poller's page requests and clock probe and ``snowsource check``'s probes ask for the same
table the same way (fields, display values, domain, category), so a check that passes predicts
what the daemon will see.
"""

from __future__ import annotations

from snowsource.core.cursor import Position, page_query
from snowsource.core.records import RAW_FIELDS_EXTRA
from snowsource.core.table import TableSpec


def requested_fields(spec: TableSpec) -> str | None:
    """``sysparm_fields``: the configured fields plus what the cursor and dedup need."""
    if not spec.fields:
        return None
    wanted = [*spec.fields, spec.timestamp_field, spec.id_field, *RAW_FIELDS_EXTRA]
    return ",".join(dict.fromkeys(wanted))


def page_params(
    spec: TableSpec,
    after: Position,
    hi: str,
    limit: int,
    *,
    count: bool = False,
) -> dict[str, str]:
    """One keyset page of rows after ``after`` up to ``hi`` (``count``: ask for X-Total-Count)."""
    params = {
        "sysparm_query": page_query(
            spec.normalised_query, spec.timestamp_field, spec.id_field, after, hi
        ),
        "sysparm_limit": str(limit),
        "sysparm_display_value": "false" if spec.display_value == "false" else "all",
        "sysparm_exclude_reference_link": "true" if spec.exclude_reference_link else "false",
        "sysparm_no_count": "false" if count else "true",
        "sysparm_suppress_pagination_header": "true",
    }
    fields = requested_fields(spec)
    if fields:
        params["sysparm_fields"] = fields
    params.update(scope_params(spec.query_domain, spec.query_category))
    return params


def first_row_params(spec: TableSpec, after: Position, hi: str) -> dict[str, str]:
    """The first row of a window, its cursor fields only (where a sliced backfill starts)."""
    params = page_params(spec, after, hi, 1)
    params["sysparm_fields"] = f"{spec.timestamp_field},{spec.id_field}"
    return params


def scope_params(query_domain: bool, query_category: str | None) -> dict[str, str]:
    """Domain and query-category parameters every request about the table carries."""
    params: dict[str, str] = {}
    if query_category:
        params["sysparm_query_category"] = query_category
    if not query_domain:
        params["sysparm_query_no_domain"] = "true"
    return params


def probe_params(
    *,
    id_field: str,
    timestamp_field: str,
    query_domain: bool,
    query_category: str | None = None,
    query: str = "",
    count: bool = False,
) -> dict[str, str]:
    """The smallest request about a table: one row, raw cursor fields only, optionally under
    its (normalised) base query and with a count. The poller's clock probe and ``check``'s
    table probes."""
    params = {
        "sysparm_limit": "1",
        "sysparm_fields": f"{id_field},{timestamp_field}",
        "sysparm_display_value": "false",
        "sysparm_exclude_reference_link": "true",
        "sysparm_no_count": "false" if count else "true",
        "sysparm_suppress_pagination_header": "true",
    }
    if query:
        params["sysparm_query"] = query
    params.update(scope_params(query_domain, query_category))
    return params


def clock_probe_params(spec: TableSpec) -> dict[str, str]:
    """The poller's first request when no ``Date`` header was seen yet."""
    return probe_params(
        id_field=spec.id_field,
        timestamp_field=spec.timestamp_field,
        query_domain=spec.query_domain,
        query_category=spec.query_category,
    )
