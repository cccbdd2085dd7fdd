"""End-to-end: a backfill reaches Kafka with the record contract and committed offsets."""

from __future__ import annotations

from snowsource.core.offsets_codec import partition_for
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, latest_by_key, read_offsets, read_topic, running
from tests.polling import poll_until


async def test_backfill_streams_every_row_and_commits_stream_offset(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=250)
    rows = env.emu.rows("incident")
    settings = env.settings({"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        await poll_until(
            lambda: (
                daemon.pollers["incident"].status.committed is not None
                and daemon.pollers["incident"].status.committed.phase == "stream"
            )
        )

    records = await read_topic(env.bootstrap, env.topic("incident"))
    by_key = latest_by_key(records)
    assert set(by_key) == {r["sys_id"] for r in rows}
    sample = records[0]
    assert sample.headers["snow.table"] == b"incident"
    assert sample.headers["snow.instance"] == env.url.split("://")[1].encode()
    assert sample.headers["snow.phase"] in (b"backfill", b"stream")
    assert sample.headers["snow.timestamp"].decode() == sample.json["sys_updated_on"]
    assert all(isinstance(v, str | dict) for v in sample.json.values())

    offsets = await read_offsets(env.bootstrap, env.offsets_topic, env.name)
    last = max(rows, key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    assert offsets["incident"] == {
        "version": "1",
        "timestamp": last["sys_updated_on"],
        "sys_id": last["sys_id"],
        "phase": "stream",
        "fingerprint": partition_for(
            snow_url=env.url,
            table="incident",
            query="",
            query_domain=True,
            timestamp_field="sys_updated_on",
        ).query_fingerprint,
    }


async def test_per_table_metrics_carry_the_alias(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    settings = env.settings({"p1_incidents": {"name": "incident", "query": "priority=1"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "p1_incidents"))
        emitted = daemon.pollers["p1_incidents"].status.rows_emitted

    def sample(name: str, **labels: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    assert sample("snowsource_http_requests_total", table="p1_incidents", status="200") >= 2
    assert sample("snowsource_rows_emitted_total", table="p1_incidents") >= emitted
    assert sample("snowsource_table_state", table="p1_incidents", state="STOPPED") == 1
    assert sample("snowsource_phase", table="p1_incidents", phase="stream") == 1


async def test_every_request_of_a_table_and_its_streams_is_counted_under_their_alias(
    env: Env,
) -> None:
    # The dictionary a typed table reads and the delete stream's "does it exist again?" are
    # requests of the table too: no series may be named after a ServiceNow table instead.
    env.emu.seed(tables=("incident",), rows=20)
    doomed = [row["sys_id"] for row in env.emu.rows("incident")[:3]]
    table = {"name": "incident", "deletes": "audit", "value.format": "typed"}
    settings = env.settings({"p2_incidents": table})

    def requests(label: str) -> float:
        found = metrics.REGISTRY.get_sample_value(
            "snowsource_http_requests_total", {"table": label, "status": "200"}
        )
        return found or 0.0

    names = ("incident", "sys_dictionary", "sys_db_object", "sys_audit_delete")
    before = {name: requests(name) for name in names}
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "p2_incidents", "p2_incidents.deletes"))
        for sys_id in doomed:
            env.emu.delete("incident", sys_id)
        await poll_until(lambda: daemon.pollers["p2_incidents.deletes"].status.rows_emitted >= 3)
    assert {name: requests(name) for name in names} == before
    assert requests("p2_incidents") >= 3  # dictionary, first page, and more
    assert requests("p2_incidents.deletes") >= 2  # audit pages and the re-check
