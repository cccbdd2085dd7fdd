"""A 429 with ``Retry-After`` pauses the whole ServiceNow client (SPEC §15.3, §9).

The instance's rate-limit rule counts per user: any request the process sends before the time a
429 named is answered 429 again and counts against the user. So after such an answer no request
of any table, slice, derived stream, dictionary or count read may leave the process until then;
requests already sent finish. Asserted from the emulator's journal: when each request arrived.
"""

from __future__ import annotations

import pytest

from snowsource.emulator.journal import Request
from snowsource.observability import metrics
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running
from tests.polling import poll_until

RETRY_AFTER = 2
# A request the client sent before the 429 reached it may still arrive just after the 429 was
# answered (the emulator shares the test's event loop): that much is "already sent".
IN_FLIGHT_SLACK = 0.3

TABLES = {
    "typed": {"name": "incident", "value.format": "typed"},
    "audited": {"name": "change_request", "deletes": "audit"},
    "plain": {"name": "cmdb_ci"},
}

pytestmark = pytest.mark.timeout(180)


def _requests_during_pauses(journal: list[Request]) -> list[str]:
    """Requests that arrived while a 429's Retry-After was still running."""
    refusals = [r for r in journal if r.status == 429]
    late = []
    for refused in refusals:
        start, end = refused.wall + IN_FLIGHT_SLACK, refused.wall + RETRY_AFTER
        late += [
            f"{r.table} {r.params.get('sysparm_query', '')[:60]!r} "
            f"{r.wall - refused.wall:.2f}s after the 429 to {refused.table}"
            for r in journal
            if r is not refused and start < r.wall < end
        ]
    return late


async def test_a_retry_after_holds_every_request_of_the_process(env: Env) -> None:
    emu = env.emu
    # The pause is the client's, not the instance model's: arrivals are what the journal shows.
    emu.instance.configure(enabled=False)
    emu.seed(tables=("incident", "change_request", "cmdb_ci"), rows=400)
    for row in emu.rows("change_request")[:5]:
        emu.delete("change_request", row["sys_id"])
    # One dictionary read, one audit page and one keyset page of a slice are refused.
    emu.faults.add(status=429, retry_after=RETRY_AFTER, table="sys_dictionary")
    emu.faults.add(status=429, retry_after=RETRY_AFTER, table="sys_audit_delete")
    emu.faults.add(status=429, retry_after=RETRY_AFTER, table="cmdb_ci", window=("0000", "9999"))
    settings = env.settings(TABLES, **{"backfill.slices": 4})
    pauses_before = metrics.REGISTRY.get_sample_value("snowsource_servicenow_pauses_total") or 0
    async with running(settings) as daemon:

        def paused() -> float:
            pool = daemon.servicenow_pool()
            return pool["paused_seconds"] if pool is not None else 0.0

        # /status (whose "servicenow" is this) and the gauge show the pause while it runs.
        assert 0 < await poll_until(paused, timeout=30) <= RETRY_AFTER
        assert (metrics.REGISTRY.get_sample_value("snowsource_servicenow_pause_seconds") or 0) > 0
        await poll_until(caught_up(daemon, *TABLES, "audited.deletes"), timeout=120)
    pauses = metrics.REGISTRY.get_sample_value("snowsource_servicenow_pauses_total") or 0
    assert pauses - pauses_before == 3
    refused = sorted({r.table or "" for r in emu.journal if r.status == 429})
    assert refused == ["cmdb_ci", "sys_audit_delete", "sys_dictionary"], refused
    late = _requests_during_pauses(emu.journal)
    assert not late, f"{len(late)} request(s) left during a Retry-After: {late[:5]}"
    for alias, spec in TABLES.items():
        expected = {r["sys_id"] for r in emu.rows(str(spec["name"]))}
        records = await read_topic(env.bootstrap, env.topic(alias))
        found = {r.key.decode() for r in records if r.key is not None and r.value is not None}
        assert expected <= found, f"{alias}: {len(expected - found)} row(s) missing"
