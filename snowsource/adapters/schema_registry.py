"""A small async client of the Confluent Schema Registry REST API (SPEC §15.1).

Four calls, all the daemon and ``check`` need: register a schema under a subject, look one up
(``auto.register: false``), fetch a subject's latest version (the schema to write with when the
registry refused ours), and ask whether a schema would be accepted. Every answer that is not a
success becomes one of ``core.errors``' registry errors in :func:`classify`, the one place that
maps a status to what the caller does next. Requests are counted by operation and outcome.

Works against Confluent's registry and any compatible one (Apicurio serves the API under
``/apis/ccompat/v7``): ``url`` is the API's base.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Self
from urllib.parse import quote

import aiohttp
import orjson

from snowsource.core.errors import (
    ConfigError,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
    SchemaNotFoundError,
    SchemaRefusedError,
)
from snowsource.core.value_schema import Registered
from snowsource.observability import metrics

CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
_OUTCOMES: Final[dict[type[RegistryError], str]] = {
    RegistryUnavailableError: "unavailable",
    SchemaRefusedError: "refused",
    RegistryAuthError: "auth",
    SchemaNotFoundError: "not_found",
}


@dataclass(frozen=True)
class RegistryConnection:
    """Where the registry is and how to authenticate (``schema.registry``, secrets revealed):
    ``username``/``password`` for basic auth, or ``token`` for a bearer token."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    timeout_seconds: float = 10.0


def _message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace").strip()[:500]
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        code = data.get("error_code")
        return f"{data['message']} (error code {code})" if code is not None else data["message"]
    return str(data)[:500]


def classify(status: int, body: bytes, what: str) -> RegistryError:
    """The error of a non-2xx answer to ``what`` (e.g. "registering under subject X")."""
    text = f"Schema Registry answered {status} {what}: {_message(body)}"
    if status in (401, 403):
        return RegistryAuthError(text, status)
    if status in (409, 422):
        return SchemaRefusedError(text, status)
    if status == 404:
        return SchemaNotFoundError(text, status)
    if status >= 500 or status in (408, 429):
        return RegistryUnavailableError(text, status)
    # Any other 4xx means the request itself is wrong: retrying cannot cure it.
    return RegistryAuthError(text, status) if status == 400 else SchemaRefusedError(text, status)


class RegistryClient:
    """The registry of ``schema.registry``; an async context manager owning its HTTP session."""

    def __init__(self, connection: RegistryConnection) -> None:
        self.url = connection.url.rstrip("/")
        self._config = connection
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        config = self._config
        ssl_option: ssl.SSLContext | bool = True
        if config.ca_file is not None:
            ssl_option = ssl.create_default_context()
            try:
                ssl_option.load_verify_locations(cafile=config.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    [("schema.registry.ca.file", f"cannot load CA bundle {config.ca_file}: {exc}")]
                ) from None
        headers = {"Accept": CONTENT_TYPE}
        if config.username is not None and config.password is not None:
            headers["Authorization"] = aiohttp.encode_basic_auth(config.username, config.password)
        elif config.token is not None:
            headers["Authorization"] = f"Bearer {config.token}"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl_option, limit=4),
            timeout=aiohttp.ClientTimeout(total=config.timeout_seconds),
            headers=headers,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def _call(
        self, operation: str, method: str, path: str, what: str, body: Any = None
    ) -> Any:
        assert self._session is not None, "use RegistryClient as an async context manager"
        data = None if body is None else orjson.dumps(body)
        try:
            async with self._session.request(
                method,
                f"{self.url}{path}",
                data=data,
                headers={"Content-Type": CONTENT_TYPE} if data is not None else None,
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            metrics.SCHEMA_REGISTRY_REQUESTS.labels(
                operation=operation, outcome="unavailable"
            ).inc()
            reason = str(exc) or type(exc).__name__
            raise RegistryUnavailableError(
                f"Schema Registry at {self.url} unreachable {what}: {reason}"
            ) from None
        if not 200 <= status < 300:
            error = classify(status, raw, what)
            outcome = _OUTCOMES.get(type(error), "refused")
            metrics.SCHEMA_REGISTRY_REQUESTS.labels(operation=operation, outcome=outcome).inc()
            raise error
        metrics.SCHEMA_REGISTRY_REQUESTS.labels(operation=operation, outcome="ok").inc()
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise RegistryUnavailableError(
                f"Schema Registry answered {status} {what} with a body that is not JSON"
            ) from None

    @staticmethod
    def _body(schema: str, schema_type: str) -> dict[str, str]:
        return {"schema": schema, "schemaType": schema_type}

    async def register(self, subject: str, schema: str, schema_type: str) -> Registered:
        """Register ``schema`` under ``subject`` (idempotent for the latest version)."""
        answer = await self._call(
            "register",
            "POST",
            f"/subjects/{quote(subject, safe='')}/versions",
            f"registering a schema under subject {subject!r}",
            self._body(schema, schema_type),
        )
        return Registered(id=int(answer["id"]), version=answer.get("version"), schema=schema)

    async def lookup(self, subject: str, schema: str, schema_type: str) -> Registered:
        """The id of ``schema`` registered under ``subject``; :class:`SchemaNotFoundError`."""
        answer = await self._call(
            "lookup",
            "POST",
            f"/subjects/{quote(subject, safe='')}",
            f"looking up the table's schema under subject {subject!r}",
            self._body(schema, schema_type),
        )
        return Registered(id=int(answer["id"]), version=answer.get("version"), schema=schema)

    async def latest(self, subject: str) -> Registered:
        """The latest version registered under ``subject``."""
        answer = await self._call(
            "latest",
            "GET",
            f"/subjects/{quote(subject, safe='')}/versions/latest",
            f"reading the latest version of subject {subject!r}",
        )
        return Registered(
            id=int(answer["id"]), version=answer.get("version"), schema=str(answer["schema"])
        )

    async def compatible(self, subject: str, schema: str, schema_type: str) -> bool:
        """Whether ``schema`` would be accepted under ``subject`` (True when it has none)."""
        try:
            answer = await self._call(
                "compatibility",
                "POST",
                f"/compatibility/subjects/{quote(subject, safe='')}/versions/latest",
                f"testing the table's schema against subject {subject!r}",
                self._body(schema, schema_type),
            )
        except SchemaNotFoundError:
            return True  # no version yet: anything is accepted
        return bool(answer.get("is_compatible"))

    async def subjects(self) -> int:
        """How many subjects the registry holds (a cheap authenticated request)."""
        answer = await self._call("subjects", "GET", "/subjects", "listing its subjects")
        return len(answer) if isinstance(answer, list) else 0

    async def versions(self, subject: str) -> list[int]:
        """The versions registered under ``subject`` ([] when none)."""
        try:
            answer = await self._call(
                "versions",
                "GET",
                f"/subjects/{quote(subject, safe='')}/versions",
                f"listing {subject!r}",
            )
        except SchemaNotFoundError:
            return []
        return [int(v) for v in answer]
