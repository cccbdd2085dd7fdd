"""The project's three-broker KRaft cluster (``scripts/kafka-cluster.sh``), driven from tests."""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from tests.kafka_support import REPO

CLUSTER_SCRIPT = REPO / "scripts" / "kafka-cluster.sh"
NODES = (1, 2, 3)


@dataclass
class LocalCluster:
    """Three nodes on ``port``, ``port + 1``, ``port + 2`` (controllers 1000 higher)."""

    port: int
    data_dir: Path

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + n - 1}" for n in NODES)

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.port + node - 1}"

    def run(self, *args: str, timeout: float = 240) -> str:
        env = {**os.environ, "KAFKA_PORT": str(self.port), "KAFKA_DATA": str(self.data_dir)}
        done = subprocess.run(
            [str(CLUSTER_SCRIPT), *args],
            env=env,
            check=True,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
        return done.stdout

    async def arun(self, *args: str) -> str:
        """``run`` off the event loop: the emulator the daemons read keeps answering."""
        return await asyncio.to_thread(self.run, *args)

    def start(self) -> None:
        self.run("start")

    def stop(self) -> None:
        self.run("stop")

    async def kill(self, node: int) -> None:
        await self.arun("kill", str(node))

    async def restart(self, node: int) -> None:
        await self.arun("restart", str(node))

    async def pause(self, node: int) -> None:
        await self.arun("pause", str(node))

    async def resume(self, node: int) -> None:
        await self.arun("resume", str(node))

    async def controller(self) -> int:
        """The active KRaft controller's node id."""
        return int((await self.arun("controller")).strip())

    def states(self) -> dict[int, str]:
        """``running`` / ``paused`` / ``down`` / ``not answering`` per node."""
        env = {**os.environ, "KAFKA_PORT": str(self.port), "KAFKA_DATA": str(self.data_dir)}
        out = subprocess.run(
            [str(CLUSTER_SCRIPT), "status"], env=env, capture_output=True, text=True, check=False
        ).stdout
        states: dict[int, str] = {}
        for line in out.splitlines():
            words = line.split()
            if len(words) >= 5 and words[0] == "node":
                states[int(words[1])] = words[4] if words[4] != "not" else "not answering"
        return states

    async def heal(self) -> None:
        """Every node running again (after a test that failed half-way through a fault)."""
        for node, state in self.states().items():
            if state == "paused":
                await self.resume(node)
            elif state != "running":
                await self.restart(node)

    async def leader(self, topic: str, partition: int = 0) -> int:
        """The node leading ``topic``'s ``partition`` now."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            for entry in await admin.describe_topics([topic]):
                for part in entry["partitions"]:
                    if part["partition"] == partition:
                        return int(part["leader"])
        finally:
            await admin.close()
        raise AssertionError(f"no leader known for {topic}-{partition}")

    async def transaction_coordinator(self, transactional_id: str) -> int:
        """The node coordinating ``transactional_id``'s transactions now."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            return int(await admin.find_coordinator(transactional_id, coordinator_type=1))
        finally:
            await admin.close()
