"""engine.reconcile.KeySweep with in-memory fakes: what it asks, at which priority, what it sends.

The real instance and broker are in tests/integration/test_engine_reconcile.py; here the fakes
let a sweep see hundreds of lost keys cheaply, to pin the request shapes down.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import orjson

from snowsource.adapters.kafka import is_retriable
from snowsource.core.grants import Priority
from snowsource.core.offsets_codec import encode_key
from snowsource.core.reconcile import LiveKeys, LiveKeysBuilder, fresh_sweep, reconcile_spec
from snowsource.core.retry import RetryPolicy
from snowsource.core.table_status import TableStatus
from snowsource.core.tableapi import Page
from snowsource.engine.reconcile import KeySweep
from snowsource.engine.snow_requests import SnowRequests
from snowsource.engine.streams import SweepMark
from snowsource.runtime.deadline import StopSignal
from tests.fakes import CONNECTOR, FakeSink, FakeStore, make_spec

NOW = datetime(2026, 9, 29, 7, 30, tzinfo=UTC)


def _key(i: int) -> str:
    return f"{i:032x}"


@dataclass
class _Instance:
    """Key pages, re-checks and audit lookups over sets of sys_ids."""

    keys: set[str]
    audited: set[str] = field(default_factory=set)
    calls: list[tuple[str, dict[str, str], str | None, Priority]] = field(default_factory=list)

    async def get_page(
        self,
        table: str,
        params: Mapping[str, str],
        *,
        label: str | None = None,
        requester: str | None = None,
        priority: Priority = Priority.STREAM,
    ) -> Page:
        # Whose turn in the session pool: the requester, by default the label.
        self.calls.append((table, dict(params), requester or label, priority))
        query = params["sysparm_query"]
        limit = int(params["sysparm_limit"])
        if table == "sys_audit_delete":
            asked = set(query.split("documentkeyIN")[1].split(","))
            rows = [{"documentkey": k} for k in sorted(asked & self.audited)]
        elif "sys_idIN" in query:
            asked = set(query.split("sys_idIN")[1].split(","))
            rows = [{"sys_id": k} for k in sorted(asked & self.keys)]
        else:
            found = re.search(r"sys_id>([0-9a-f]+)", query)
            after = found.group(1) if found else ""
            rows = [{"sys_id": k} for k in sorted(k for k in self.keys if k > after)[:limit]]
        return Page(
            rows=rows,
            status=200,
            date="Tue, 29 Sep 2026 07:30:05 GMT",
            total_count=None,
            elapsed=0.0,
        )


@dataclass
class _Topic:
    live: list[str]

    def retriable(self, error: BaseException) -> bool:
        return is_retriable(error)  # the adapter's own rule

    async def live_keys(self, topic: str, *, instance: str, table: str) -> LiveKeys:
        builder = LiveKeysBuilder()
        for key in self.live:
            builder.add(key, True)
        return builder.build()


def _sweep(
    instance: _Instance, live: list[str], *, audit: bool = False, page_size: int = 100
) -> tuple[KeySweep, FakeSink, FakeStore]:
    table = replace(make_spec("inc", name="incident"), deletes=audit)
    spec = reconcile_spec(table, snow_url="https://acme.service-now.com")
    mark = SweepMark()
    mark.completed("2026-09-29 07:31:00")  # the table swept after every re-check
    sink, store = FakeSink(), FakeStore()
    retry, stop = RetryPolicy(0.01, 0.1), StopSignal()
    sweep = KeySweep(
        spec,
        requests=SnowRequests(instance, alias=spec.alias, retry=retry, stop=stop.event),
        sink=sink,
        store=store,
        retry=retry,
        stop=stop,
        mark=mark,
        keys=_Topic(live),
        status=TableStatus(),
        page_size=page_size,
        now=lambda: NOW,
    )
    return sweep, sink, store


async def test_every_request_is_low_priority_and_lost_keys_are_rechecked_in_batches() -> None:
    kept = {_key(i) for i in range(0, 1000, 2)}
    lost = [_key(i) for i in range(1, 901, 2)]  # 450 keys live in Kafka, gone from the instance
    instance = _Instance(kept)
    sweep, sink, store = _sweep(instance, sorted(kept) + lost, page_size=1000)
    summary = await sweep.sweep(fresh_sweep(NOW))
    assert {(requester, priority) for _, _, requester, priority in instance.calls} == {
        ("inc.reconcile", Priority.LOW)
    }
    rechecks = [
        p["sysparm_query"] for t, p, _, _ in instance.calls if "sys_idIN" in p["sysparm_query"]
    ]
    assert [len(q.split("sys_idIN")[1].split(",")) for q in rechecks] == [200, 200, 50]
    assert sorted(r.key.decode() for r in sink.sent) == lost
    for record in sink.sent:
        assert record.value == b""  # a tombstone
        assert record.headers["snow.operation"] == b"delete"
        assert record.headers["snow.delete.source"] == b"reconcile"
        assert record.headers["snow.table"] == b"incident"
        assert record.headers["snow.timestamp"] == b"2026-09-29 07:30:05"  # the re-check's Date
    assert (summary.tombstones, summary.requests) == (450, 1 + 3)
    last = orjson.loads(store.writes[-1][1] or b"null")
    assert (last["phase"], last["sys_id"], last["timestamp"]) == (
        "stream",
        "",
        "2026-09-29 07:30:00",
    )


async def test_a_key_back_at_the_recheck_or_audited_gets_no_tombstone_here() -> None:
    instance = _Instance({_key(1), _key(5)}, audited={_key(3)})
    live = [_key(i) for i in range(1, 6)]
    sweep, sink, _ = _sweep(instance, live, audit=True, page_size=100)

    real = instance.get_page

    async def reappearing(table: str, params: Mapping[str, str], **kw: object) -> Page:
        if "sys_idIN" in params["sysparm_query"]:
            instance.keys.add(_key(2))  # created again between the key page and the re-check
        return await real(table, params, **kw)  # type: ignore[arg-type]

    instance.get_page = reappearing  # type: ignore[method-assign]
    summary = await sweep.sweep(fresh_sweep(NOW))
    assert sorted(r.key.decode() for r in sink.sent) == [_key(4)]
    assert (summary.reappeared, summary.left_to_audit, summary.tombstones) == (1, 1, 1)


async def test_progress_is_stored_after_each_page_and_a_sweep_resumes_after_it() -> None:
    keys = {_key(i) for i in range(25)}
    instance = _Instance(keys)
    sweep, _, store = _sweep(instance, sorted(keys), page_size=10)
    await sweep.sweep(fresh_sweep(NOW))
    stored = [orjson.loads(v or b"null") for _, v in store.writes]
    assert [(o["phase"], o["sys_id"]) for o in stored] == [
        ("backfill", ""),
        ("backfill", _key(9)),
        ("backfill", _key(19)),
        ("stream", ""),
    ]
    instance.calls.clear()
    resumed = replace(fresh_sweep(NOW), after=_key(19))
    await sweep.sweep(resumed)
    assert "sys_id>" + _key(19) in instance.calls[0][1]["sysparm_query"]
    assert encode_key(CONNECTOR, sweep.spec.partition) in store.data


async def test_keys_lost_by_several_pages_share_one_recheck_and_hold_the_progress() -> None:
    kept = {_key(i) for i in range(0, 300, 3)}  # 100 kept keys, 10 pages of 10
    lost = [_key(i) for i in range(1, 300, 30)]  # one lost key in each page's range
    instance = _Instance(kept)
    sweep, sink, store = _sweep(instance, sorted(kept) + lost, page_size=10)
    summary = await sweep.sweep(fresh_sweep(NOW))
    queries = [params["sysparm_query"] for _, params, _, _ in instance.calls]
    rechecks = [q for q in queries if "sys_idIN" in q]
    assert len(rechecks) == 1  # ten pages, ten lost keys, one request
    assert sorted(r.key.decode() for r in sink.sent) == sorted(lost)
    assert summary.tombstones == len(lost)
    stored = [orjson.loads(v or b"null") for _, v in store.writes]
    # Nothing settles before the re-check after the tenth page: no progress is stored earlier.
    assert [(o["phase"], o["sys_id"]) for o in stored] == [
        ("backfill", ""),
        ("backfill", _key(297)),
        ("stream", ""),
    ]
