"""``classify``: the one mapping from a Table API answer to an error class (SPEC §9)."""

from __future__ import annotations

import orjson
import pytest

from snowsource.adapters.servicenow import classify, parse_retry_after
from snowsource.core.errors import (
    AuthError,
    ExecutionTimeExceededError,
    RateLimitedError,
    RetriableError,
    ServiceNowError,
    TableError,
)

JSON = "application/json;charset=UTF-8"
HTML = "text/html; charset=utf-8"


def envelope(message: str, detail: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "detail": detail}, "status": "failure"})


@pytest.mark.parametrize(
    ("status", "body", "content_type", "expected"),
    [
        (408, b"", None, RetriableError),
        (425, b"", None, RetriableError),
        (500, envelope("Internal error"), JSON, RetriableError),
        (502, b"<html>Bad gateway</html>", HTML, RetriableError),
        (503, b"<html>down</html>", HTML, RetriableError),
        (504, b"", None, RetriableError),
        (599, b"", None, RetriableError),
        (
            401,
            envelope("User Not Authenticated", "Required to provide Auth information"),
            JSON,
            AuthError,
        ),
        (400, envelope("Invalid table nope", "Table nope does not exist"), JSON, TableError),
        (403, envelope("Insufficient rights to query records"), JSON, TableError),
        (404, envelope("No Record found"), JSON, TableError),
        (405, b"", None, TableError),
        (406, b"", None, TableError),
        (418, b"", None, TableError),
        (302, b"", None, RetriableError),
        (202, b"", None, RetriableError),
    ],
)
def test_status_mapping(
    status: int, body: bytes, content_type: str | None, expected: type[ServiceNowError]
) -> None:
    err = classify(status, body, content_type, None)
    assert type(err) is expected
    assert err.status == status


def test_envelope_message_and_detail_are_quoted() -> None:
    err = classify(400, envelope("Invalid table nope", "Table nope does not exist"), JSON, None)
    assert "Invalid table nope" in str(err)
    assert "Table nope does not exist" in str(err)
    err = classify(403, envelope("Insufficient rights to query records"), JSON, None)
    assert "Insufficient rights to query records" in str(err)
    assert "read access" in str(err)


def test_where_prefixes_the_message() -> None:
    err = classify(404, envelope("No Record found"), JSON, None, where="GET https://x/api")
    assert str(err).startswith("GET https://x/api: HTTP 404")


@pytest.mark.parametrize(
    "message",
    [
        "Transaction cancelled: maximum execution time exceeded",
        "TRANSACTION CANCELLED: Maximum Execution Time Exceeded",
    ],
)
def test_500_max_execution_time(message: str) -> None:
    err = classify(500, envelope(message), JSON, None)
    assert type(err) is ExecutionTimeExceededError
    assert isinstance(err, RetriableError)
    assert err.status == 500


def test_500_max_execution_time_in_detail_or_html() -> None:
    err = classify(
        500, envelope("Transaction cancelled", "maximum execution time exceeded"), JSON, None
    )
    assert type(err) is ExecutionTimeExceededError
    html = b"<html><body>Transaction cancelled: maximum execution time exceeded</body></html>"
    assert type(classify(500, html, HTML, None)) is ExecutionTimeExceededError


def test_other_5xx_with_the_phrase_is_plain_retriable() -> None:
    # Only a 500 is the quota cancellation; a gateway's 503 is a plain retry.
    err = classify(503, envelope("maximum execution time exceeded"), JSON, None)
    assert type(err) is RetriableError


def test_429_with_seconds() -> None:
    err = classify(429, envelope("Rate limit exceeded"), JSON, "7")
    assert isinstance(err, RateLimitedError)
    assert err.retry_after == 7.0
    assert err.status == 429
    assert "Rate limit exceeded" in str(err)


def test_429_with_http_date_measured_against_the_response_date() -> None:
    err = classify(
        429,
        b"",
        None,
        "Tue, 29 Sep 2026 07:00:12 GMT",
        date="Tue, 29 Sep 2026 07:00:00 GMT",
    )
    assert isinstance(err, RateLimitedError)
    assert err.retry_after == 12.0


def test_429_without_retry_after() -> None:
    err = classify(429, b"", None, None)
    assert isinstance(err, RateLimitedError)
    assert err.retry_after is None
    err = classify(429, b"", None, "soon")
    assert isinstance(err, RateLimitedError)
    assert err.retry_after is None


@pytest.mark.parametrize(
    ("value", "date", "expected"),
    [
        ("0", None, 0.0),
        (" 30 ", None, 30.0),
        ("-5", None, 0.0),
        ("1.5", None, 1.5),
        ("inf", None, None),
        ("", None, None),
        (None, None, None),
        ("garbage", None, None),
        ("Tue, 29 Sep 2026 06:59:00 GMT", "Tue, 29 Sep 2026 07:00:00 GMT", 0.0),
        ("Tue, 29 Sep 2026 07:01:00 GMT", "Tue, 29 Sep 2026 07:00:00 GMT", 60.0),
    ],
)
def test_parse_retry_after(value: str | None, date: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, date=date) == expected


def test_retry_after_http_date_without_response_date_uses_local_clock() -> None:
    # A date far in the past means "now": no wait, never negative.
    assert parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT") == 0.0
    far = parse_retry_after("Fri, 01 Jan 2100 00:00:00 GMT")
    assert far is not None
    assert far > 1e9


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [
        (b"<html><body>Your instance is hibernating</body></html>", HTML, "HTML"),
        (b"this is not json", "text/plain", "expected JSON"),
        (b"this is not json", JSON, "not valid JSON"),
        (b'{"result": [{"sys_id": "a"}, {"sys_id"', JSON, "not valid JSON"),
        (b'{"records": []}', JSON, '"result" list'),
        (b'{"result": {"sys_id": "a"}}', JSON, '"result" list'),
        (b'{"result": ["a"]}', JSON, "other than records"),
        (b"[]", JSON, "not an object"),
        (b"", JSON, "not valid JSON"),
    ],
)
def test_200_malformed_bodies_are_retriable(body: bytes, content_type: str, reason: str) -> None:
    err = classify(200, body, content_type, None)
    assert type(err) is RetriableError
    assert "malformed response" in str(err)
    assert reason in str(err)


def test_200_with_partial_result_and_error_envelope() -> None:
    body = orjson.dumps(
        {
            "result": [{"sys_id": "a"}],
            "error": {"message": "Transaction cancelled: maximum execution time exceeded"},
        }
    )
    assert type(classify(200, body, JSON, None)) is ExecutionTimeExceededError
    body = orjson.dumps({"result": [], "error": {"message": "something broke"}})
    err = classify(200, body, JSON, None)
    assert type(err) is RetriableError
    assert "something broke" in str(err)


def test_token_endpoint_refusals_are_auth_errors() -> None:
    body = orjson.dumps({"error_description": "access_denied", "error": "server_error"})
    for status in (400, 401, 403, 404):
        err = classify(status, body, JSON, None, token_endpoint=True)
        assert type(err) is AuthError, status
        assert "server_error" in str(err)
        assert "client.secret" in str(err)
    assert type(classify(503, b"", None, None, token_endpoint=True)) is RetriableError
    assert type(classify(429, b"", None, "3", token_endpoint=True)) is RateLimitedError


def test_long_envelope_text_is_shortened() -> None:
    err = classify(400, envelope("x" * 5000), JSON, None)
    assert len(str(err)) < 1000
