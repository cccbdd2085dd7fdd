"""The Table API handlers: list and single-record reads, and the (rarely used) writes.

Order of work for a list request, as on a real instance (``servicenow-table-api.md`` §1-3):
rows visible at the read instant (primary, or the lagging replica for a query category) ->
domain separation -> ``sysparm_query`` (or ``<field>=<value>`` shorthand) -> count
(``X-Total-Count``) -> ORDERBY, or a deliberate per-request shuffle without one -> offset/limit
-> page-cost quota -> row ACLs (after the limit, so pages come back short) -> field ACLs and
projection -> rendering. Authentication, faults and rate limits run before, in the app's
middleware.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson
from aiohttp import web
from yarl import URL

from snowsource.emulator.auth import User
from snowsource.emulator.emulator import Emulator
from snowsource.emulator.encoded_query import (
    FieldType,
    ParsedQuery,
    QueryError,
    parse_encoded_query,
)
from snowsource.emulator.keyset import indexed_page, key_range
from snowsource.emulator.render import DisplayMode, Renderer, columns_for
from snowsource.emulator.schema import TableDef

EMULATOR: web.AppKey[Emulator] = web.AppKey("emulator", Emulator)
USER_KEY: web.RequestKey[User] = web.RequestKey("snowsource.emulator.user", User)

Row = Mapping[str, str]


#: Where the list handler leaves its row count for the request journal.
ROWS_KEY: web.RequestKey[int] = web.RequestKey("snowsource.emulator.rows", int)


def json_response(
    payload: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A JSON response with ServiceNow's content type."""
    return web.Response(
        body=orjson.dumps(payload),
        status=status,
        content_type="application/json",
        charset="utf-8",
        headers=headers,
    )


def error_response(
    status: int,
    message: str,
    detail: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """The Table API failure envelope ``{"error": {"message", "detail"}, "status": "failure"}``."""
    return json_response(
        {"error": {"message": message, "detail": detail}, "status": "failure"},
        status=status,
        headers=headers,
    )


def not_found() -> web.Response:
    """404 for a missing or ACL-hidden record (and v1's empty list)."""
    return error_response(
        404, "No Record found", "Record doesn't exist or ACL restricts the record retrieval"
    )


def invalid_table(table: str) -> web.Response:
    """400 for a table that does not exist."""
    return error_response(400, f"Invalid table {table}", f"Table {table} does not exist")


def forbidden() -> web.Response:
    """403 for a table-level ACL refusal."""
    return error_response(403, "Insufficient rights to query records", None)


def _flag(params: Mapping[str, str], name: str) -> bool:
    return params.get(name, "").strip().lower() == "true"


def _int(params: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(params.get(name, "").strip())
    except ValueError:
        return default


def _mode(params: Mapping[str, str]) -> DisplayMode:
    value = params.get("sysparm_display_value", "false").strip().lower()
    if value == "true":
        return "true"
    if value == "all":
        return "all"
    return "false"


def _requested_fields(params: Mapping[str, str]) -> list[str] | None:
    raw = params.get("sysparm_fields")
    if raw is None or not raw.strip():
        return None
    return [name.strip() for name in raw.split(",") if name.strip()]


class _DotRow(Mapping[str, str]):
    """A row that also answers dot-walked keys (``caller_id.name``) for the query evaluator."""

    __slots__ = ("_resolve", "base")

    def __init__(self, base: Row, resolve: Callable[[Row, str], str]) -> None:
        self.base = base
        self._resolve = resolve

    def __getitem__(self, key: str) -> str:
        if "." in key:
            return self._resolve(self.base, key)
        return self.base[key]

    def get(self, key: str, default: Any = None) -> Any:
        if "." in key:
            return self._resolve(self.base, key)
        return self.base.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)


class _Context:
    """What one read request needs: caller, read instant, lookups and a renderer."""

    def __init__(self, request: web.Request, table: str, tdef: TableDef) -> None:
        self.emu = request.app[EMULATOR]
        self.user: User = request[USER_KEY]
        self.params = request.query
        self.table = table
        self.tdef = tdef
        now = self.emu.clock.timestamp()
        # A query category routes the read to the (lagging) replica pool.
        category = self.params.get("sysparm_query_category")
        self.at = now - self.emu.replica_lag_seconds if category else now
        self.all_domains = (
            _flag(self.params, "sysparm_query_no_domain") and self.user.may_query_no_domain
        )
        self.prefs = self.emu.prefs(self.user)
        self.mode = _mode(self.params)
        self.requested = _requested_fields(self.params)
        hidden = self.emu.hidden_fields(table, self.user)
        self.columns = columns_for(tdef, self.requested, self.emu.tables, hidden)
        origin = request.url.origin()
        self.renderer = Renderer(
            mode=self.mode,
            exclude_reference_link=_flag(self.params, "sysparm_exclude_reference_link"),
            base_url=str(origin).rstrip("/"),
            tz=self.prefs.tz,
            date_format=self.prefs.date_format,
            time_format=self.prefs.time_format,
            tables=self.emu.tables,
            lookup=self.lookup,
        )

    def lookup(self, table: str, sys_id: str) -> Row | None:
        """A referenced row as this request sees it."""
        return self.emu.store.get(table, sys_id, self.at)

    def resolve_dotted(self, row: Row, name: str) -> str:
        """The value a dot-walked name reaches from ``row`` ("" when a step is empty)."""
        parts = name.split(".")
        current: Row | None = row
        tdef: TableDef | None = self.tdef
        for part in parts[:-1]:
            if current is None or tdef is None:
                return ""
            field = tdef.fields.get(part)
            if field is None or not field.reference:
                return ""
            ref = current.get(part, "")
            current = self.lookup(field.reference, ref) if ref else None
            tdef = self.emu.tables.get(field.reference)
        return current.get(parts[-1], "") if current is not None else ""

    def rows(self) -> list[Row]:
        """Every row the caller may see at the read instant (before query and ACLs)."""
        return self.emu.read_at(self.table, self.at, self.user, all_domains=self.all_domains)


def _shorthand(ctx: _Context) -> Callable[[Row], bool] | None:
    """``<field>=<value>`` parameters; display values are accepted for choices and references."""
    tests: list[tuple[str, frozenset[str]]] = []
    for key, value in ctx.params.items():
        field = ctx.tdef.fields.get(key)
        if key.startswith("sysparm_") or field is None:
            continue
        accepted = {value}
        if field.type == "choice":
            accepted |= {v for v, label in field.choices.items() if label.lower() == value.lower()}
        elif field.type == "boolean":
            accepted |= {value.lower()}
        elif field.type == "reference" and field.reference in ctx.emu.tables:
            target = ctx.emu.tables[field.reference]
            accepted |= {
                r["sys_id"]
                for r in ctx.emu.store.read(target.name, ctx.at)
                if r.get(target.display_field) == value
            }
        tests.append((key, frozenset(accepted)))
    if not tests:
        return None
    return lambda row: all(row.get(k, "") in ok for k, ok in tests)


def _link_header(
    url: URL, params: Mapping[str, str], total: int, limit: int, offset: int
) -> str | None:
    """``<url>;rel="first",...``; None when everything fits on one page."""
    if offset == 0 and total <= limit:
        return None
    last = ((total - 1) // limit) * limit if total > 0 else 0
    rels = [("first", 0)]
    if offset > 0:
        rels.append(("prev", max(0, offset - limit)))
    if offset + limit < total:
        rels.append(("next", offset + limit))
    rels.append(("last", last))
    base = dict(params)
    parts = []
    for rel, page_offset in rels:
        query = {**base, "sysparm_limit": str(limit), "sysparm_offset": str(page_offset)}
        parts.append(f'<{url.with_query(query)}>;rel="{rel}"')
    return ",".join(parts)


def _evaluated_page(
    ctx: _Context, parsed: ParsedQuery, offset: int, limit: int, query_text: str, *, dotted: bool
) -> tuple[list[Row], int]:
    """The page and the match count by the full evaluator: read, filter, sort, slice."""
    rows = ctx.rows()
    shorthand = None if query_text.strip() else _shorthand(ctx)
    if shorthand is not None:
        rows = [r for r in rows if shorthand(r)]
    matches_row = parsed.matches
    if dotted:
        wrapped = [w for w in (_DotRow(r, ctx.resolve_dotted) for r in rows) if matches_row(w)]
        matches: list[Row] = [w.base for w in parsed.sort(wrapped)]
        ordered = matches
    else:
        matches = [r for r in rows if matches_row(r)]
        ordered = parsed.sort(matches) if parsed.order_by else matches
    total = len(matches)
    if not parsed.order_by:
        # No ORDERBY: the order is unspecified on a real instance; shuffle so tests catch any
        # reliance on "natural" order. Sampling only what the page needs keeps this cheap.
        rng = random.Random(ctx.emu.next_request_seed())
        ordered = rng.sample(matches, min(total, offset + limit))
    return ordered[offset : offset + limit], total


def _lookup_table(request: web.Request) -> tuple[str, TableDef] | web.Response:
    emu = request.app[EMULATOR]
    table = request.match_info["table"]
    tdef = emu.table_def(table)
    if tdef is None:
        return invalid_table(table)
    if emu.is_denied(request[USER_KEY], table):
        return forbidden()
    return table, tdef


async def list_records(request: web.Request) -> web.Response:
    """``GET|HEAD /api/now[/v1|/v2]/table/{table}``."""
    found = _lookup_table(request)
    if isinstance(found, web.Response):
        return found
    table, tdef = found
    ctx = _Context(request, table, tdef)
    emu, params = ctx.emu, ctx.params
    limit, offset = _paging(ctx)
    query_text = params.get("sysparm_query", "")
    dotted: list[str] = []
    try:
        parsed = _parse_query(ctx, query_text, dotted)
    except QueryError as exc:
        return error_response(400, "Invalid query", str(exc))
    page, total = _matching_page(ctx, parsed, query_text, dotted, offset=offset, limit=limit)
    if _too_costly(ctx, page):
        return error_response(
            500,
            "Transaction cancelled: maximum execution time exceeded",
            "Transaction cancelled: maximum execution time exceeded. Check logs for error "
            "trace or enable glide.rest.debug property to verify REST request processing",
        )
    hidden_row = emu.row_acl(table, ctx.user)
    if hidden_row is not None:
        page = [r for r in page if not hidden_row(r)]
    result = ctx.renderer.rows(page, ctx.columns)
    if not result and request.match_info.get("version") == "v1" and emu.v1_empty_list_404:
        return not_found()
    headers = _paging_headers(request, params, total, limit=limit, offset=offset)
    request[ROWS_KEY] = len(result)
    return json_response({"result": result}, headers=headers)


def _paging(ctx: _Context) -> tuple[int, int]:
    """``sysparm_limit`` (the instance's default when absent or not positive, capped by its
    maximum) and ``sysparm_offset``."""
    emu, params = ctx.emu, ctx.params
    limit = _int(params, "sysparm_limit", emu.default_limit)
    if limit <= 0:
        limit = emu.default_limit
    if emu.max_limit is not None:
        limit = min(limit, emu.max_limit)
    return limit, max(0, _int(params, "sysparm_offset", 0))


def _parse_query(ctx: _Context, query_text: str, dotted: list[str]) -> ParsedQuery:
    """``sysparm_query`` parsed against the table's fields; the dot-walked fields it names are
    appended to ``dotted``. Raises ``QueryError``."""
    base_type = ctx.emu.field_type(ctx.table)

    def field_type(name: str) -> FieldType | None:
        found_type = base_type(name)
        if found_type is not None and "." in name:
            dotted.append(name)
        return found_type

    return parse_encoded_query(
        query_text,
        field_type=field_type,
        user_tz=ctx.prefs.tz,
        invalid_query_returns_no_rows=ctx.emu.invalid_query_returns_no_rows,
    )


def _matching_page(
    ctx: _Context,
    parsed: ParsedQuery,
    query_text: str,
    dotted: list[str],
    *,
    offset: int,
    limit: int,
) -> tuple[list[Row], int]:
    """The page of matching rows and the total: through the sys_id index when the query
    bounds ``sys_id`` (and names no dot-walked field), else by evaluating every row."""
    emu, table, params = ctx.emu, ctx.table, ctx.params
    need_total = not (
        _flag(params, "sysparm_no_count") and _flag(params, "sysparm_suppress_pagination_header")
    )
    keys = None if dotted or table in emu.views else key_range(parsed, "sys_id")
    if keys is None:
        return _evaluated_page(ctx, parsed, offset, limit, query_text, dotted=bool(dotted))
    return indexed_page(
        emu,
        table,
        parsed,
        keys,
        at=ctx.at,
        user=ctx.user,
        all_domains=ctx.all_domains,
        offset=offset,
        limit=limit,
        need_total=need_total,
    )


def _too_costly(ctx: _Context, page: list[Row]) -> bool:
    """Whether the page's cost passes the instance's maximum (its transaction would time out):
    rows times requested fields, twice with display values."""
    if ctx.emu.max_page_cost is None:
        return False
    width = len(ctx.requested) if ctx.requested else 1
    return len(page) * width * (2 if ctx.mode != "false" else 1) > ctx.emu.max_page_cost


def _paging_headers(
    request: web.Request, params: Mapping[str, str], total: int, *, limit: int, offset: int
) -> dict[str, str]:
    """``X-Total-Count`` and ``Link``, unless ``sysparm_no_count`` or
    ``sysparm_suppress_pagination_header`` leave them out."""
    headers: dict[str, str] = {}
    if not _flag(params, "sysparm_no_count"):
        headers["X-Total-Count"] = str(total)
    if not _flag(params, "sysparm_suppress_pagination_header"):
        link = _link_header(request.url, params, total, limit, offset)
        if link is not None:
            headers["Link"] = link
    return headers


def _find_one(ctx: _Context, sys_id: str) -> Row | None:
    if ctx.table in ctx.emu.views:
        # A view has no sys_id of its own; accept the base table's key.
        key = f"{ctx.emu.views[ctx.table].prefixes[0][0]}_sys_id"
        return next((r for r in ctx.rows() if r.get(key) == sys_id), None)
    row = ctx.emu.store.get(ctx.table, sys_id, ctx.at)
    if row is None:
        return None
    if not (ctx.all_domains or ctx.user.sees_domain(row.get("sys_domain", ""))):
        return None
    return row


async def get_record(request: web.Request) -> web.Response:
    """``GET|HEAD /api/now[/v1|/v2]/table/{table}/{sys_id}``."""
    found = _lookup_table(request)
    if isinstance(found, web.Response):
        return found
    table, tdef = found
    ctx = _Context(request, table, tdef)
    row = _find_one(ctx, request.match_info["sys_id"])
    hidden_row = ctx.emu.row_acl(table, ctx.user)
    if row is None or (hidden_row is not None and hidden_row(row)):
        return not_found()
    return json_response({"result": ctx.renderer.row(row, ctx.columns)})


# --- writes (not used by the daemon; kept small) ----------------------------------------------


def _read_only(table: str) -> web.Response:
    return error_response(403, "Operation Failed", f"Database view {table} is read-only")


async def _body_values(request: web.Request, tdef: TableDef) -> dict[str, str] | web.Response:
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return error_response(400, "Exception while reading request", "Cannot decode request body")
    if not isinstance(body, dict):
        return error_response(400, "Exception while reading request", "Body must be an object")
    values: dict[str, str] = {}
    for key, given in body.items():
        if key not in tdef.fields or (key.startswith("sys_") and key != "sys_domain"):
            continue  # unknown and system fields are silently ignored, as on a real instance
        value = given.get("value", "") if isinstance(given, dict) else given
        if value is None:
            values[key] = ""
        elif isinstance(value, bool):
            values[key] = "true" if value else "false"
        else:
            values[key] = str(value)
    return values


def _write_context(request: web.Request, *, existing: bool = False) -> _Context | web.Response:
    """A write's context, or the error answer (unknown table, read-only view, missing record)."""
    found = _lookup_table(request)
    if isinstance(found, web.Response):
        return found
    table, tdef = found
    ctx = _Context(request, table, tdef)
    if table in ctx.emu.views:
        return _read_only(table)
    if existing and _find_one(ctx, request.match_info["sys_id"]) is None:
        return not_found()
    return ctx


async def create_record(request: web.Request) -> web.Response:
    """``POST /api/now/table/{table}``: insert, answer 201 with the new record."""
    ctx = _write_context(request)
    if isinstance(ctx, web.Response):
        return ctx
    table, tdef = ctx.table, ctx.tdef
    values = await _body_values(request, tdef)
    if isinstance(values, web.Response):
        return values
    row = ctx.emu.insert(table, values, by=ctx.user.name)
    ctx.at = ctx.emu.clock.timestamp()
    location = f"{ctx.renderer.base_url}/api/now/table/{table}/{row['sys_id']}"
    return json_response(
        {"result": ctx.renderer.row(row, ctx.columns)}, status=201, headers={"Location": location}
    )


async def modify_record(request: web.Request) -> web.Response:
    """``PUT|PATCH /api/now/table/{table}/{sys_id}``."""
    ctx = _write_context(request, existing=True)
    if isinstance(ctx, web.Response):
        return ctx
    table, tdef = ctx.table, ctx.tdef
    sys_id = request.match_info["sys_id"]
    values = await _body_values(request, tdef)
    if isinstance(values, web.Response):
        return values
    row = ctx.emu.update(table, sys_id, values, by=ctx.user.name)
    return json_response({"result": ctx.renderer.row(row, ctx.columns)})


async def delete_record(request: web.Request) -> web.Response:
    """``DELETE /api/now/table/{table}/{sys_id}``: 204."""
    ctx = _write_context(request, existing=True)
    if isinstance(ctx, web.Response):
        return ctx
    ctx.emu.delete(ctx.table, request.match_info["sys_id"], by=ctx.user.name)
    return web.Response(status=204)
