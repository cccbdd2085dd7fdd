"""Issue 23 item 7: a group member frozen (SIGSTOP) with a page answer in its socket.

Real ``snowsource run`` processes in group mode, at least once. The emulator's request hook
freezes the member the moment its page request arrives, after putting a new version of a row
into that page; the emulator then answers into the frozen process's socket. While it is frozen
the row changes again, the group gives the table to the other member, which sends the newer
version. Thawed, the old member used to send its stale page before any heartbeat told it the
table had moved, so a compacted consumer ended on the older version. Its stop signal's lease
(``adapters.membership.GroupMembership.lease``) now refuses the page.

Why the queued *offset write* of a frozen member (the other case of item 7) cannot be held
back the same way, and why it cannot lose anything, is in ``docs/decisions.md``.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest

from snowsource.core.group_plan import owner_among
from snowsource.emulator.journal import Request
from tests.integration.conftest import Env
from tests.integration.engine import latest_by_key, read_topic, write_config
from tests.integration.test_group_mode import Group, Member
from tests.polling import poll_until

pytestmark = pytest.mark.slow

SESSION_MS = 6000
TABLES = {"low": "numberENDSWITH1", "high": "numberENDSWITH2"}
_UPPER = re.compile(r"sys_updated_on<=(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_LOWER = re.compile(r"sys_updated_on>=?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


class TwoTables(Group):
    """Two tables, so two members can each hold one."""

    def config(self, port: int | None = None) -> Path:
        document = self.env.document(
            {alias: {"name": "incident", "query": query} for alias, query in TABLES.items()},
            **{
                "tasks.assignment": "group",
                "group.session.timeout.ms": SESSION_MS,
                "rest": {"enabled": port is not None, "host": "127.0.0.1", "port": port or 0},
            },
        )
        return write_config(self.env.tmp_path / f"stall-{port}.yaml", document)

    def placement(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {alias: [] for alias in TABLES}
        for member in self.live():
            for alias in member.running():
                out[alias].append(member.name)
        return out


class FreezeOnPage:
    """The emulator hook: on the table's next page request that reaches past its cursor,
    write ``values`` into ``row`` stamped at that request's high-water mark (so the page
    carries it) and SIGSTOP the member before the answer is computed and sent."""

    def __init__(self, env: Env, member: Member, query: str, row: str) -> None:
        self.env, self.member, self.query, self.row = env, member, query, row
        self.armed = False
        self.frozen = asyncio.Event()

    def __call__(self, entry: Request) -> None:
        text = entry.params.get("sysparm_query", "")
        if not self.armed or entry.table != "incident" or self.query not in text:
            return
        upper, lower = _UPPER.search(text), _LOWER.search(text)
        if upper is None or lower is None or upper[1] <= lower[1]:
            return  # a clock probe, or a window of one second: the row could not be in it
        self.armed = False
        at = datetime.strptime(upper[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        self.env.emu.update("incident", self.row, {"short_description": "stale page"}, at=at)
        os.kill(self.member.proc.pid, signal.SIGSTOP)
        self.frozen.set()


async def _latest(env: Env, alias: str, row: str) -> str | None:
    found = latest_by_key(await read_topic(env.bootstrap, env.topic(alias)))
    value = found.get(row)
    return None if value is None else str(value.get("short_description"))


async def test_a_frozen_member_does_not_send_its_page_after_its_table_moved(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=40)
    group = TwoTables(env)
    try:
        a, b = [await group.start(name) for name in ("a", "b")]
        await poll_until(lambda: all(m.key for m in (a, b)), timeout=60, interval=0.2)
        keys = {m.name: str(m.key) for m in (a, b)}
        chosen = {
            alias: [next(n for n, k in keys.items() if k == owner_among(alias, keys.values()))]
            for alias in TABLES
        }
        # The placement rendezvous hashing picks, once the rounds with both members are done.
        await poll_until(lambda: group.placement() == chosen, timeout=60, interval=0.2)
        victim = next(m for m in (a, b) if m.running())
        other = b if victim is a else a
        alias = sorted(victim.running())[0]
        digit = TABLES[alias][-1]
        row = next(r for r in env.emu.rows("incident") if r["number"].endswith(digit))["sys_id"]
        original = env.emu.get("incident", row)
        assert original is not None
        # The victim streamed the table up to now.
        text = original["short_description"]
        await poll_until(lambda: _is(env, alias, row, text), timeout=30, interval=0.2)

        hook = FreezeOnPage(env, victim, TABLES[alias], row)
        env.emu.on_request(hook)
        try:
            hook.armed = True
            await asyncio.wait_for(hook.frozen.wait(), timeout=30)
            # While it is frozen: the row changes again and the table moves to the other member.
            env.emu.update("incident", row, {"short_description": "newest"})
            await poll_until(lambda: alias in other.running(), timeout=60, interval=0.2)
            await poll_until(lambda: _is(env, alias, row, "newest"), timeout=30, interval=0.2)
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        # Thawed: it learns it lost the table, and the group settles again.
        await poll_until(
            lambda: bool(victim.events("consumer group membership lost; stopping every table")),
            timeout=30,
            interval=0.2,
        )
        await poll_until(group.settled, timeout=60, interval=0.2)
        for member in group.live():
            await group.terminate(member)
    finally:
        await group.close()  # SIGKILLs whatever is left
    records = await read_topic(env.bootstrap, env.topic(alias))
    versions = [r.json["short_description"] for r in records if r.key == row.encode()]
    assert "stale page" not in versions, versions
    assert versions[-1] == "newest", versions
    assert victim.events("this process stood still past its group session")


async def _is(env: Env, alias: str, row: str, text: str) -> bool:
    return await _latest(env, alias, row) == text
