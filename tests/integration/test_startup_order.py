"""Start-up steps that do not depend on each other overlap, and every rule still holds."""

from __future__ import annotations

from snowsource.core.table_status import TableState
from snowsource.engine import supervisor
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running
from tests.polling import poll_until

TABLES = ("incident", "change_request", "task_sla")


def _is_probe(params: dict[str, str]) -> bool:
    return params.get("sysparm_limit") == "1" and "sysparm_query" not in params


async def test_tables_starting_together_share_one_clock_probe_sent_during_kafka_start_up(
    env: Env,
) -> None:
    env.emu.seed(tables=TABLES, rows=15)
    settings = env.settings({t: {"name": t} for t in TABLES})
    pollers_started_at: list[int] = []
    start_pollers = supervisor.Daemon.start_pollers

    async def noting(self: supervisor.Daemon, *, reload: bool = False) -> None:
        pollers_started_at.append(len(env.emu.journal))
        await start_pollers(self, reload=reload)

    setattr(supervisor.Daemon, "start_pollers", noting)  # noqa: B010 - undone below
    try:
        async with running(settings) as daemon:
            await poll_until(caught_up(daemon, *TABLES))
            assert all(p.status.state == TableState.RUNNING for p in daemon.pollers.values())
    finally:
        setattr(supervisor.Daemon, "start_pollers", start_pollers)  # noqa: B010

    requests = [r for r in env.emu.journal if r.table]
    probes = [r for r in requests if _is_probe(r.params)]
    assert len(probes) == 1, [r.params for r in probes]
    # The probe is the first request, sent before the pollers started (beside the Kafka steps).
    assert requests[0] is probes[0]
    assert pollers_started_at
    assert pollers_started_at[0] >= 1
    for table in TABLES:
        records = await read_topic(env.bootstrap, env.topic(table))
        assert len(records) == len(env.emu.rows(table))


async def test_a_first_run_skips_reading_the_new_offsets_topic_and_a_restart_reads_it(
    env: Env,
) -> None:
    env.emu.seed(tables=("incident",), rows=12)
    settings = env.settings({"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        assert daemon.store is not None
        assert daemon.store.loaded.is_set()  # created by this start: nothing had to be read
    async with running(settings) as daemon:
        assert daemon.store is not None
        assert [e.partition["table"] for e in daemon.store.entries()] == ["incident"]
        await poll_until(caught_up(daemon, "incident"))
    # The second start resumed from the stored offset: nothing was produced twice.
    assert len(await read_topic(env.bootstrap, env.topic("incident"))) == 12
