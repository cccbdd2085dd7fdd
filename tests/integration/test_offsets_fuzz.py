"""Every malformed offsets body is refused end to end, and nothing reaches the offsets topic.

The shapes of ``tests/offsets_shapes.py`` (SPEC §8, §13.1: wrong types, missing, empty or
extra keys, non-object offsets, duplicate partitions, a pair without ``"offset"``) go to a
STOPPED daemon's ``PATCH /connectors/<name>/offsets`` (each must be a 400 with a message) and
to ``snowsource offsets import`` (each must exit 2 before anything is contacted). The offsets
topic is compared record by record before and after.
"""

from __future__ import annotations

import orjson
import pytest
from aiohttp import ClientSession
from aiokafka.admin import AIOKafkaAdminClient

from snowsource.cli.offsets import amain
from snowsource.engine.table_specs import table_spec
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running, write_config
from tests.integration.test_rest import base_url, call, http, rest_settings, stop
from tests.offsets_shapes import malformed_shapes, valid_offset
from tests.polling import poll_until

pytestmark = pytest.mark.kafka

__all__ = ["http"]  # the fixture, shared with test_rest

TABLES = {"incident": {"name": "incident"}, "change": {"name": "change_request"}}


async def test_every_malformed_patch_body_is_a_400_and_writes_nothing(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=10)
    settings = rest_settings(env, TABLES)
    incident, change = (table_spec(settings, a, settings.tables[a]).partition for a in TABLES)
    shapes = malformed_shapes(incident.as_dict(), change.as_dict())
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, *TABLES))
        url = f"{base_url(daemon)}/offsets"
        await stop(http, daemon)
        topic_before = await _records(env)
        listing_before = await call(http, "GET", url)
        accepted = []
        for shape in shapes:
            status, error = await call(http, "PATCH", url, raw=_json(shape.body))
            refused = status == 400 and error.get("error_code") == 400
            if not refused or not str(error.get("message", "")).strip():
                accepted.append((shape.name, status, error))
        assert not accepted, accepted
        assert await _records(env) == topic_before
        assert await call(http, "GET", url) == listing_before

        # The endpoint itself works: the same partition with its offset is a 200 and is written.
        good = {
            "offsets": [
                {"partition": incident.as_dict(), "offset": valid_offset(incident.as_dict())}
            ]
        }
        assert (await call(http, "PATCH", url, good))[0] == 200
        assert len(await _records(env)) > len(topic_before)


async def test_every_malformed_import_exits_2_before_anything_is_contacted(
    env: Env, kafka_admin: AIOKafkaAdminClient
) -> None:
    settings = env.settings(TABLES)
    config = write_config(env.tmp_path / "config.yaml", env.document(TABLES))
    incident, change = (table_spec(settings, a, settings.tables[a]).partition for a in TABLES)
    path = env.tmp_path / "import.json"
    accepted = []
    for shape in malformed_shapes(incident.as_dict(), change.as_dict()):
        if not shape.for_import:
            continue
        path.write_bytes(_json(shape.body))
        code = await amain(["import", str(path), "--config", str(config)])
        if code != 2:
            accepted.append((shape.name, code))
    assert not accepted, accepted
    described = await kafka_admin.describe_topics([env.offsets_topic])
    assert described[0]["error_code"] != 0, "the offsets topic was created"


async def _records(env: Env) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """The offsets topic's records in a stable order (partitions are read concurrently)."""
    records = await read_topic(env.bootstrap, env.offsets_topic)
    return sorted((r.partition, r.offset, r.key, r.value) for r in records)


def _json(body: object) -> bytes:
    return orjson.dumps(body)
