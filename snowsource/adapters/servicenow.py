"""The ServiceNow Table API client: its session pool, authentication, and error classification.

- ``classify`` (``snow_classify``) is the one place an HTTP answer becomes an error class (SPEC §9).
- ``ServiceNowClient`` makes exactly one attempt per call (plus one token refresh and retry on a
  401 with OAuth2); retrying is the caller's policy (``snowsource.core.retry``). One client, and so
  one session pool (``session_pool``: sticky sessions, the AIMD limit, round-robin grants across
  requesters), is shared by every table of the process: the limit is per instance (SPEC §14.1).
- Secrets (passwords, client secrets, API keys, tokens) never appear in an exception message or
  in anything the client logs; an ``Authorization`` header is only ever handed to aiohttp. The
  configured ones are known to the redactor from the configuration walk (``engine.wiring``
  registers them before it builds a client), the tokens the instance issues as soon as they are
  issued, and every message built from a server's or a library's text passes through it.
- Bodies are streamed with a limit (``max_response_bytes``): memory stays bounded whatever the
  server sends, and a page over the limit is a ``ResponseTooLargeError`` (halve the page).
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlsplit

import aiohttp
import structlog

from snowsource import __version__
from snowsource.adapters.session_pool import SESSION_COOKIE, Lease, PoolStatus, SessionPool
from snowsource.adapters.snow_auth import (
    ApiKeyAuth,
    Auth,
    Authenticator,
    BasicAuth,
    FormAnswer,
    OAuth2Auth,
)
from snowsource.adapters.snow_classify import (
    Invalid,
    classify,
    is_json_type,
    loads,
    parse_rate_limit,
    parse_retry_after,
    rows_or_none,
)
from snowsource.core.errors import (
    ConfigError,
    ResponseTooLargeError,
    RetriableError,
    ServiceNowError,
)
from snowsource.core.grants import Priority
from snowsource.core.rate_budget import BudgetStatus, RateBudget
from snowsource.core.retry import RETRY_AFTER_CAP_SECONDS
from snowsource.core.tableapi import Page
from snowsource.observability import metrics
from snowsource.observability.redact import redact

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ApiKeyAuth",
    "Auth",
    "BasicAuth",
    "OAuth2Auth",
    "PoolStatus",
    "Priority",
    "ServiceNowClient",
    "classify",
    "parse_retry_after",
]
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.pause import Pause
from snowsource.runtime.resource import AsyncResource

_log = structlog.get_logger("snowsource.servicenow")

USER_AGENT: Final = f"snowsource/{__version__}"
TABLE_API_PATH: Final = "/api/now/v2/table/"

#: ``snow.http.max.response.bytes``: a larger Table API body is refused without being read.
DEFAULT_MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
# An error answer is only classified and quoted, never parsed for rows: its first MiB is plenty.
_ERROR_BODY_LIMIT: Final = 1024 * 1024
_READ_CHUNK: Final = 64 * 1024


# --------------------------------------------------------------------------------------------
# Responses and their classification
# --------------------------------------------------------------------------------------------


def _os_reason(error: OSError) -> str:
    """``Connection refused``, ``Name or service not known``: the system's words for it."""
    if error.errno is not None and error.errno > 0:
        return os.strerror(error.errno)
    return error.strerror or str(error) or type(error).__name__


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes
    content_type: str | None
    retry_after: str | None
    date: str | None
    total_count: str | None
    elapsed: float
    link: str | None = None


class ServiceNowClient(AsyncResource):
    """Async client for the Table API of one instance; an async context manager.

    ``on_date`` receives the ``Date`` header of every Table API / ``get_json`` response, errors
    included (the instance clock, SPEC §5). ``on_response`` receives ``(table, status, seconds)``
    for every attempt, for metrics: ``status`` is 0 when no response arrived (timeout,
    connection error) and ``table`` is the request path for ``get_json``.

    Requests go out through the session pool: at most ``max_concurrent_requests`` at a time, over
    at most ``ceil(max_concurrent_requests / requests_per_session)`` sticky sessions.
    """

    def __init__(
        self,
        base_url: str,
        auth: Auth,
        *,
        connect_timeout: float = 10,
        request_timeout: float = 60,
        max_concurrent_requests: int = 8,
        requests_per_session: int = 1,
        proxy: str | None = None,
        ca_file: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        on_date: Callable[[str], None] | None = None,
        on_response: Callable[[str, int, float], None] | None = None,
        max_retry_after: float = RETRY_AFTER_CAP_SECONDS,
        max_requests_per_hour: int | None = None,
        rate_limit_headroom: float = 0.1,
    ) -> None:
        if max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be >= 1")
        if requests_per_session < 1:
            raise ValueError("requests_per_session must be >= 1")
        if max_response_bytes < 1:
            raise ValueError("max_response_bytes must be >= 1")
        # Messages name URLs, so no URL may carry credentials (they belong in ``auth``).
        for what, url in (("base_url", base_url), ("token_url", getattr(auth, "token_url", None))):
            if url is not None and "@" in urlsplit(url).netloc:
                raise ValueError(f"{what} must not contain credentials (user:password@)")
        self._base_url = base_url.rstrip("/")
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._max_concurrent = max_concurrent_requests
        self._per_session = requests_per_session
        self._proxy = proxy
        self._ca_file = ca_file
        self._max_response_bytes = max_response_bytes
        self._on_date = on_date
        self._on_response = on_response
        # A 429's Retry-After holds every request of the process, not just the one refused
        # (SPEC §15.3): the instance's rate-limit rule counts per user.
        self._pause = Pause()
        self._max_retry_after = max_retry_after
        # Paced to the instance's rate-limit rule when it announces one, and to the configured
        # hourly budget (SPEC §15.3); the pool grants requests within it.
        self._budget = RateBudget(
            max_requests_per_hour, headroom=rate_limit_headroom, burst=max_concurrent_requests
        )
        self._connector: aiohttp.TCPConnector | None = None
        self._pool: SessionPool | None = None
        # The token endpoint keeps no cookie: a token request must not open a pool session.
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._auth = Authenticator(auth, base_url=self._base_url, post=self._post_form)

    @property
    def base_url(self) -> str:
        """The instance URL without a trailing slash."""
        return self._base_url

    def pool_status(self) -> PoolStatus | None:
        """The session pool now (limit, sessions, in flight); None before start and after close."""
        return self._pool.status() if self._pool is not None else None

    def rate_budget(self) -> BudgetStatus | None:
        """The rate budget now (None: none configured nor announced by the instance)."""
        return self._pool.budget_status() if self._pool is not None else None

    def set_members(self, members: int) -> None:
        """How many processes share the rate budget: each takes ``1 / members`` of it."""
        self._budget.set_members(members)

    def paused_for(self) -> float:
        """Seconds until requests may leave again after a 429 with ``Retry-After`` (0: now)."""
        return self._pause.remaining()

    def saturated(self) -> bool:
        """Whether a request made now would wait for the session pool: every slot of its
        concurrency limit is taken, or requests wait already (False before start, after close)."""
        if self._pool is None:
            return False
        status = self._pool.status()
        return status.waiting > 0 or status.in_flight >= status.limit

    async def start(self) -> None:
        """Open the connector and the session pool (``async with client:`` does it)."""
        if self._closed:
            raise RuntimeError("ServiceNowClient cannot be reopened after close()")
        if self._pool is None:
            ssl_option: ssl.SSLContext | bool = True
            if self._ca_file is not None:
                ssl_option = ssl.create_default_context()
                try:
                    # Extra trust on top of the system store (SPEC §2: "extra CA bundle").
                    ssl_option.load_verify_locations(cafile=self._ca_file)
                except (OSError, ssl.SSLError) as exc:
                    raise ConfigError(
                        [("snow.http.ca.file", f"cannot load CA bundle {self._ca_file}: {exc}")]
                    ) from None
            # One connection per request in flight, plus one for the token endpoint.
            self._connector = aiohttp.TCPConnector(ssl=ssl_option, limit=self._max_concurrent + 1)
            self._session = self._client_session(aiohttp.DummyCookieJar())
            self._pool = SessionPool(
                self._client_session,
                max_concurrent_requests=self._max_concurrent,
                requests_per_session=self._per_session,
                budget=self._budget,
            )
            metrics.SNOW_PAUSE_SECONDS.set_function(self._pause.remaining)

    def _client_session(self, jar: aiohttp.abc.AbstractCookieJar) -> aiohttp.ClientSession:
        """A client session over the shared connector, with its own cookie jar."""
        return aiohttp.ClientSession(
            connector=self._connector,
            connector_owner=False,
            cookie_jar=jar,
            timeout=aiohttp.ClientTimeout(
                total=self._request_timeout, sock_connect=self._connect_timeout
            ),
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
            trust_env=False,
        )

    async def close(self, deadline: Deadline | None = None) -> None:
        """Close the pool's sessions and the connector; safe to call more than once."""
        self._closed = True
        pool, self._pool = self._pool, None
        session, self._session = self._session, None
        connector, self._connector = self._connector, None
        if pool is not None:
            await pool.close(deadline)
        if session is not None:
            await session.close()
        if connector is not None:
            await connector.close()

    async def aclose(self) -> None:
        """``close()``, under the name aiohttp users expect."""
        await self.close()

    # ---- public requests ----------------------------------------------------------------

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        requester: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page:
        """``GET /api/now/v2/table/{table}`` once; the rows, or the classified error raised.

        Timeouts and connection errors raise ``RetriableError``, and so does any 2xx that is not
        a page (a 202, a 200 without a JSON ``result`` list). With OAuth2 a 401 refreshes the
        token and retries once; a second 401 raises ``AuthError``. ``label`` (default: the
        table) is what ``on_response`` reports, e.g. the table's alias for metrics.
        ``requester`` (default: the label) is whose turn the request takes in the pool: every
        concurrent reader of one table passes the table's alias and shares its turn.
        """
        url = f"{self._base_url}{TABLE_API_PATH}{quote(table, safe='')}"
        label = label or table
        response = await self._request(label, url, params, requester or label, priority)
        rows = (
            rows_or_none(response.body, response.content_type) if response.status == 200 else None
        )
        if rows is None:
            if 200 <= response.status < 300:
                metrics.SNOW_NON_PAGE_RESPONSES.labels(
                    table=label, status=str(response.status)
                ).inc()
            raise self._classify(response, url)
        total: int | None = None
        if response.total_count is not None:
            try:
                total = int(response.total_count)
            except ValueError:
                total = None
        return Page(
            rows=rows,
            status=response.status,
            date=response.date,
            total_count=total,
            elapsed=response.elapsed,
            next_link='rel="next"' in (response.link or ""),
        )

    async def get_json(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        requester: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Any:
        """``GET {base_url}{path}`` once and return the decoded JSON document (for probes).

        Errors as for ``get_page``; any 200 JSON document is accepted (no ``result`` list needed).
        ``requester`` (default: the path) and ``priority`` as for ``get_page``.
        """
        if not path.startswith("/"):
            path = "/" + path
        url = f"{self._base_url}{path}"
        response = await self._request(path, url, params, requester or path, priority)
        if response.status == 200 and is_json_type(response.content_type):
            doc = loads(response.body)
            if not isinstance(doc, Invalid):
                return doc
        raise self._classify(response, url)

    # ---- plumbing -----------------------------------------------------------------------

    def _classify(self, response: _Response, url: str) -> ServiceNowError:
        return classify(
            response.status,
            response.body,
            response.content_type,
            response.retry_after,
            where=f"GET {url}",
            date=response.date,
        )

    def _require_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            state = "closed" if self._closed else "not started (use 'async with')"
            raise RuntimeError(f"ServiceNowClient is {state}")
        return self._session

    async def _request(
        self,
        label: str,
        url: str,
        params: Mapping[str, str],
        requester: str,
        priority: Priority,
    ) -> _Response:
        self._require_session()
        assert self._pool is not None
        query = dict(params)
        async with self._pool.lease(requester, priority) as lease:
            headers, token = await self._auth.headers(stale=None)
            response = await self._send(lease, label, url, query, headers)
            if response.status == 401 and self._auth.refreshes_tokens:
                # The token may have been revoked or expired early: renew it once and retry
                # (in a new session: the pool dropped the refused one's cookies).
                headers, _ = await self._auth.headers(stale=token)
                response = await self._send(lease, label, url, query, headers)
        return response

    async def _send(
        self,
        lease: Lease,
        label: str,
        url: str,
        query: dict[str, str],
        headers: dict[str, str],
    ) -> _Response:
        await self._pause.wait()
        started = time.monotonic()
        try:
            async with lease.session.get(
                url, params=query, headers=headers, proxy=self._proxy, allow_redirects=False
            ) as resp:
                self._hold_on_retry_after(resp)
                session_cookie = resp.cookies.get(SESSION_COOKIE)
                assert self._pool is not None
                rate_limit = parse_rate_limit(
                    resp.headers.get("X-RateLimit-Limit"),
                    resp.headers.get("X-RateLimit-Reset"),
                    date=resp.headers.get("Date"),
                )
                if rate_limit is not None:
                    self._pool.rate_limit_seen(*rate_limit)
                self._pool.answered(
                    lease,
                    resp.status,
                    session_id=session_cookie.value if session_cookie is not None else None,
                    retry_after=bool(resp.headers.get("Retry-After", "").strip()),
                )
                body = await self._read_body(resp, f"GET {url}", label, started)
                result = _Response(
                    status=resp.status,
                    body=body,
                    content_type=resp.headers.get("Content-Type"),
                    retry_after=resp.headers.get("Retry-After"),
                    date=resp.headers.get("Date"),
                    total_count=resp.headers.get("X-Total-Count"),
                    elapsed=time.monotonic() - started,
                    link=resp.headers.get("Link"),
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            elapsed = time.monotonic() - started
            if self._on_response is not None:
                self._on_response(label, 0, elapsed)
            raise self._transport_error(f"GET {url}", exc, elapsed) from None
        if result.date is not None and self._on_date is not None:
            self._on_date(result.date)
        if self._on_response is not None:
            self._on_response(label, result.status, result.elapsed)
        return result

    def _hold_on_retry_after(self, resp: aiohttp.ClientResponse) -> None:
        """A 429 naming a time holds every later request of the process until then."""
        if resp.status != 429:
            return
        wait = parse_retry_after(resp.headers.get("Retry-After"), date=resp.headers.get("Date"))
        if wait is None:
            return  # semaphores full: the pool halves its limit instead (SPEC §14.1)
        wait = min(wait, self._max_retry_after)
        if self._pause.hold_for(wait):
            metrics.SNOW_PAUSES.inc()
            _log.warning(
                "the instance answered 429 with Retry-After: no ServiceNow request of this "
                "process leaves until then",
                retry_after_s=round(wait, 3),
            )

    def _transport_error(self, where: str, exc: BaseException, elapsed: float) -> RetriableError:
        if isinstance(exc, TimeoutError):
            what = f"no complete answer within {elapsed:.1f} s (timeout)"
        elif isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(
            exc, aiohttp.ClientSSLError
        ):
            # aiohttp's own text names an "ssl:default" context even for http URLs.
            what = f"cannot connect to {exc.host}:{exc.port} ({_os_reason(exc.os_error)})"
        else:
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLCertVerificationError):
            what += (
                "; the instance's TLS certificate was refused: give its CA bundle in "
                "snow.http.ca.file, and use the host name the certificate names in snow.url"
            )
        # The cause is not chained: aiohttp exceptions may carry request headers.
        return RetriableError(redact(f"{where}: {what}"))

    async def _read_body(
        self, resp: aiohttp.ClientResponse, where: str, label: str | None, started: float
    ) -> bytes:
        """The body, streamed; never more than the limit in memory (SPEC §13.2).

        A 200 over ``max_response_bytes`` raises ``ResponseTooLargeError`` (the poller halves
        the page); an error answer is cut at its first MiB, which is all ``classify`` reads.
        """
        limit = self._max_response_bytes
        if resp.status != 200:
            limit = min(limit, _ERROR_BODY_LIMIT)
        declared = resp.content_length
        chunks: list[bytes] = []
        size = 0
        if declared is None or declared <= limit or resp.status != 200:
            async for chunk in resp.content.iter_chunked(_READ_CHUNK):
                size += len(chunk)
                if size > limit:
                    break
                chunks.append(chunk)
            else:
                return b"".join(chunks)
        if resp.status != 200:
            return b"".join(chunks)
        if label is not None and self._on_response is not None:
            self._on_response(label, resp.status, time.monotonic() - started)
        seen = f"{declared} bytes announced" if declared is not None else f"over {size} bytes"
        raise ResponseTooLargeError(
            f"{where}: response body larger than snow.http.max.response.bytes ({limit} bytes; "
            f"{seen}); lower batch.size for this table (meanwhile the page size is halved), "
            f"or raise snow.http.max.response.bytes",
            status=resp.status,
        )

    async def _post_form(self, url: str, form: dict[str, str], where: str) -> FormAnswer:
        """One POST to the token endpoint (outside the pool: it opens no pool session)."""
        session = self._require_session()
        await self._pause.wait()
        started = time.monotonic()
        try:
            async with session.post(
                url, data=form, proxy=self._proxy, allow_redirects=False
            ) as resp:
                self._hold_on_retry_after(resp)
                return FormAnswer(
                    status=resp.status,
                    body=await self._read_body(resp, where, None, started),
                    content_type=resp.headers.get("Content-Type"),
                    retry_after=resp.headers.get("Retry-After"),
                    date=resp.headers.get("Date"),
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._transport_error(where, exc, time.monotonic() - started) from None
