"""The one redactor: every configured secret in every encoding, and credential-shaped text."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from urllib.parse import quote, quote_plus

import orjson
import pytest

from snowsource.observability.redact import (
    REDACTED,
    redact,
    redact_value,
    register_credentials,
    register_secret,
)
from tests.secrets_support import empty_secret_registry

PASSWORD = "p@ss w0rd/+&=%Ü"


@pytest.fixture(autouse=True)
def _empty_registry() -> Iterator[None]:
    with empty_secret_registry():
        yield


@pytest.mark.parametrize(
    "encode",
    [
        lambda s: s,
        lambda s: quote(s, safe=""),
        lambda s: quote_plus(s, safe=""),
        lambda s: orjson.dumps(s).decode()[1:-1],
        lambda s: repr(s.encode())[2:-1],
        lambda s: base64.b64encode(s.encode()).decode(),
    ],
    ids=["plain", "url", "url-plus", "json", "bytes-repr", "base64"],
)
def test_a_registered_secret_is_blanked_in_every_encoding(encode: object) -> None:
    register_secret(PASSWORD)
    text = f"before {encode(PASSWORD)} after"  # type: ignore[operator]
    assert redact(text) == f"before {REDACTED} after"


def test_basic_credentials_are_blanked_as_a_header_carries_them() -> None:
    register_credentials("svc.user", PASSWORD)
    header = base64.b64encode(f"svc.user:{PASSWORD}".encode()).decode()
    assert header not in redact(f"got header {header}")
    # The username alone is not a secret: diagnostics name it.
    assert "svc.user" in redact("user svc.user was refused")


def test_sasl_plain_exchange_bytes_are_blanked() -> None:
    register_secret(PASSWORD)
    dump = repr(f"svc\x00svc\x00{PASSWORD}".encode())
    assert redact(dump) == f"b'svc\\x00svc\\x00{REDACTED}'"


def test_a_secret_containing_another_is_blanked_whole() -> None:
    register_secret("abcdef")
    register_secret("xxabcdefyy")
    assert redact("v=xxabcdefyy;") == f"v={REDACTED};"


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        ("grant_type=password&client_id=c&client_secret=S3cr3t&password=Pw1", "S3cr3t"),
        ("grant_type=password&client_id=c&client_secret=S3cr3t&password=Pw1", "Pw1"),
        ('{"access_token":"tok-123456","token_type":"Bearer"}', "tok-123456"),
        ("{'refresh_token': 'rt-987654'}", "rt-987654"),
        ("Authorization: Basic c3ZjOnNlY3JldA==", "c3ZjOnNlY3JldA=="),
        ("authorization=Bearer eyJhbGciOi.J9.sig", "eyJhbGciOi"),
        ("GET /x?sysparm_limit=1&api_key=AK-0042&x=1", "AK-0042"),
        ('<input name="x-sn-apikey" value="k"> x-sn-apikey=AK-7777', "AK-7777"),
    ],
)
def test_credential_shaped_text_is_blanked_without_knowing_the_value(text: str, leak: str) -> None:
    assert leak not in redact(text)


@pytest.mark.parametrize(
    "prose",
    [
        "snow.auth.password: field required",
        "the OAuth token endpoint refused the request (HTTP 401)",
        "OAuth2 password grant needs a username",
        "grant_type=password",
    ],
)
def test_diagnostics_that_only_name_a_secret_key_are_kept(prose: str) -> None:
    assert redact(prose) == prose


def test_redact_value_walks_nested_structures_and_exceptions() -> None:
    register_secret(PASSWORD)
    value = {"trace": [f"x {PASSWORD}"], PASSWORD: (1, b"b " + PASSWORD.encode())}
    assert PASSWORD not in orjson.dumps(redact_value(value)).decode()
    assert PASSWORD not in str(redact_value(RuntimeError(f"echo {PASSWORD}")))


def test_rotating_tokens_are_bounded_but_recent_ones_are_known() -> None:
    for i in range(100):
        register_secret(f"token-{i:04d}-abcdef", transient=True)
    assert redact("token-0099-abcdef") == REDACTED
    assert redact("token-0000-abcdef") == "token-0000-abcdef"  # rotated out long ago


def test_short_values_are_not_treated_as_secrets() -> None:
    register_secret("ab")
    assert redact("ab cab") == "ab cab"
