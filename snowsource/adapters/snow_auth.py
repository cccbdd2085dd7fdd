"""How the ServiceNow client authenticates: the settings per auth type, and OAuth2 tokens.

``Authenticator.headers`` gives the headers of one request. Basic and API-key headers are fixed;
OAuth2 bearer tokens are fetched from the token endpoint (through the ``post`` callable the client
gives, so this module knows no HTTP session), renewed ahead of their expiry, refreshed with the
refresh token when there is one, and fetched single-flight: concurrent callers reuse one answer.
A token renewal never touches the session pool, so it keeps every session open (SPEC §14.1).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import aiohttp
from pydantic import SecretStr

from snowsource.adapters.snow_classify import Invalid, classify, is_json_type, loads
from snowsource.core.errors import AuthError
from snowsource.observability.redact import register_secret

__all__ = [
    "ApiKeyAuth",
    "Auth",
    "Authenticator",
    "BasicAuth",
    "FormAnswer",
    "OAuth2Auth",
]

# A token is renewed this long before the instance says it expires, so a request never leaves
# with a token that dies in flight; capped at half the lifetime for very short-lived tokens.
TOKEN_RENEW_MARGIN_SECONDS: Final = 60.0
# ServiceNow's default access-token lifetime, used when the token response omits expires_in.
DEFAULT_TOKEN_LIFETIME_SECONDS: Final = 1800.0


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


@dataclass(frozen=True)
class FormAnswer:
    """The token endpoint's answer to one form POST."""

    status: int
    body: bytes
    content_type: str | None
    retry_after: str | None
    date: str | None


# ``post(url, form, where)``: one POST; transport failures raise the client's RetriableError.
FormPost = Callable[[str, dict[str, str], str], Awaitable[FormAnswer]]


@dataclass(frozen=True)
class _Token:
    access: str
    refresh: str | None
    renew_at: float  # time.monotonic() after which the token is renewed before use


class Authenticator:
    """The headers authenticating each request of one client."""

    def __init__(self, auth: Auth, *, base_url: str, post: FormPost) -> None:
        self._auth = auth
        self._post = post
        self._token: _Token | None = None
        self._lock = asyncio.Lock()
        self.token_url = (
            (auth.token_url or f"{base_url}/oauth_token.do")
            if isinstance(auth, OAuth2Auth)
            else None
        )

    @property
    def refreshes_tokens(self) -> bool:
        """True for OAuth2: a 401 may mean an expired token, worth one renewal and retry."""
        return isinstance(self._auth, OAuth2Auth)

    async def headers(self, *, stale: str | None) -> tuple[dict[str, str], str | None]:
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
        async with self._lock:
            token = self._token
            if token is not None and self._usable(token, stale):
                return token.access
            self._token = await self._new_token(auth, token)
            return self._token.access

    async def _new_token(self, auth: OAuth2Auth, previous: _Token | None) -> _Token:
        if previous is not None and previous.refresh:
            try:
                return await self._token_request(
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
        return await self._token_request(form, keep_refresh=None)

    async def _token_request(self, form: dict[str, str], *, keep_refresh: str | None) -> _Token:
        url = self.token_url
        assert url is not None
        where = f"POST {url} (OAuth2 {form['grant_type']} grant)"
        started = time.monotonic()
        answer = await self._post(url, form, where)
        doc = loads(answer.body)
        if not is_json_type(answer.content_type):
            doc = Invalid("not a JSON content type")
        if answer.status != 200 or not isinstance(doc, dict):
            raise classify(
                answer.status,
                answer.body,
                answer.content_type,
                answer.retry_after,
                where=where,
                date=answer.date,
                token_endpoint=True,
            )
        access = doc.get("access_token")
        if not isinstance(access, str) or not access:
            raise AuthError(
                f"{where}: the token endpoint answered without an access_token "
                f"(keys: {', '.join(sorted(map(str, doc))) or 'none'}); check snow.auth.oauth.*",
                status=answer.status,
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
