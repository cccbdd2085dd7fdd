"""``tasks.assignment: group`` with several real ``snowsource run`` processes on one emulator.

Who polls what is read from each process's own log: a member logs "tables started" once a
table's pollers exist and "tables released" once they stopped and wrote their final offsets.
A table is polled twice at once exactly when two members' [started, released] intervals for it
overlap; a killed member's intervals end at the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from snowsource.core.group_plan import owner_among
from tests.integration.conftest import Env
from tests.integration.engine import latest_by_key, read_topic, write_config
from tests.integration.processes import SNOWSOURCE, start_run
from tests.polling import poll_until

ALIASES = [f"ends{digit}" for digit in range(1, 10)]
SESSION_MS = 6000
# The promise: within the session timeout plus 5 s. The dead member's last heartbeat can be up
# to one heartbeat interval before the kill, which the bound absorbs.
FAILOVER_SECONDS = SESSION_MS / 1000 + 5
HANDOVER_SECONDS = 5.0

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wall(iso: object) -> float:
    return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()


@dataclass
class Member:
    """One ``snowsource run`` process of the group."""

    name: str
    log: Path
    port: int
    proc: asyncio.subprocess.Process
    killed_at: float | None = None
    url: str = field(init=False)

    def __post_init__(self) -> None:
        self.url = f"http://127.0.0.1:{self.port}"

    def events(self, event: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("event") == event:
                    found.append(entry)
        return found

    @property
    def key(self) -> str | None:
        # Logged when the member starts owning tables, whether or not the group gives it any.
        owner = self.events("group member")
        return str(owner[0]["member"]) if owner else None

    def running(self) -> set[str]:
        """The tables this member polls now, by its own log."""
        tables: set[str] = set()
        for entry in self._changes():
            if entry["event"] == "tables started":
                tables |= set(entry["tables"])
            else:
                tables -= set(entry["tables"])
        return set() if self.killed_at is not None else tables

    def intervals(self) -> dict[str, list[tuple[float, float]]]:
        """Per table, the wall-clock intervals during which this member polled it."""
        open_since: dict[str, float] = {}
        out: dict[str, list[tuple[float, float]]] = {}
        for entry in self._changes():
            at = _wall(entry["timestamp"])
            for alias in entry["tables"]:
                if entry["event"] == "tables started":
                    open_since[alias] = at
                elif alias in open_since:
                    out.setdefault(alias, []).append((open_since.pop(alias), at))
        end = self.killed_at if self.killed_at is not None else time.time()
        for alias, since in open_since.items():
            out.setdefault(alias, []).append((since, end))
        return out

    def started_at(self, alias: str, after: float) -> float | None:
        for entry in self.events("tables started"):
            at = _wall(entry["timestamp"])
            if alias in entry["tables"] and at >= after:
                return at
        return None

    def _changes(self) -> list[dict[str, Any]]:
        changes = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("event") in ("tables started", "tables released"):
                    changes.append(entry)
        return changes


class Group:
    """Starts members of one connector and stops whatever is left at the end."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.members: list[Member] = []

    def config(self, port: int | None = None) -> Path:
        document = self.env.document(
            {
                alias: {"name": "incident", "query": f"numberENDSWITH{alias[-1]}"}
                for alias in ALIASES
            },
            **{
                "tasks.assignment": "group",
                "group.session.timeout.ms": SESSION_MS,
                "rest": {"enabled": port is not None, "host": "127.0.0.1", "port": port or 0},
            },
        )
        suffix = port if port is not None else "script"
        return write_config(self.env.tmp_path / f"group-{suffix}.yaml", document)

    async def start(self, name: str) -> Member:
        port = _free_port()
        log = self.env.tmp_path / f"{name}.log"
        proc = await start_run(self.config(port), log)
        member = Member(name, log, port, proc)
        self.members.append(member)
        return member

    def live(self) -> list[Member]:
        return [m for m in self.members if m.proc.returncode is None and m.killed_at is None]

    async def kill(self, member: Member) -> None:
        member.proc.send_signal(signal.SIGKILL)
        member.killed_at = time.time()
        assert await member.proc.wait() == -signal.SIGKILL

    async def terminate(self, member: Member) -> None:
        member.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(member.proc.wait(), timeout=60)
        assert code == 0, member.log.read_text()[-3000:]

    def placement(self) -> dict[str, list[str]]:
        """Per table, the live members that poll it now."""
        out: dict[str, list[str]] = {alias: [] for alias in ALIASES}
        for member in self.live():
            for alias in member.running():
                out[alias].append(member.name)
        return out

    def settled(self) -> bool:
        return all(len(names) == 1 for names in self.placement().values())

    def assert_never_polled_twice(self) -> None:
        for alias in ALIASES:
            spans = sorted(
                (start, end, m.name)
                for m in self.members
                for start, end in m.intervals().get(alias, [])
            )
            for (_, end, first), (start, _, second) in itertools_pairwise(spans):
                assert start >= end, (
                    f"{alias} was polled by {first} and {second} at once "
                    f"({second} started {end - start:.2f}s before {first} released it)"
                )

    async def close(self) -> None:
        for member in self.members:
            if member.proc.returncode is None:
                member.proc.send_signal(signal.SIGKILL)
                await member.proc.wait()


def itertools_pairwise(items: list[tuple[float, float, str]]) -> list[Any]:
    return list(itertools.pairwise(items))


@contextlib.asynccontextmanager
async def group_of(env: Env) -> AsyncIterator[Group]:
    group = Group(env)
    try:
        yield group
    finally:
        await group.close()


class Writer:
    """Inserts and updates incidents while the test runs, as users would."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        emu = self.env.emu
        while True:
            row = emu.insert("incident", {"short_description": f"written {self.count}"})
            emu.update("incident", row["sys_id"], {"short_description": f"updated {self.count}"})
            self.count += 1
            await asyncio.sleep(0.1)


async def _status(session: aiohttp.ClientSession, member: Member, name: str) -> dict[str, Any]:
    async with session.get(f"{member.url}/connectors/{name}/status") as response:
        assert response.status == 200
        body: dict[str, Any] = await response.json()
        return body


async def _table_gauges(session: aiohttp.ClientSession, member: Member, alias: str) -> list[str]:
    """The lines of ``member``'s /metrics that give ``alias``'s state or lag."""
    async with session.get(f"{member.url}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return [
        line
        for line in text.splitlines()
        if line.startswith(("snowsource_table_state{", "snowsource_lag_seconds{"))
        and f'table="{alias}"' in line
    ]


async def _nothing_lost(env: Env) -> bool:
    """Every row's final version is in its table's topic."""
    rows = env.emu.rows("incident")
    for alias in ALIASES:
        expected = {
            r["sys_id"]: r["short_description"] for r in rows if r["number"].endswith(alias[-1])
        }
        found = latest_by_key(await read_topic(env.bootstrap, env.topic(alias)))
        got = {key: value.get("short_description") for key, value in found.items()}
        if any(got.get(sys_id) != text for sys_id, text in expected.items()):
            return False
    return True


async def _offsets_script(group: Group) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        SNOWSOURCE,
        "offsets",
        "rewind",
        ALIASES[0],
        "--to",
        "2026-09-01 00:00:00",
        "--config",
        str(group.config()),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_group_shares_tables_fails_over_rebalances_and_hands_over(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=90)
    writer = Writer(env)
    async with group_of(env) as group, aiohttp.ClientSession() as session:
        a, b, c = [await group.start(n) for n in ("a", "b", "c")]
        await poll_until(lambda: all(m.key for m in (a, b, c)), timeout=60, interval=0.2)
        keys = {m.name: str(m.key) for m in (a, b, c)}
        chosen = {
            alias: [next(n for n, k in keys.items() if k == owner_among(alias, keys.values()))]
            for alias in ALIASES
        }
        # Each table polled by exactly one process, the one rendezvous hashing picks (once the
        # group's rounds with all three members are done).
        await poll_until(lambda: group.placement() == chosen, timeout=60, interval=0.2)
        # REST of any member shows the whole connector with each table's owner.
        workers = {m.name: f"127.0.0.1:{m.port}" for m in (a, b, c)}
        placement = group.placement()

        async def shows_every_owner_running() -> bool:
            # A table that just started may still report STARTING (resume, dedup rebuild).
            tables = (await _status(session, a, env.name))["tables"]
            return all(
                tables[alias]["worker_id"] == workers[names[0]]
                and tables[alias]["state"] == "RUNNING"
                for alias, names in placement.items()
            )

        await poll_until(shows_every_owner_running, timeout=30, interval=0.2)
        writer.start()

        # The offsets script refuses while any member runs.
        code, out = await _offsets_script(group)
        assert code == 1, out
        assert "refused: 3 snowsource process(es)" in out, out

        # kill -9: the dead member's tables resume on the others within session + 5 s.
        # Rendezvous over random member keys may leave a member without tables (9 tables over
        # 3 members): the victim is one that has some.
        victim = next(m for m in (c, b, a) if m.running())
        a, b = (m for m in (a, b, c) if m is not victim)
        lost = sorted(victim.running())
        await group.kill(victim)
        killed_at = victim.killed_at
        assert killed_at is not None
        await poll_until(group.settled, timeout=FAILOVER_SECONDS + 10, interval=0.2)
        for alias in lost:
            taken = [t for m in (a, b) if (t := m.started_at(alias, killed_at)) is not None]
            assert taken, alias
            assert taken[0] - killed_at <= FAILOVER_SECONDS, (
                f"{alias} resumed {taken[0] - killed_at:.1f}s after the kill"
            )
        before = {alias: names[0] for alias, names in group.placement().items()}

        # A fourth member: only the tables it wins move, each stopped before it starts.
        d = await group.start("d")
        survivors = {m.name: str(m.key) for m in (a, b)}
        await poll_until(lambda: bool(d.key), timeout=60, interval=0.2)
        survivors["d"] = str(d.key)
        wins = {a_ for a_ in ALIASES if owner_among(a_, survivors.values()) == d.key}
        await poll_until(lambda: group.settled() and d.running() == wins, timeout=60, interval=0.2)
        after = {alias: names[0] for alias, names in group.placement().items()}
        moved = {alias for alias in ALIASES if after[alias] != before[alias]}
        assert moved == wins, (before, after)
        # A released table's state and lag are the new owner's alone: a sum over members
        # counts it once.
        members = {m.name: m for m in (a, b, d)}
        for alias in moved:
            assert await _table_gauges(session, members[before[alias]], alias) == []
            assert await _table_gauges(session, d, alias) != []
        assert len(d.events("tables started")) == 1 or d.running() == wins

        # A clean shutdown hands its tables over within 5 s (d's, unless it won none).
        leaver = next(m for m in (d, a, b) if m.running())
        stayers = [m for m in (a, b, d) if m is not leaver]
        handed = sorted(leaver.running())
        stopping = time.time()
        await group.terminate(leaver)
        await poll_until(group.settled, timeout=30, interval=0.2)
        for alias in handed:
            taken = [t for m in stayers if (t := m.started_at(alias, stopping)) is not None]
            assert taken, alias
            assert taken[0] - stopping <= HANDOVER_SECONDS, (alias, taken[0] - stopping)

        # Every row version written during all this reached its topic.
        await writer.stop()
        await poll_until(lambda: _nothing_lost(env), timeout=60, interval=1.0)
        group.assert_never_polled_twice()
        # Every release wrote its final offset (nothing acknowledged was left uncommitted).
        for member in group.members:
            for released in member.events("tables released"):
                assert released["problems"] == [], (member.name, released)

        # Once every member stopped cleanly, the offsets script works at once.
        for member in stayers:
            await group.terminate(member)
        code, out = await _offsets_script(group)
        assert code == 0, out
