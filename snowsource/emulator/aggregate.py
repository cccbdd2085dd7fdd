"""The Aggregate API: ``GET /api/now/stats/{table}?sysparm_count=true&sysparm_query=…``.

Answers ``{"result": {"stats": {"count": "N"}}}`` over the rows the caller's domains let it
see that match the query. A count cannot leave rows out the way a list can, so when a row ACL
hides any row of the table from the caller the instance refuses the whole count with 403.
"""

from __future__ import annotations

from aiohttp import web

from snowsource.emulator.encoded_query import QueryError, parse_encoded_query
from snowsource.emulator.tableapi import (
    EMULATOR,
    USER_KEY,
    error_response,
    forbidden,
    invalid_table,
    json_response,
)

__all__ = ["count_records"]


async def count_records(request: web.Request) -> web.Response:
    """``GET /api/now[/v1]/stats/{table}``: the count of the rows matching ``sysparm_query``."""
    emu = request.app[EMULATOR]
    user = request[USER_KEY]
    table = request.match_info["table"]
    if emu.table_def(table) is None:
        return invalid_table(table)
    if emu.is_denied(user, table):
        return forbidden()
    params = request.query
    all_domains = params.get("sysparm_query_no_domain", "").lower() == "true" and (
        user.may_query_no_domain
    )
    rows = emu.read_at(table, emu.clock.timestamp(), user, all_domains=all_domains)
    hidden = emu.row_acl(table, user)
    if hidden is not None and any(hidden(row) for row in rows):
        return error_response(
            403,
            "Insufficient rights to query records",
            f"An ACL restricts read access to some records of {table}; counting them is refused",
        )
    if params.get("sysparm_count", "").lower() != "true":
        return json_response({"result": {"stats": {}}})
    try:
        parsed = parse_encoded_query(
            params.get("sysparm_query", ""),
            field_type=emu.field_type(table),
            user_tz=emu.prefs(user).tz,
            invalid_query_returns_no_rows=emu.invalid_query_returns_no_rows,
        )
    except QueryError as exc:
        return error_response(400, "Invalid query", str(exc))
    count = sum(1 for row in rows if parsed.matches(row))
    return json_response({"result": {"stats": {"count": str(count)}}})
