"""The Table API as plain values (SPEC §5): a table's request parameters, built here only,
and the page a list request answers.

The poller's page requests and clock probe and ``snowsource check``'s probes ask for the same
table the same way (fields, display values, domain, category), so a check that passes predicts
what the daemon will see. Every builder takes the stream's :class:`TableSpec` (a table's, or its
delete stream's from ``core/deletes``), so the scope of a request cannot be built twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from snowsource.core.cursor import Position, page_query
from snowsource.core.governance import governed_projection
from snowsource.core.query import split_groups
from snowsource.core.records import RAW_FIELDS_EXTRA
from snowsource.core.table import TableSpec


@dataclass(frozen=True)
class Page:
    """One Table API list response.

    ``date`` is the raw ``Date`` header (the instance clock), ``total_count`` the
    ``X-Total-Count`` header when the request asked for a count, ``elapsed`` the seconds from
    sending the request to having read the whole body.
    """

    rows: list[dict[str, Any]]
    status: int
    date: str | None
    total_count: int | None
    elapsed: float
    # A ``Link`` header named a ``next`` page (only asked for by discovery's readability probe).
    next_link: bool = False


def requested_fields(spec: TableSpec) -> str | None:
    """``sysparm_fields``: the configured fields plus what the cursor and dedup need, less the
    columns ``fields.exclude`` matches (they never leave the instance)."""
    if not spec.fields:
        return None
    wanted = [
        *governed_projection(spec.fields, spec.governance),
        spec.timestamp_field,
        spec.id_field,
        *RAW_FIELDS_EXTRA,
    ]
    return ",".join(dict.fromkeys(wanted))


def page_params(
    spec: TableSpec,
    after: Position,
    hi: str,
    limit: int,
    *,
    count: bool = False,
    offset: int = 0,
) -> dict[str, str]:
    """One keyset page of rows after ``after`` up to ``hi`` (``count``: ask for X-Total-Count;
    ``offset``: skip that many rows first, a sliced backfill's placing page)."""
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
    if offset:
        params["sysparm_offset"] = str(offset)
    fields = requested_fields(spec)
    if fields:
        params["sysparm_fields"] = fields
    params.update(scope_params(spec.query_domain, spec.query_category))
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
    spec: TableSpec, *, with_query: bool = False, count: bool = False
) -> dict[str, str]:
    """The smallest request about a stream: one row, raw cursor fields only, optionally under
    its normalised base query and with a count. The poller's clock probe and ``check``'s
    probes of a table."""
    return _one_row(
        spec, f"{spec.id_field},{spec.timestamp_field}", with_query=with_query, count=count
    )


def clock_probe_params(spec: TableSpec) -> dict[str, str]:
    """The poller's first request when no ``Date`` header was seen yet."""
    return probe_params(spec)


def stream_probe_params(spec: TableSpec) -> dict[str, str]:
    """One row under the base query with the fields the stream's pages ask for, and a count:
    ``check``'s question to a delete stream (are its audit rows readable, with documentkey?)."""
    return _one_row(spec, requested_fields(spec), with_query=True, count=True)


def sample_params(spec: TableSpec, *, display: bool = False) -> dict[str, str]:
    """One row of the table without a query: every field the user can see, or (``display``)
    the timestamp field with its display value, which shows the user's time zone."""
    if display:
        return _one_row(spec, spec.timestamp_field, with_query=False, display_value="all")
    return _one_row(spec, None, with_query=False)


def schema_params(query: str, fields: tuple[str, ...], limit: int) -> dict[str, str]:
    """A read of the schema tables (``sys_db_object``, ``sys_dictionary``) for typed records:
    the same for the daemon and ``check``, which both go through ``dictionary_reader``."""
    return {
        "sysparm_query": query,
        "sysparm_fields": ",".join(fields),
        "sysparm_limit": str(limit),
        "sysparm_exclude_reference_link": "true",
        "sysparm_no_count": "true",
        "sysparm_suppress_pagination_header": "true",
    }


def user_params(user_name: str) -> dict[str, str]:
    """The integration user's own ``sys_user`` row: its time zone."""
    return {
        "sysparm_query": f"user_name={user_name}",
        "sysparm_fields": "user_name,time_zone",
        "sysparm_limit": "1",
        "sysparm_display_value": "false",
        "sysparm_no_count": "true",
    }


def _one_row(
    spec: TableSpec,
    fields: str | None,
    *,
    with_query: bool,
    count: bool = False,
    display_value: str = "false",
) -> dict[str, str]:
    params = {
        "sysparm_limit": "1",
        "sysparm_display_value": display_value,
        "sysparm_exclude_reference_link": "true",
        "sysparm_no_count": "false" if count else "true",
        "sysparm_suppress_pagination_header": "true",
    }
    if fields:
        params["sysparm_fields"] = fields
    if with_query and spec.normalised_query:
        params["sysparm_query"] = spec.normalised_query
    params.update(scope_params(spec.query_domain, spec.query_category))
    return params


def current_rows_params(spec: TableSpec, ids: Sequence[str]) -> dict[str, str]:
    """Those of ``ids`` that are rows of the table now, under its base query: id and cursor
    timestamp only. The delete stream asks before it tombstones a row that may have been
    re-created with the same id (``core.deletes.superseded``)."""
    wanted = f"{spec.id_field}IN{','.join(ids)}"
    groups = split_groups(spec.normalised_query)
    # Every ^NQ group is its own AND-group: the id condition must bind to each of them.
    query = "^NQ".join(f"{group}^{wanted}" if group else wanted for group in groups)
    params = {
        "sysparm_query": query,
        "sysparm_fields": f"{spec.id_field},{spec.timestamp_field}",
        "sysparm_limit": str(len(ids)),
        "sysparm_display_value": "false",
        "sysparm_exclude_reference_link": "true",
        "sysparm_no_count": "true",
        "sysparm_suppress_pagination_header": "true",
    }
    params.update(scope_params(spec.query_domain, spec.query_category))
    return params
