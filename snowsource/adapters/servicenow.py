"""The ServiceNow Table API client: one HTTP session, authentication, and error classification.

- ``classify`` (``snow_classify``) is the one place an HTTP answer becomes an error class (SPEC §9).
- ``ServiceNowClient`` makes exactly one attempt per call (plus one token refresh and retry on a
  401 with OAuth2); retrying is the caller's policy (``snowsource.core.retry``). One client, and so
  one concurrency semaphore, is shared by every table of the process: the limit is per instance.
- Secrets (passwords, client secrets, API keys, tokens) never appear in an exception message or
  in anything the client logs; an ``Authorization`` header is only ever handed to aiohttp. The
  client registers each with the redactor (tokens as soon as they are issued), and every message
  built from a server's or a library's text passes through it.
- Bodies are streamed with a limit (``max_response_bytes``): memory stays bounded whatever the
  server sends, and a page over the limit is a ``ResponseTooLargeError`` (halve the page).
"""

from __future__ import annotations

import asyncio
import math
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import quote, urlsplit

import aiohttp
from pydantic import SecretStr

from snowsource import __version__
from snowsource.adapters.snow_classify import (
    Invalid,
    classify,
    is_json_type,
    loads,
    parse_retry_after,
    rows_or_none,
)
from snowsource.core.errors import (
    AuthError,
    ConfigError,
    ResponseTooLargeError,
    RetriableError,
    ServiceNowError,
)
from snowsource.core.tableapi import Page
from snowsource.observability.redact import redact, register_credentials, register_secret

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ApiKeyAuth",
    "Auth",
    "BasicAuth",
    "OAuth2Auth",
    "ServiceNowClient",
    "classify",
    "parse_retry_after",
]
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

USER_AGENT: Final = f"snowsource/{__version__}"
TABLE_API_PATH: Final = "/api/now/v2/table/"

# A token is renewed this long before the instance says it expires, so a request never leaves
# with a token that dies in flight; capped at half the lifetime for very short-lived tokens.
TOKEN_RENEW_MARGIN_SECONDS: Final = 60.0
# ServiceNow's default access-token lifetime, used when the token response omits expires_in.
DEFAULT_TOKEN_LIFETIME_SECONDS: Final = 1800.0
#: ``snow.http.max.response.bytes``: a larger Table API body is refused without being read.
DEFAULT_MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
# An error answer is only classified and quoted, never parsed for rows: its first MiB is plenty.
_ERROR_BODY_LIMIT: Final = 1024 * 1024
_READ_CHUNK: Final = 64 * 1024


# --------------------------------------------------------------------------------------------
# Authentication settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BasicAuth:
    """HTTP basic authentication as ``username``."""

    username: str
    password: SecretStr


@dataclass(frozen=True)
class OAuth2Auth:
    """OAuth2 bearer tokens from the instance's token endpoint (``{base_url}/oauth_token.do``).

    ``username``/``password`` are required for the ``password`` grant and ignored otherwise.
    """

    grant_type: Literal["client_credentials", "password"]
    client_id: str
    client_secret: SecretStr
    token_url: str | None = None
    username: str | None = None
    password: SecretStr | None = None

    def __post_init__(self) -> None:
        if self.grant_type == "password" and (self.username is None or self.password is None):
            raise ValueError("the OAuth2 password grant needs a username and a password")


@dataclass(frozen=True)
class ApiKeyAuth:
    """A ServiceNow API key, sent as the ``x-sn-apikey`` header."""

    api_key: SecretStr


Auth = BasicAuth | OAuth2Auth | ApiKeyAuth | None


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


@dataclass(frozen=True)
class _Token:
    access: str
    refresh: str | None
    renew_at: float  # time.monotonic() after which the token is renewed before use


class ServiceNowClient(AsyncResource):
    """Async client for the Table API of one instance; an async context manager.

    ``on_date`` receives the ``Date`` header of every Table API / ``get_json`` response, errors
    included (the instance clock, SPEC §5). ``on_response`` receives ``(table, status, seconds)``
    for every attempt, for metrics: ``status`` is 0 when no response arrived (timeout,
    connection error) and ``table`` is the request path for ``get_json``.
    """

    def __init__(
        self,
        base_url: str,
        auth: Auth,
        *,
        connect_timeout: float = 10,
        request_timeout: float = 60,
        max_concurrent_requests: int = 8,
        proxy: str | None = None,
        ca_file: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        on_date: Callable[[str], None] | None = None,
        on_response: Callable[[str, int, float], None] | None = None,
    ) -> None:
        if max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be >= 1")
        if max_response_bytes < 1:
            raise ValueError("max_response_bytes must be >= 1")
        # Messages name URLs, so no URL may carry credentials (they belong in ``auth``).
        for what, url in (("base_url", base_url), ("token_url", getattr(auth, "token_url", None))):
            if url is not None and "@" in urlsplit(url).netloc:
                raise ValueError(f"{what} must not contain credentials (user:password@)")
        self._base_url = base_url.rstrip("/")
        self._auth = auth
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._max_concurrent = max_concurrent_requests
        self._proxy = proxy
        self._ca_file = ca_file
        self._max_response_bytes = max_response_bytes
        self._on_date = on_date
        self._on_response = on_response
        self._semaphore = asyncio.Semaphore(max_concurrent_requests)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._token: _Token | None = None
        self._token_lock = asyncio.Lock()
        self._token_url = (
            (auth.token_url or f"{self._base_url}/oauth_token.do")
            if isinstance(auth, OAuth2Auth)
            else None
        )
        _register_auth_secrets(auth, proxy)

    @property
    def base_url(self) -> str:
        """The instance URL without a trailing slash."""
        return self._base_url

    async def start(self) -> None:
        """Open the HTTP session (``async with client:`` does it)."""
        if self._closed:
            raise RuntimeError("ServiceNowClient cannot be reopened after close()")
        if self._session is None:
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
            connector = aiohttp.TCPConnector(ssl=ssl_option, limit=self._max_concurrent + 1)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=self._request_timeout, sock_connect=self._connect_timeout
                ),
                headers={"Accept": "application/json", "User-Agent": USER_AGENT},
                trust_env=False,
            )

    async def close(self, deadline: Deadline | None = None) -> None:
        """Close the HTTP session; safe to call more than once."""
        del deadline  # closing a session does not wait on the network
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def aclose(self) -> None:
        """``close()``, under the name aiohttp users expect."""
        await self.close()

    # ---- public requests ----------------------------------------------------------------

    async def get_page(
        self, table: str, params: Mapping[str, str], *, label: str | None = None
    ) -> Page:
        """``GET /api/now/v2/table/{table}`` once; the rows, or the classified error raised.

        Timeouts and connection errors raise ``RetriableError``. With OAuth2 a 401 refreshes the
        token and retries once; a second 401 raises ``AuthError``. ``label`` (default: the
        table) is what ``on_response`` reports, e.g. the table's alias for metrics.
        """
        url = f"{self._base_url}{TABLE_API_PATH}{quote(table, safe='')}"
        response = await self._request(label or table, url, params)
        rows = (
            rows_or_none(response.body, response.content_type) if response.status == 200 else None
        )
        if rows is None:
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
        )

    async def get_json(self, path: str, params: Mapping[str, str]) -> Any:
        """``GET {base_url}{path}`` once and return the decoded JSON document (for probes).

        Errors as for ``get_page``; any 200 JSON document is accepted (no ``result`` list needed).
        """
        if not path.startswith("/"):
            path = "/" + path
        url = f"{self._base_url}{path}"
        response = await self._request(path, url, params)
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

    async def _request(self, label: str, url: str, params: Mapping[str, str]) -> _Response:
        session = self._require_session()
        query = dict(params)
        async with self._semaphore:
            headers, token = await self._auth_headers(stale=None)
            response = await self._send(session, label, url, query, headers)
            if response.status == 401 and isinstance(self._auth, OAuth2Auth):
                # The token may have been revoked or expired early: renew it once and retry.
                headers, _ = await self._auth_headers(stale=token)
                response = await self._send(session, label, url, query, headers)
        return response

    async def _send(
        self,
        session: aiohttp.ClientSession,
        label: str,
        url: str,
        query: dict[str, str],
        headers: dict[str, str],
    ) -> _Response:
        started = time.monotonic()
        try:
            async with session.get(
                url, params=query, headers=headers, proxy=self._proxy, allow_redirects=False
            ) as resp:
                body = await self._read_body(resp, f"GET {url}", label, started)
                result = _Response(
                    status=resp.status,
                    body=body,
                    content_type=resp.headers.get("Content-Type"),
                    retry_after=resp.headers.get("Retry-After"),
                    date=resp.headers.get("Date"),
                    total_count=resp.headers.get("X-Total-Count"),
                    elapsed=time.monotonic() - started,
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

    # ---- authentication -----------------------------------------------------------------

    async def _auth_headers(self, *, stale: str | None) -> tuple[dict[str, str], str | None]:
        """Headers authenticating one request, and the bearer token used (OAuth2 only).

        ``stale`` is a token the instance just refused: it is never handed out again.
        """
        auth = self._auth
        if auth is None:
            return {}, None
        if isinstance(auth, BasicAuth):
            encoded = aiohttp.encode_basic_auth(auth.username, auth.password.get_secret_value())
            return {"Authorization": encoded}, None
        if isinstance(auth, ApiKeyAuth):
            return {"x-sn-apikey": auth.api_key.get_secret_value()}, None
        token = await self._bearer(auth, stale=stale)
        return {"Authorization": f"Bearer {token}"}, token

    def _usable(self, token: _Token | None, stale: str | None) -> bool:
        return token is not None and token.access != stale and time.monotonic() < token.renew_at

    async def _bearer(self, auth: OAuth2Auth, *, stale: str | None) -> str:
        token = self._token
        if token is not None and self._usable(token, stale):
            return token.access
        # Single flight: concurrent callers queue here and reuse the token the first one got.
        async with self._token_lock:
            token = self._token
            if token is not None and self._usable(token, stale):
                return token.access
            self._token = await self._new_token(auth, token)
            return self._token.access

    async def _new_token(self, auth: OAuth2Auth, previous: _Token | None) -> _Token:
        if previous is not None and previous.refresh:
            try:
                return await self._token_request(
                    auth,
                    {
                        "grant_type": "refresh_token",
                        "refresh_token": previous.refresh,
                        "client_id": auth.client_id,
                        "client_secret": auth.client_secret.get_secret_value(),
                    },
                    keep_refresh=previous.refresh,
                )
            except AuthError:
                pass  # refresh token expired or revoked: start over with the original grant
        form = {
            "grant_type": auth.grant_type,
            "client_id": auth.client_id,
            "client_secret": auth.client_secret.get_secret_value(),
        }
        if auth.grant_type == "password":
            assert auth.username is not None
            assert auth.password is not None
            form["username"] = auth.username
            form["password"] = auth.password.get_secret_value()
        return await self._token_request(auth, form, keep_refresh=None)

    async def _token_request(
        self, auth: OAuth2Auth, form: dict[str, str], *, keep_refresh: str | None
    ) -> _Token:
        session = self._require_session()
        url = self._token_url
        assert url is not None
        where = f"POST {url} (OAuth2 {form['grant_type']} grant)"
        started = time.monotonic()
        try:
            async with session.post(
                url, data=form, proxy=self._proxy, allow_redirects=False
            ) as resp:
                status = resp.status
                body = await self._read_body(resp, where, None, started)
                content_type = resp.headers.get("Content-Type")
                retry_after = resp.headers.get("Retry-After")
                date = resp.headers.get("Date")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._transport_error(where, exc, time.monotonic() - started) from None
        doc = loads(body) if is_json_type(content_type) else Invalid("not a JSON content type")
        if status != 200 or not isinstance(doc, dict):
            raise classify(
                status,
                body,
                content_type,
                retry_after,
                where=where,
                date=date,
                token_endpoint=True,
            )
        access = doc.get("access_token")
        if not isinstance(access, str) or not access:
            raise AuthError(
                f"{where}: the token endpoint answered without an access_token "
                f"(keys: {', '.join(sorted(map(str, doc))) or 'none'}); check snow.auth.oauth.*",
                status=status,
            )
        refresh = doc.get("refresh_token")
        register_secret(access, transient=True)
        if isinstance(refresh, str):
            register_secret(refresh, transient=True)
        lifetime = _lifetime(doc.get("expires_in"))
        margin = min(TOKEN_RENEW_MARGIN_SECONDS, lifetime / 2)
        return _Token(
            access=access,
            refresh=refresh if isinstance(refresh, str) and refresh else keep_refresh,
            renew_at=started + lifetime - margin,
        )


def _lifetime(value: Any) -> float:
    """``expires_in`` as seconds; ServiceNow's default lifetime when absent or unusable."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return DEFAULT_TOKEN_LIFETIME_SECONDS
    if not math.isfinite(seconds) or seconds <= 0:
        return DEFAULT_TOKEN_LIFETIME_SECONDS
    return seconds


def _register_auth_secrets(auth: Auth, proxy: str | None) -> None:
    """Tell the redactor every secret this client will ever send."""
    if isinstance(auth, BasicAuth):
        register_credentials(auth.username, auth.password.get_secret_value())
    elif isinstance(auth, ApiKeyAuth):
        register_secret(auth.api_key.get_secret_value())
    elif isinstance(auth, OAuth2Auth):
        register_secret(auth.client_secret.get_secret_value())
        if auth.password is not None:
            register_credentials(auth.username, auth.password.get_secret_value())
    if proxy is not None:
        parts = urlsplit(proxy)
        register_credentials(parts.username, parts.password)
