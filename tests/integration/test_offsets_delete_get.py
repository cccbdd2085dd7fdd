"""``GET offsets`` right after ``DELETE offsets`` answers like Kafka Connect, every time.

A Connect 4.1 worker lists every partition it reset, with ``"offset": null``, when asked
right after the DELETE: it lists the partitions it knows and then reads each one's offset back
from the topic, which is now a tombstone. The daemon answers the same from what it knows itself
(the partitions it tombstoned) and a fresh read of the topic; the test repeats PATCH → GET →
DELETE → GET many times on a real broker, with a table, its delete stream and a second table.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import ClientSession

from snowsource.core.table import TableSpec
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_offsets, running
from tests.integration.test_rest import base_url, call, http, rest_settings, stop
from tests.offsets_shapes import valid_offset
from tests.polling import poll_until

pytestmark = pytest.mark.kafka

__all__ = ["http"]  # the fixture, shared with test_rest

TABLES = {
    "incident": {"name": "incident", "deletes": "audit"},
    "change": {"name": "change_request"},
}
ROUNDS = 25


def _listing(specs: list[TableSpec], offsets: list[Any]) -> dict[str, list[dict[str, Any]]]:
    """GET's body for these partitions (sorted by table, as the daemon lists them)."""
    pairs = sorted(zip(specs, offsets, strict=True), key=lambda pair: pair[0].partition.table)
    return {"offsets": [{"partition": s.partition.as_dict(), "offset": o} for s, o in pairs]}


async def test_get_after_delete_lists_every_reset_partition_with_a_null_offset(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=10)
    settings = rest_settings(env, TABLES)
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "incident.deletes", "change"))
        specs = list(daemon.specs)
        assert len(specs) == 3
        url = f"{base_url(daemon)}/offsets"
        await stop(http, daemon)
        answers = []
        for round_ in range(ROUNDS):
            stamp = f"2026-09-01 00:00:{round_:02d}"
            offsets = [valid_offset(s.partition.as_dict(), stamp) for s in specs]
            patch = _listing(specs, offsets)
            assert (await call(http, "PATCH", url, patch))[0] == 200
            assert await call(http, "GET", url) == (200, patch)
            assert (await call(http, "DELETE", url))[0] == 200
            answers.append(await call(http, "GET", url))
        expected = (200, _listing(specs, [None] * len(specs)))
        wrong = [(i, answer) for i, answer in enumerate(answers) if answer != expected]
        assert not wrong, wrong
        # The listing is only what Connect shows: the offsets really are gone.
        assert await read_offsets(env.bootstrap, env.offsets_topic, env.name) == {}
        # Once the process reads the topic again (this DELETE reloads first) it knows they are
        # gone: nothing is left to reset, and GET lists nothing.
        assert (await call(http, "DELETE", url))[0] == 200
        assert await call(http, "GET", url) == (200, {"offsets": []})
