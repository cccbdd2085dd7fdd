"""The cluster tests' world: the emulator with rows changing, ``snowsource run`` processes on
the three-broker cluster, and the checks every fault test ends with (SPEC §15.4).

After a fault: every row's final version is in Kafka; exactly-once: no (sys_id, value) twice
under ``read_committed``; at-least-once: duplicates are counted (the daemon never restarts in
these tests, so the restart dedup plays no part; what a fault may duplicate is reported); the
offsets topic's cursor of a table never moved back; the daemon never exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from snowsource.core.offsets_codec import parse_key, partition_for
from snowsource.core.txn_id import transactional_id
from snowsource.emulator import Emulator
from tests.integration.engine import Record, base_config, read_topic, write_config
from tests.integration.processes import start_run
from tests.kafka_cluster import NODES, LocalCluster
from tests.polling import poll_until

#: The field a test changes per table (each table has its own text field).
CHANGED_FIELD = {"incident": "short_description", "change_request": "short_description"}
OFFSETS_PARTITIONS = 3


@dataclass
class Daemon:
    """One ``snowsource run`` process of a connector; its JSON log in a file per start."""

    name: str
    exactly_once: bool
    tables: tuple[str, ...]
    config: Path
    proc: asyncio.subprocess.Process | None = None
    logs: list[Path] = field(default_factory=list)

    @property
    def mode(self) -> str:
        return "exactly-once" if self.exactly_once else "at-least-once"

    @property
    def offsets_topic(self) -> str:
        return f"{self.name}-offsets"

    def topic(self, table: str) -> str:
        return f"{self.name}.{table}"

    async def start(self) -> None:
        log = self.config.with_suffix(f".{len(self.logs)}.log")
        self.logs.append(log)
        self.proc = await start_run(self.config, log)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def lines(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for log in self.logs:
            for line in log.read_bytes().splitlines():
                try:
                    out.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    out.append({"event": line.decode("utf-8", "replace"), "level": "raw"})
        return out

    def tail(self) -> str:
        return "".join(log.read_text()[-4000:] for log in self.logs[-1:])

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await asyncio.wait_for(self.proc.wait(), 90)


class World:
    """Emulator + cluster + the daemons a test started."""

    def __init__(
        self, emu: Emulator, url: str, cluster: LocalCluster, name: str, tmp_path: Path
    ) -> None:
        self.emu = emu
        self.url = url
        self.cluster = cluster
        self.name = name
        self.tmp_path = tmp_path
        self.daemons: list[Daemon] = []
        self.rng = random.Random(30)

    # ------------------------------------------------------------------------------ daemons

    def daemon(
        self, suffix: str, *, exactly_once: bool, tables: Iterable[str] = ("incident",), **top: Any
    ) -> Daemon:
        """A daemon's configuration (not started): its own connector, topics, offsets topic."""
        name = f"{self.name}-{suffix}"
        aliases = tuple(tables)
        document = base_config(
            emulator_url=self.url,
            bootstrap=self.cluster.bootstrap,
            name=name,
            offsets_topic=f"{name}-offsets",
            tables={alias: {"name": alias, "topic": f"{name}.{alias}"} for alias in aliases},
            **{
                "exactly.once": exactly_once,
                "batch.size": 50,
                "offset.storage.partitions": OFFSETS_PARTITIONS,
                "kafka": {
                    "bootstrap.servers": self.cluster.bootstrap,
                    "startup.timeout.seconds": 90,
                },
                **top,
            },
        )
        config = write_config(self.tmp_path / f"{name}-{len(self.daemons)}.yaml", document)
        daemon = Daemon(name, exactly_once, aliases, config)
        self.daemons.append(daemon)
        return daemon

    def group(
        self, suffix: str, *, exactly_once: bool, tables: Iterable[str], members: int = 3
    ) -> list[Daemon]:
        """``members`` processes of one connector sharing its tables (tasks.assignment:
        group); each has a configuration file (and so logs) of its own."""
        first = self.daemon(
            suffix, exactly_once=exactly_once, tables=tables, **{"tasks.assignment": "group"}
        )
        document = yaml.safe_load(first.config.read_text())
        document.pop("tasks.max", None)
        document.pop("task.id", None)
        write_config(first.config, document)
        out = [first]
        for n in range(1, members):
            config = write_config(first.config.with_name(f"{first.name}-m{n}.yaml"), document)
            member = Daemon(first.name, exactly_once, first.tables, config)
            self.daemons.append(member)
            out.append(member)
        return out

    def pair(self, **top: Any) -> tuple[Daemon, Daemon]:
        """An at-least-once and an exactly-once connector reading the same tables."""
        return self.daemon("alo", exactly_once=False, **top), self.daemon(
            "eos", exactly_once=True, **top
        )

    async def close(self) -> None:
        """Kill the daemons still running."""
        for daemon in self.daemons:
            if daemon.alive:
                await daemon.stop(signal.SIGKILL)

    async def delete_topics(self) -> None:
        """Delete the daemons' topics: the cluster's data directory outlives the run, and every
        topic left slows its next start."""
        topics = {t for d in self.daemons for t in (d.offsets_topic, *map(d.topic, d.tables))}
        admin = AIOKafkaAdminClient(bootstrap_servers=self.cluster.bootstrap)
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            if topics & existing:
                await admin.delete_topics(sorted(topics & existing))
        finally:
            await admin.close()

    # ------------------------------------------------------------------------------- topics

    async def place(self, daemon: Daemon, *, output: int, offsets: int) -> None:
        """Create the daemon's topics before it starts, led by the given nodes: a test then
        knows which node to kill (a node restarted later does not take leadership back)."""

        def replicas(leader: int) -> list[int]:
            return [leader, *(n for n in NODES if n != leader)]

        compact = {"cleanup.policy": "compact"}
        topics = [
            NewTopic(daemon.topic(t), -1, -1, replica_assignments={0: replicas(output)})
            for t in daemon.tables
        ]
        spread = {p: replicas(offsets) for p in range(OFFSETS_PARTITIONS)}
        topics.append(NewTopic(daemon.offsets_topic, -1, -1, spread, topic_configs=compact))
        admin = AIOKafkaAdminClient(bootstrap_servers=self.cluster.bootstrap)
        await admin.start()
        try:
            await admin.create_topics(topics)
        finally:
            await admin.close()

    def transactional_id(self, daemon: Daemon, table: str = "incident") -> str:
        return transactional_id(daemon.name, self.partition(table))

    def partition(self, table: str) -> Any:
        return partition_for(
            snow_url=self.url,
            table=table,
            query=None,
            query_domain=True,
            timestamp_field="sys_updated_on",
        )

    # ---------------------------------------------------------------------------------- rows

    def backfill(self, table: str, rows: int) -> None:
        """``rows`` rows stamped an hour ago, 25 to a second."""
        from datetime import timedelta

        base = self.emu.clock.now() - timedelta(hours=1)
        for second in range(0, rows, 25):
            self.emu.burst(table, min(25, rows - second), at=base + timedelta(seconds=second))

    @contextlib.asynccontextmanager
    async def changing(
        self, tables: Iterable[str] = ("incident",), every: float = 0.1
    ) -> AsyncIterator[None]:
        """Rows keep changing (updates, and an insert every fifth change) until the block
        ends: about ten changes a second."""
        names = tuple(tables)

        async def change() -> None:
            n = 0
            while True:
                n += 1
                table = names[n % len(names)]
                text = CHANGED_FIELD[table]
                if n % 5 == 0:
                    self.emu.insert(table, {text: f"new {n}"})
                else:
                    ids = [r["sys_id"] for r in self.emu.rows(table)]
                    self.emu.update(table, self.rng.choice(ids), {text: f"v{n}"})
                await asyncio.sleep(every)

        task = asyncio.create_task(change())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --------------------------------------------------------------------------------- reads

    async def records(self, daemon: Daemon, table: str) -> list[Record]:
        isolation = "read_committed" if daemon.exactly_once else "read_uncommitted"
        return await read_topic(
            self.cluster.bootstrap, daemon.topic(table), isolation_level=isolation
        )

    async def count(self, daemon: Daemon, table: str = "incident") -> int:
        """Records in the table's topic now (0 while the cluster cannot answer)."""
        try:
            async with asyncio.timeout(20):
                return len(await self.records(daemon, table))
        except Exception:  # a poll during a fault: "not yet"
            return 0

    async def phase(self, daemon: Daemon, table: str = "incident") -> str | None:
        """The phase of the table's committed offset (None before the first)."""
        try:
            async with asyncio.timeout(20):
                offsets = await read_topic(self.cluster.bootstrap, daemon.offsets_topic)
        except Exception:  # a poll during a fault: "not yet"
            return None
        phase = None
        for record in offsets:
            parsed = parse_key(record.key or b"")
            if parsed and parsed[1].get("table") == table and record.value:
                phase = orjson.loads(record.value).get("phase")
        return phase

    async def streaming(self, *daemons: Daemon, timeout: float = 180) -> None:
        """Every table of every daemon committed a ``stream`` offset (its backfill is done)."""
        for daemon in daemons:
            for table in daemon.tables:
                await poll_until(
                    functools.partial(self._phase_is, daemon, table, "stream"),
                    timeout=timeout,
                    interval=1,
                    what=f"{daemon.mode} {table} streaming",
                )

    async def _phase_is(self, daemon: Daemon, table: str, phase: str) -> bool:
        assert daemon.alive, f"{daemon.mode} daemon exited:\n{daemon.tail()}"
        return await self.phase(daemon, table) == phase

    # -------------------------------------------------------------------------------- checks

    async def _final(self, daemon: Daemon, table: str) -> bool:
        assert daemon.alive, f"{daemon.mode} daemon exited:\n{daemon.tail()}"
        try:
            async with asyncio.timeout(30):
                records = await self.records(daemon, table)
        except Exception:  # the cluster may still be recovering
            return False
        latest = {r.key.decode(): r.json["sys_mod_count"] for r in records if r.key}
        final = {r["sys_id"]: r["sys_mod_count"] for r in self.emu.rows(table)}
        return latest == final

    async def settled(self, *daemons: Daemon, timeout: float = 240) -> dict[str, int]:
        """The checks of every fault test, once rows stopped changing; returns the duplicate
        (sys_id, value) count of each at-least-once daemon."""
        duplicates: dict[str, int] = {}
        connectors = {daemon.name: daemon for daemon in daemons}  # a group's members: once
        for daemon in connectors.values():
            for table in daemon.tables:
                await poll_until(
                    functools.partial(self._final, daemon, table),
                    timeout=timeout,
                    interval=1,
                    what=f"{daemon.mode}: every final version of {table} in Kafka",
                )
                pairs = Counter((r.key, r.value) for r in await self.records(daemon, table))
                twice = sum(n - 1 for n in pairs.values() if n > 1)
                if daemon.exactly_once:
                    assert not twice, f"{twice} records read twice under read_committed"
                else:
                    duplicates[f"{daemon.name}.{table}"] = twice
            await self.offsets_never_moved_back(daemon)
        for daemon in daemons:
            assert daemon.alive, f"{daemon.mode} daemon exited:\n{daemon.tail()}"
        return duplicates

    async def offsets_never_moved_back(self, daemon: Daemon) -> None:
        """Each table's cursor, record after record of the offsets topic, never decreased."""
        peak: dict[bytes, tuple[str, str]] = {}
        for record in await read_topic(self.cluster.bootstrap, daemon.offsets_topic):
            if not record.key or not record.value:
                continue
            value = orjson.loads(record.value)
            cursor = (value.get("timestamp", ""), value.get("sys_id", ""))
            before = peak.get(record.key)
            assert before is None or cursor >= before, (
                f"{daemon.mode}: offset moved back from {before} to {cursor}"
            )
            peak[record.key] = cursor
        assert peak, f"{daemon.mode}: no offset committed"
