"""``backfill.max.tables`` (SPEC §15.2) end to end: discovered tables queue for backfill slots,
asserted from the requests the emulator served, not from status alone."""

from __future__ import annotations

import itertools

from snowsource.core.table_status import TableState
from snowsource.emulator.catalog import add_table
from snowsource.emulator.journal import Request
from tests.integration.conftest import Env
from tests.integration.engine import running, settings_from
from tests.polling import poll_until

BATCH = 20
TABLES = {f"u_bf_{i}": 200 - i * 10 for i in range(10)}  # u_bf_9 has the fewest rows


def data_pages(journal: list[Request], table: str) -> list[Request]:
    """The table's own page requests (not the discovery probe, counts or clock probes)."""
    return [
        r
        for r in journal
        if r.table == table
        and "/table/" in r.path
        and r.params.get("sysparm_limit") == str(BATCH)
        and "sysparm_fields" not in r.params
    ]


def backfill_span(journal: list[Request], table: str) -> tuple[float, float]:
    """From the table's first page request to the first page that came back short."""
    pages = data_pages(journal, table)
    end = next(r for r in pages if r.rows is not None and r.rows < BATCH)
    return pages[0].wall, end.wall


async def test_at_most_two_backfill_at_once_in_row_count_order(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=10)
    for name, rows in TABLES.items():
        add_table(env.emu, name, rows=rows)
    env.emu.latency_ms = 5
    document = env.document(
        {"incident": {"name": "incident"}},
        **{"topic.prefix": f"{env.name}.", "backfill.max.tables": 2},
    )
    document["snow"]["discover"] = {
        "include": ["u_bf_*"],
        "template": {"backfill.slices": 1, "batch.size": BATCH},
    }
    settings = settings_from(env.tmp_path, document)
    seen_queued: set[int] = set()
    async with running(settings) as daemon:

        def done() -> bool:
            for status in daemon.statuses().values():
                if status.state == TableState.QUEUED and (place := status.queue_place()):
                    seen_queued.add(place)
            pollers = daemon.pollers
            return set(pollers) >= set(TABLES) and all(
                pollers[name].status.caught_up for name in TABLES
            )

        await poll_until(done, timeout=90, interval=0.02)
        for name, rows in TABLES.items():
            assert daemon.pollers[name].status.rows_emitted == rows
        assert daemon.admission.peak == 2
    assert seen_queued, "no table was ever shown QUEUED with its place"
    journal = list(env.emu.journal)
    spans = {name: backfill_span(journal, name) for name in TABLES}
    events = sorted([(s, 1) for s, _ in spans.values()] + [(e, -1) for _, e in spans.values()])
    at_once = peak = 0
    for _, step in events:
        at_once += step
        peak = max(peak, at_once)
    assert peak <= 2
    # At most two found a free slot as they arrived; every table that queued was admitted in
    # ascending row count (the Aggregate API's).
    started = sorted(TABLES, key=lambda name: spans[name][0])
    assert started[2:] == sorted(started[2:], key=TABLES.__getitem__)
    # The caught-up explicit table kept its poll interval (200 ms) while the others backfilled.
    first, last = min(s for s, _ in spans.values()), max(e for _, e in spans.values())
    polls = [r.wall for r in data_pages_any(journal, "incident") if first <= r.wall <= last]
    assert len(polls) >= 2
    assert max(b - a for a, b in itertools.pairwise(polls)) < 1.5


def data_pages_any(journal: list[Request], table: str) -> list[Request]:
    return [r for r in journal if r.table == table and "/table/" in r.path]
