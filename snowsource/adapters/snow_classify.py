"""From a Table API (or OAuth token endpoint) answer to a result or an error class (SPEC §9).

``classify`` is THE status -> error mapping: what the caller does next (retry, wait, halve the
page, fail the table) follows from the class alone. Text the server echoed (error envelopes, HTML
pages) is redacted before it goes into a message, because messages are stored in the table status,
printed by ``check`` and logged.
"""

from __future__ import annotations

import email.utils
import math
import time
from datetime import UTC
from typing import Any, Final

import orjson

from snowsource.core.errors import (
    AuthError,
    ExecutionTimeExceededError,
    RateLimitedError,
    RetriableError,
    ServiceNowError,
    TableError,
)
from snowsource.observability.redact import redact

__all__ = ["Invalid", "classify", "is_json_type", "loads", "parse_retry_after", "rows_or_none"]

# The instance's quota rule cancels a transaction with this text (SPEC §9, API notes §3.4).
_EXECUTION_TIME_EXCEEDED: Final = "maximum execution time exceeded"
# How much of an error body is searched / quoted: enough for any envelope, bounded for HTML.
_BODY_SCAN_LIMIT: Final = 65536
_MESSAGE_LIMIT: Final = 300


class Invalid:
    """A body that is not JSON (kept distinct from a JSON ``null``), and why the decoder said so."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def loads(body: bytes) -> Any:
    """The decoded JSON document, or ``Invalid``. orjson refuses nesting deeper than 1024 levels,
    so a hostile 100 000-deep document costs no stack and no more memory than its bytes."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return Invalid(str(exc))


def is_json_type(content_type: str | None) -> bool:
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
    # Servers echo requests back (the token form with its secrets, an Authorization header).
    return _shorten(redact(text))


def _body_problem(doc: Any, content_type: str | None, size: int) -> str | None:
    """Why a 200 body is not a usable list page, or None when it is."""
    if not is_json_type(content_type):
        media = (content_type or "").split(";", 1)[0].strip()
        hint = (
            " (an HTML page: instance hibernating or in maintenance, or a proxy/login page)"
            if "html" in media.lower()
            else ""
        )
        return f"expected JSON, got {media or 'no content type'}{hint}"
    if isinstance(doc, Invalid):
        return f"body is not valid JSON ({size} bytes: {doc.reason}; truncated or corrupted)"
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


def parse_rate_limit(
    limit: str | None, reset: str | None, *, date: str | None = None
) -> tuple[int, float, float] | None:
    """``X-RateLimit-Limit`` and ``X-RateLimit-Reset`` as (requests per hour, the reset as sent,
    the window's end as an epoch on this process's clock), or None when either is absent or
    unparseable.

    The reset is an epoch on the instance's clock: shifted by how far the answer's ``Date``
    header is from the local clock, so a skewed local clock does not move the window."""
    try:
        per_hour = int((limit or "").strip())
        window = float((reset or "").strip())
    except ValueError:
        return None
    if per_hour < 1 or not math.isfinite(window):
        return None
    instance_now = _http_date(date) if date is not None else None
    ends = window if instance_now is None else window + time.time() - instance_now
    return per_hour, window, ends


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
    - 408, 425, 5xx, redirects, unexpected 2xx -> ``RetriableError`` (202: the instance dropped a
      request queued too long on its session; never a page, SPEC §14.1).
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
    doc = loads(body)
    envelope = _envelope_text(doc)
    said = f": {envelope}" if envelope else ""

    if 200 <= status < 300:
        return _not_a_page(status, doc, body, content_type, prefix=prefix, envelope=envelope)
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
    if status == 500 and _quota_cancelled(doc, body, envelope):
        return ExecutionTimeExceededError(
            f"{prefix}HTTP 500: transaction cancelled by the instance's quota "
            f"(maximum execution time exceeded); the page is too expensive{said}",
            status=status,
        )
    if status in (408, 425) or status >= 500:
        kind = "" if envelope or is_json_type(content_type) else " (non-JSON body)"
        return RetriableError(f"{prefix}HTTP {status}{said}{kind}", status=status)
    return _refused(status, prefix=prefix, said=said, token_endpoint=token_endpoint)


def _not_a_page(
    status: int, doc: Any, body: bytes, content_type: str | None, *, prefix: str, envelope: str
) -> ServiceNowError:
    """A 2xx that is no usable answer: never a page, always worth asking again (SPEC §14.1)."""
    if status == 202:
        # The instance's session synchronizer drops a request queued behind too many others of
        # the same session (API notes §3.4b): nothing was served, ask again.
        return RetriableError(
            f"{prefix}HTTP 202 with no page: the instance dropped the request because too many "
            f"requests were queued on its session (session synchronization); retrying",
            status=status,
        )
    if _EXECUTION_TIME_EXCEEDED in envelope.lower():
        said = f": {envelope}" if envelope else ""
        return ExecutionTimeExceededError(
            f"{prefix}transaction cancelled by the instance's quota{said}", status=status
        )
    problem = _body_problem(doc, content_type, len(body)) if status == 200 else None
    return RetriableError(
        f"{prefix}malformed response (HTTP {status}): "
        f"{problem or f'unexpected HTTP {status} for a read'}",
        status=status,
    )


def _quota_cancelled(doc: Any, body: bytes, envelope: str) -> bool:
    """A 500 that is the instance's quota cancelling a transaction too expensive for it."""
    text = envelope
    if not text and isinstance(doc, Invalid):
        # Some front ends render the quota cancellation as a page rather than an envelope.
        text = body[:_BODY_SCAN_LIMIT].decode("utf-8", "replace")
    return _EXECUTION_TIME_EXCEEDED in text.lower()


def _refused(status: int, *, prefix: str, said: str, token_endpoint: bool) -> ServiceNowError:
    """A 4xx that retrying cannot cure: what the user should fix."""
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


def rows_or_none(body: bytes, content_type: str | None) -> list[dict[str, Any]] | None:
    """The page's rows, or None when the body is unusable (then ``classify`` says why)."""
    if not is_json_type(content_type):
        return None
    doc = loads(body)
    if _body_problem(doc, content_type, len(body)) is not None:
        return None
    rows: list[dict[str, Any]] = doc["result"]
    return rows
