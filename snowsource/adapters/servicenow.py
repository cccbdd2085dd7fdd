"""The ServiceNow Table API client: one HTTP session, authentication, and error classification.

- ``classify`` is the one place an HTTP answer becomes an error class (SPEC §9): what the caller
  does next (retry, wait, halve the page, fail the table) follows from the class alone.
- ``ServiceNowClient`` makes exactly one attempt per call (plus one token refresh and retry on a
  401 with OAuth2); retrying is the caller's policy (``snowsource.core.retry``). One client, and so
  one concurrency semaphore, is shared by every table of the process: the limit is per instance.
- Secrets (passwords, client secrets, API keys, tokens) never appear in an exception message or
  in anything the client logs; an ``Authorization`` header is only ever handed to aiohttp.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Final, Literal
from urllib.parse import quote, urlsplit

import aiohttp
import orjson
from pydantic import SecretStr

from snowsource import __version__
from snowsource.core.errors import (
    AuthError,
    ConfigError,
    ExecutionTimeExceededError,
    RateLimitedError,
    RetriableError,
    ServiceNowError,
    TableError,
)
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

USER_AGENT: Final = f"snowsource/{__version__}"
TABLE_API_PATH: Final = "/api/now/v2/table/"

# A token is renewed this long before the instance says it expires, so a request never leaves
# with a token that dies in flight; capped at half the lifetime for very short-lived tokens.
TOKEN_RENEW_MARGIN_SECONDS: Final = 60.0
# ServiceNow's default access-token lifetime, used when the token response omits expires_in.
DEFAULT_TOKEN_LIFETIME_SECONDS: Final = 1800.0

# The instance's quota rule cancels a transaction with this text (SPEC §9, API notes §3.4).
_EXECUTION_TIME_EXCEEDED: Final = "maximum execution time exceeded"
# How much of an error body is searched / quoted: enough for any envelope, bounded for HTML.
_BODY_SCAN_LIMIT: Final = 65536
_MESSAGE_LIMIT: Final = 300


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


class _Invalid:
    """Marker for a body that is not JSON (kept distinct from a JSON ``null``)."""


_INVALID: Final = _Invalid()


def _loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return _INVALID


def _is_json_type(content_type: str | None) -> bool:
    if content_type is None:
        return True  # nothing claimed; the body decides
    media = content_type.split(";", 1)[0].strip().lower()
    return media.endswith(("/json", "+json"))


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."


def _envelope_text(doc: Any) -> str:
    """``message (detail)`` of a ServiceNow error envelope, or of an OAuth error body."""
    if not isinstance(doc, dict):
        return ""
    error = doc.get("error")
    parts: list[str] = []
    if isinstance(error, dict):
        for key in ("message", "detail"):
            value = error.get(key)
            if isinstance(value, str) and value.strip():
                parts.append(value)
    elif isinstance(error, str) and error.strip():
        # Token endpoint style: {"error": "server_error", "error_description": "access_denied"}
        parts.append(error)
        description = doc.get("error_description")
        if isinstance(description, str) and description.strip():
            parts.append(description)
    if not parts:
        return ""
    text = parts[0] if len(parts) == 1 else f"{parts[0]} ({'; '.join(parts[1:])})"
    return _shorten(text)


def _body_problem(doc: Any, content_type: str | None, size: int) -> str | None:
    """Why a 200 body is not a usable list page, or None when it is."""
    if not _is_json_type(content_type):
        media = (content_type or "").split(";", 1)[0].strip()
        hint = (
            " (an HTML page: instance hibernating or in maintenance, or a proxy/login page)"
            if "html" in media.lower()
            else ""
        )
        return f"expected JSON, got {media or 'no content type'}{hint}"
    if isinstance(doc, _Invalid):
        return f"body is not valid JSON ({size} bytes; truncated or corrupted)"
    if not isinstance(doc, dict):
        return "JSON body is not an object"
    if "error" in doc:
        # A transaction cancelled while streaming leaves partial "result" plus "error".
        return f"body carries an error: {_envelope_text(doc) or 'no message'}"
    result = doc.get("result")
    if not isinstance(result, list):
        return 'JSON body has no "result" list'
    if not all(isinstance(row, dict) for row in result):
        return 'JSON "result" holds something other than records'
    return None


def parse_retry_after(value: str | None, *, date: str | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP-date).

    An HTTP-date is measured against ``date`` (the response's own ``Date`` header, so a skewed
    local clock does not matter) or, without one, the local clock. Unparseable -> None.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    when = _http_date(text)
    if when is None:
        return None
    reference = _http_date(date) if date is not None else None
    return max(0.0, when - (time.time() if reference is None else reference))


def _http_date(text: str) -> float | None:
    """Epoch seconds of an HTTP-date (always GMT), or None."""
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def classify(
    status: int,
    body: bytes,
    content_type: str | None,
    retry_after: str | None,
    *,
    where: str = "",
    date: str | None = None,
    token_endpoint: bool = False,
) -> ServiceNowError:
    """The error for a response that is not a usable answer: THE status -> error mapping.

    - 429 -> ``RateLimitedError`` with ``retry_after`` from the header (seconds or HTTP-date).
    - 500 whose error text says "maximum execution time exceeded" -> ``ExecutionTimeExceededError``.
    - 408, 425, 5xx, redirects, unexpected 2xx -> ``RetriableError``.
    - 401 -> ``AuthError``.
    - 400, 403, 404 and any other status >= 400 -> ``TableError`` with the envelope's message.
    - 200 with HTML, non-JSON, truncated JSON, or JSON without a ``"result"`` list ->
      ``RetriableError("malformed response ...")``.

    ``where`` prefixes the message (e.g. ``GET https://.../incident``). ``date`` is the response's
    ``Date`` header, the reference for an HTTP-date ``Retry-After``. With ``token_endpoint`` the
    response came from the OAuth token endpoint, where every 4xx but 408/425/429 means the
    credentials or client settings are wrong (``AuthError``), never a table problem.
    """
    prefix = f"{where}: " if where else ""
    doc = _loads(body)
    envelope = _envelope_text(doc)
    said = f": {envelope}" if envelope else ""

    if 200 <= status < 300:
        problem = _body_problem(doc, content_type, len(body)) if status == 200 else None
        if problem is None:
            problem = f"unexpected HTTP {status} for a read"
        if _EXECUTION_TIME_EXCEEDED in envelope.lower():
            return ExecutionTimeExceededError(
                f"{prefix}transaction cancelled by the instance's quota{said}", status=status
            )
        return RetriableError(
            f"{prefix}malformed response (HTTP {status}): {problem}", status=status
        )

    if 300 <= status < 400:
        return RetriableError(
            f"{prefix}unexpected redirect (HTTP {status}); if it persists, check snow.url "
            f"(scheme, host, path)",
            status=status,
        )

    if status == 429:
        seconds = parse_retry_after(retry_after, date=date)
        wait = f"; Retry-After {seconds:g} s" if seconds is not None else "; no Retry-After"
        return RateLimitedError(
            f"{prefix}rate limited (HTTP 429){said}{wait}", retry_after=seconds, status=status
        )

    if status == 500:
        text = envelope
        if not text and isinstance(doc, _Invalid):
            # Some front ends render the quota cancellation as a page rather than an envelope.
            text = body[:_BODY_SCAN_LIMIT].decode("utf-8", "replace")
        if _EXECUTION_TIME_EXCEEDED in text.lower():
            return ExecutionTimeExceededError(
                f"{prefix}HTTP 500: transaction cancelled by the instance's quota "
                f"(maximum execution time exceeded); the page is too expensive{said}",
                status=status,
            )

    if status in (408, 425) or status >= 500:
        kind = "" if envelope or _is_json_type(content_type) else " (non-JSON body)"
        return RetriableError(f"{prefix}HTTP {status}{said}{kind}", status=status)

    if token_endpoint:
        return AuthError(
            f"{prefix}the OAuth token endpoint refused the request (HTTP {status}){said}; "
            f"check snow.auth.oauth.client.id and snow.auth.oauth.client.secret (and the "
            f"username/password for the password grant), that the OAuth application is active, "
            f"and for client_credentials that the instance enables that grant "
            f"(glide.oauth.inbound.client.credential.grant_type.enabled) and the application has "
            f"an OAuth Application User",
            status=status,
        )

    if status == 401:
        return AuthError(
            f"{prefix}HTTP 401{said}: the instance refused the credentials; check snow.auth.*",
            status=status,
        )
    if status == 403:
        return TableError(
            f"{prefix}HTTP 403{said}: the integration user may not read this; grant it read "
            f"access (table ACL / role), and the query_no_domain_table_api role when the "
            f"table sets query.domain: false",
            status=status,
        )
    if status == 400:
        return TableError(
            f"{prefix}HTTP 400{said}: bad request (unknown table or invalid parameter); check the "
            f"table name and its settings",
            status=status,
        )
    if status == 404:
        return TableError(
            f"{prefix}HTTP 404{said}: not found (missing, or hidden by an ACL)", status=status
        )
    return TableError(f"{prefix}HTTP {status}{said}", status=status)


def _rows_or_none(body: bytes, content_type: str | None) -> list[dict[str, Any]] | None:
    """The page's rows, or None when the body is unusable (then ``classify`` says why)."""
    if not _is_json_type(content_type):
        return None
    doc = _loads(body)
    if _body_problem(doc, content_type, len(body)) is not None:
        return None
    rows: list[dict[str, Any]] = doc["result"]
    return rows


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
        on_date: Callable[[str], None] | None = None,
        on_response: Callable[[str, int, float], None] | None = None,
    ) -> None:
        if max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be >= 1")
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
            _rows_or_none(response.body, response.content_type) if response.status == 200 else None
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
        if response.status == 200 and _is_json_type(response.content_type):
            doc = _loads(response.body)
            if not isinstance(doc, _Invalid):
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
                body = await resp.read()
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
        else:
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        # The cause is not chained: aiohttp exceptions may carry request headers.
        return RetriableError(self._scrub(f"{where}: {what}"))

    def _secrets(self) -> list[str]:
        auth = self._auth
        values: list[SecretStr | str | None] = []
        if isinstance(auth, BasicAuth):
            values.append(auth.password)
        elif isinstance(auth, ApiKeyAuth):
            values.append(auth.api_key)
        elif isinstance(auth, OAuth2Auth):
            values += [auth.client_secret, auth.password]
            if self._token is not None:
                values += [self._token.access, self._token.refresh]
        if self._proxy is not None:
            values.append(urlsplit(self._proxy).password)
        plain = [v.get_secret_value() if isinstance(v, SecretStr) else v for v in values]
        return [v for v in plain if v]

    def _scrub(self, text: str) -> str:
        """Belt and braces: mask any secret that a foreign error message might echo."""
        for secret in self._secrets():
            text = text.replace(secret, "***")
        return text

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
                body = await resp.read()
                content_type = resp.headers.get("Content-Type")
                retry_after = resp.headers.get("Retry-After")
                date = resp.headers.get("Date")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._transport_error(where, exc, time.monotonic() - started) from None
        doc = _loads(body) if _is_json_type(content_type) else _INVALID
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
