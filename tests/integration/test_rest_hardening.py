"""REST under hostile input: malformed PATCH bodies, broken Authorization bytes, slow clients.

Against a real daemon, Kafka and the emulator. Every malformed PATCH gets a 4xx naming what is
wrong, and the offsets topic is byte-for-byte what it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import ClientSession

from snowsource.api import middleware
from snowsource.core.table import TableSpec
from snowsource.engine.supervisor import Daemon
from snowsource.observability.redact import register_secret
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running
from tests.integration.test_rest import (
    base_url,
    call,
    offset,
    rest_of,
    rest_settings,
    spec_of,
    stop,
)
from tests.polling import poll_until

pytestmark = [pytest.mark.kafka]

TOKEN = "tok-hardening-0b7c41d2-not-real"
GOOD_ID = "0123456789abcdef0123456789abcdef"
_DROP = object()


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession() as session:
        yield session


def _changed(mapping: dict[str, Any], **changes: object) -> dict[str, Any]:
    out = {**mapping, **changes}
    return {k: v for k, v in out.items() if v is not _DROP}


def _cases(spec: TableSpec) -> list[tuple[str, object, str]]:
    """(name, body, fragment the error message must contain)."""
    part = spec.partition.as_dict()
    good = offset(spec, "2026-09-01 00:00:00", GOOD_ID)

    def one(value: object, partition: object = part) -> dict[str, object]:
        return {"offsets": [{"partition": partition, "offset": value}]}

    need = "Partitions / offsets need to be provided"
    cases: list[tuple[str, object, str]] = [
        ("empty object", {}, need),
        ("empty list", {"offsets": []}, need),
        ("null offsets", {"offsets": None}, need),
        ("array body", [1, 2], need),
        ("string body", "offsets", need),
        ("number body", 7, need),
        ("offsets is a string", {"offsets": "all"}, "holding a list"),
        ("offsets is an object", {"offsets": {"a": 1}}, "holding a list"),
        ("entry is a number", {"offsets": [1]}, "offsets[0] must be an object"),
        ("entry is null", {"offsets": [None]}, "offsets[0] must be an object"),
        ("entry without partition", {"offsets": [{"offset": good}]}, "offsets[0] must be"),
        (
            "entry with extra key",
            {"offsets": [{"partition": part, "offset": good, "x": 1}]},
            "unexpected key(s) x",
        ),
        ("partition null", one(good, None), "partition must be a JSON object, got null"),
        ("partition list", one(good, [part]), "partition must be a JSON object, got an array"),
        ("partition string", one(good, "incident"), "got a string"),
        ("partition number", one(good, 3), "got a number"),
        ("partition empty", one(good, {}), "is not a snowsource partition"),
        ("partition extra key", one(good, _changed(part, extra="x")), "not a snowsource"),
        ("unknown table", one(good, _changed(part, table="nope")), "no configured table"),
        ("unknown instance", one(good, _changed(part, instance="x.y")), "no configured table"),
        (
            "other fingerprint",
            one(good, _changed(part, query_fingerprint="sha256:" + "1" * 64)),
            "no configured table",
        ),
        (
            "other timestamp field",
            one(good, _changed(part, timestamp_field="sys_created_on")),
            "no configured table",
        ),
        ("offset list", one([good]), "not a JSON object (got list)"),
        ("offset string", one("2026-09-01 00:00:00"), "not a JSON object (got str)"),
        ("offset number", one(5), "not a JSON object (got int)"),
        ("offset boolean", one(True), "not a JSON object (got bool)"),
        ("offset empty", one({}), "missing key(s)"),
        ("extra offset key", one(_changed(good, extra="x")), "unexpected key(s) 'extra'"),
        ("version 2", one(_changed(good, version="2")), "unsupported offset version '2'"),
        ("version empty", one(_changed(good, version="")), "unsupported offset version ''"),
        ("sys_id 'xyz'", one(_changed(good, sys_id="xyz")), "is not a sys_id"),
        ("sys_id upper case", one(_changed(good, sys_id=GOOD_ID.upper())), "is not a sys_id"),
        ("sys_id 31 chars", one(_changed(good, sys_id=GOOD_ID[:31])), "is not a sys_id"),
        ("sys_id 33 chars", one(_changed(good, sys_id=GOOD_ID + "0")), "is not a sys_id"),
        ("sys_id with caret", one(_changed(good, sys_id="a^b")), "contains '^'"),
        ("sys_id ^NQ", one(_changed(good, sys_id=GOOD_ID + "^NQ")), "contains '^'"),
        ("sys_id 10 kB", one(_changed(good, sys_id="a" * 10_000)), "(10000 characters)"),
        ("sys_id newline", one(_changed(good, sys_id=GOOD_ID[:31] + "\n")), "is not a sys_id"),
        ("sys_id spaces", one(_changed(good, sys_id=f" {GOOD_ID} ")), "is not a sys_id"),
        ("phase empty", one(_changed(good, phase="")), "unknown phase ''"),
        ("phase upper", one(_changed(good, phase="STREAM")), "unknown phase 'STREAM'"),
        ("phase later", one(_changed(good, phase="later")), "unknown phase"),
        ("fingerprint empty", one(_changed(good, fingerprint="")), "differs from the partition"),
        (
            "fingerprint other",
            one(_changed(good, fingerprint="sha256:" + "0" * 64)),
            "differs from the partition",
        ),
        (
            "two problems at once",
            one(_changed(good, phase="x", sys_id="xyz")),
            "unknown phase 'x'",
        ),
        (
            "bad beside good",
            {
                "offsets": [
                    {"partition": part, "offset": good},
                    {"partition": _changed(part, table="x"), "offset": good},
                ]
            },
            "offsets[1]",
        ),
        (
            "same partition twice",
            {"offsets": [{"partition": part, "offset": good}] * 2},
            "the same partition as offsets[0]",
        ),
    ]
    for key in ("version", "timestamp", "sys_id", "phase", "fingerprint"):
        cases.append((f"missing {key}", one(_changed(good, **{key: _DROP})), f"'{key}'"))
        cases.append((f"{key} null", one(_changed(good, **{key: None})), "is not a string"))
        cases.append((f"{key} number", one(_changed(good, **{key: 1})), "is not a string"))
    for stamp, reason in [
        ("2026-09-01T00:00:00", "is not formatted YYYY-MM-DD HH:MM:SS"),
        ("2026-09-01 00:00", "is not formatted"),
        ("2026-09-01 00:00:00Z", "is not formatted"),
        ("2026-09-01 00:00:00.000", "is not formatted"),
        (" 2026-09-01 00:00:00", "is not formatted"),
        ("", "is not formatted"),
        ("javascript:gs.daysAgo(1)", "is not formatted"),
        ("2026-13-01 00:00:00", "not a real date"),
        ("2026-02-30 00:00:00", "not a real date"),
        ("2026-09-01 24:00:00", "not a real date"),
        ("\uff12\uff10\uff12\uff16-09-01 00:00:00", "is not formatted"),  # full-width digits
    ]:
        cases.append((f"timestamp {stamp!r}", one(_changed(good, timestamp=stamp)), reason))
    return cases


RAW_CASES: list[tuple[str, bytes, str]] = [
    ("truncated JSON", b'{"offsets": [', "not valid JSON"),
    ("single quotes", b"{'offsets': []}", "not valid JSON"),
    ("not UTF-8", b'{"offsets": "\xff\xfe"}', "not valid JSON"),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    ("trailing garbage", b'{"offsets": []} x', "not valid JSON"),
    ("NaN", b'{"offsets": [NaN]}', "not valid JSON"),
]


async def test_malformed_patch_bodies_get_4xx_and_nothing_is_written(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=20)
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        url = f"{base_url(daemon)}/offsets"
        await stop(http, daemon)
        before = await read_topic(env.bootstrap, env.offsets_topic)
        listing = await call(http, "GET", url)
        cases = _cases(spec_of(daemon, "incident"))
        assert len(cases) + len(RAW_CASES) >= 60
        failures: list[str] = []
        for name, body, fragment in cases:
            status, answer = await call(http, "PATCH", url, body)
            if not (400 <= status < 500 and fragment in str(answer.get("message"))):
                failures.append(f"{name}: {status} {answer}")
        for name, raw, fragment in RAW_CASES:
            status, answer = await call(http, "PATCH", url, raw=raw)
            if not (400 <= status < 500 and fragment in str(answer.get("message"))):
                failures.append(f"{name}: {status} {str(answer)[:300]}")
        assert failures == []
        assert await read_topic(env.bootstrap, env.offsets_topic) == before
        assert await call(http, "GET", url) == listing
        # And the validator is not simply refusing everything: a good body is applied.
        good = offset(spec_of(daemon, "incident"), "2026-09-01 00:00:00", GOOD_ID)
        body = {
            "offsets": [
                {"partition": spec_of(daemon, "incident").partition.as_dict(), "offset": good}
            ]
        }
        assert (await call(http, "PATCH", url, body))[0] == 200


async def _raw_request(port: int, head: bytes, body: bytes = b"") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + body)
        await writer.drain()
        async with asyncio.timeout(20):
            return await reader.read()  # until the server closes
    finally:
        writer.close()


def _rest_port(daemon: Daemon) -> int:
    return rest_of(daemon).port


async def test_undecodable_authorization_bytes_are_401_not_500(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=5)
    settings = rest_settings(env, {"incident": {"name": "incident"}}, rest={"auth.token": TOKEN})
    async with running(settings) as daemon:
        port = _rest_port(daemon)
        for value in (
            b"Bearer \xff\xfe\xfd",  # not UTF-8
            b"Bearer caf\xe9",  # Latin-1
            b"Bearer " + "tök".encode(),  # valid UTF-8, wrong token
            b"\xc3\x28 " + TOKEN.encode(),  # broken scheme
            b"Bearer " + TOKEN.encode() + b"\x80",
        ):
            head = (
                b"GET /connectors HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Authorization: " + value + b"\r\n\r\n"
            )
            answer = await _raw_request(port, head)
            assert answer.startswith(b"HTTP/1.1 401"), (value, answer[:200])
        good = (
            b"GET /connectors HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n"
        )
        assert (await _raw_request(port, good)).startswith(b"HTTP/1.1 200")


async def test_slow_headers_and_slow_bodies_are_cut_off(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(middleware, "READ_TIMEOUT_SECONDS", 1.0)
    env.emu.seed(tables=("incident",), rows=5)
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        port = _rest_port(daemon)
        loop = asyncio.get_running_loop()

        started = loop.time()
        answer = await _raw_request(port, b"GET /connectors HTTP/1.1\r\nHost: x\r\nX-Slow: a")
        assert answer == b""  # closed without an answer: the headers never completed
        assert loop.time() - started < 10

        path = f"/connectors/{settings.name}/offsets".encode()
        head = (
            b"PATCH " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n"
        )
        started = loop.time()
        answer = await _raw_request(port, head, b'{"offsets": [')
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"did not arrive within 1 s" in answer
        assert loop.time() - started < 10

        # The server still answers everyone else.
        fast = b"GET /connectors HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        assert (await _raw_request(port, fast)).startswith(b"HTTP/1.1 200")


async def test_status_texts_are_redacted(env: Env, http: ClientSession) -> None:
    password = "Status-Pw-55aa-needle"
    env.emu.add_user("svc.status", password, roles=("admin",), admin=True)
    env.emu.seed(tables=("incident",), rows=5)
    settings = rest_settings(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        poller = daemon.pollers["incident"]
        # An error text that quotes a secret (as a server echo or a library message might).
        poller.status.last_error = f"HTTP 401: echoed Authorization: Basic x password={password}"
        register_secret(password)  # what the ServiceNow client does for its credentials
        status, body = await call(http, "GET", f"{base_url(daemon)}/status")
        assert status == 200
        text = orjson.dumps(body).decode()
        assert password not in text
        assert "echoed Authorization" in text
