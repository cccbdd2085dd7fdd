"""Who is calling: users, Basic / ``x-sn-apikey`` / Bearer authentication, and OAuth tokens.

No I/O. The token endpoint logic (``POST /oauth_token.do``) lives here as a pure function of the
form and the emulator clock; the aiohttp handler only decodes the form and encodes the answer.
Token lifetimes follow ``servicenow-table-api.md`` §6: access 1800 s, refresh 100 days, both on
the emulator clock. Every failure is the same generic answer, as on a real instance.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import secrets
from collections.abc import Mapping

ACCESS_TOKEN_LIFETIME = 1800
REFRESH_TOKEN_LIFETIME = 8_640_000  # 100 days
TOKEN_FAILURE: dict[str, str] = {"error_description": "access_denied", "error": "server_error"}
QUERY_NO_DOMAIN_ROLE = "query_no_domain_table_api"


def _same(expected: str, given: str) -> bool:
    """Constant-time comparison of secrets; UTF-8 bytes, so any password works."""
    return secrets.compare_digest(expected.encode(), given.encode())


@dataclasses.dataclass
class User:
    """An account that can call the API. Time zone and formats live on its ``sys_user`` row."""

    name: str
    password: str
    sys_id: str
    roles: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ("global",)
    api_key: str | None = None
    admin: bool = False

    @property
    def may_query_no_domain(self) -> bool:
        """Whether ``sysparm_query_no_domain=true`` is honoured for this user."""
        return self.admin or "admin" in self.roles or QUERY_NO_DOMAIN_ROLE in self.roles

    def sees_domain(self, domain: str) -> bool:
        """Domain visibility: ``global`` data is visible to all; a domain sees its subtree.

        A user configured for ``global`` (the root) sees every domain.
        """
        if domain in ("", "global"):
            return True
        for own in self.domains:
            if own in ("global", domain) or domain.startswith(own + "/"):
                return True
        return False

    @property
    def sees_all_domains(self) -> bool:
        """True when no row can be hidden from this user by domain separation."""
        return "global" in self.domains


@dataclasses.dataclass(frozen=True)
class OAuthClient:
    """An OAuth application registry entry; ``user`` is its client_credentials identity."""

    client_id: str
    secret: str
    user: str | None
    access_lifetime: int = ACCESS_TOKEN_LIFETIME
    refresh_lifetime: int = REFRESH_TOKEN_LIFETIME


@dataclasses.dataclass(frozen=True)
class _Token:
    user: str
    client_id: str
    expires_at: float


class Auth:
    """Users, API keys, OAuth clients and issued tokens."""

    def __init__(self) -> None:
        self.users: dict[str, User] = {}
        self.clients: dict[str, OAuthClient] = {}
        self._access: dict[str, _Token] = {}
        self._refresh: dict[str, _Token] = {}
        self.enabled = True
        self.client_credentials_enabled = True

    def add_user(self, user: User) -> None:
        """Register (or replace) a user."""
        self.users[user.name] = user

    def authenticate(
        self, headers: Mapping[str, str], query: Mapping[str, str], now: float
    ) -> User | None:
        """The caller, from Basic, Bearer or ``x-sn-apikey`` (header or query); None if refused."""
        api_key = headers.get("x-sn-apikey") or query.get("x-sn-apikey")
        if api_key:
            return next((u for u in self.users.values() if u.api_key == api_key), None)
        authorization = headers.get("Authorization", "")
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
            name, sep, password = decoded.partition(":")
            user = self.users.get(name)
            if not sep or user is None or not _same(user.password, password):
                return None
            return user
        if scheme.lower() == "bearer":
            token = self._access.get(credentials.strip())
            if token is None or token.expires_at <= now:
                return None
            return self.users.get(token.user)
        return None

    def token_request(self, form: Mapping[str, str], now: float) -> dict[str, str | int] | None:
        """Answer a ``/oauth_token.do`` form: the token response, or None for the generic 401."""
        client = self.clients.get(form.get("client_id", ""))
        if client is None or not _same(client.secret, form.get("client_secret", "")):
            return None
        grant = form.get("grant_type", "")
        if grant == "password":
            user = self.users.get(form.get("username", ""))
            if user is None or not _same(user.password, form.get("password", "")):
                return None
            return self._issue(client, user.name, now, with_refresh=True)
        if grant == "client_credentials":
            if not self.client_credentials_enabled or client.user not in self.users:
                return None
            assert client.user is not None
            return self._issue(client, client.user, now, with_refresh=False)
        if grant == "refresh_token":
            token = self._refresh.get(form.get("refresh_token", ""))
            if token is None or token.expires_at <= now or token.client_id != client.client_id:
                return None
            if token.user not in self.users:
                return None
            answer = self._issue(client, token.user, now, with_refresh=False)
            # ServiceNow hands the same refresh token back until it expires.
            answer["refresh_token"] = form["refresh_token"]
            return answer
        return None

    def _issue(
        self, client: OAuthClient, user: str, now: float, *, with_refresh: bool
    ) -> dict[str, str | int]:
        access = secrets.token_urlsafe(32)
        self._access[access] = _Token(user, client.client_id, now + client.access_lifetime)
        answer: dict[str, str | int] = {
            "access_token": access,
            "scope": "useraccount",
            "token_type": "Bearer",
            "expires_in": client.access_lifetime,
        }
        if with_refresh:
            refresh = secrets.token_urlsafe(32)
            self._refresh[refresh] = _Token(user, client.client_id, now + client.refresh_lifetime)
            answer["refresh_token"] = refresh
        return answer

    def revoke_all(self) -> None:
        """Forget every issued token (simulates an instance restart or a revoked client)."""
        self._access.clear()
        self._refresh.clear()
