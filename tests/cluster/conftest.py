"""Fixtures for the cluster tests (``make test-cluster``): the three-broker cluster, started
once per test run, and a world of emulator + cluster per test.

The cluster comes from ``scripts/kafka-cluster.sh`` on ``KAFKA_CLUSTER_PORT`` (default
``KAFKA_PORT`` + 100, so it never meets the single broker of ``make test``); it is stopped at
the end of the run. Every test leaves it whole again (a failed test may have left a node down or
paused).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from snowsource.emulator import Emulator, serve
from tests.cluster.harness import World
from tests.integration.conftest import by_host_name
from tests.kafka_cluster import LocalCluster
from tests.kafka_support import REPO, unique

T0 = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[LocalCluster]:
    """The three-node cluster for the whole run."""
    base = int(os.environ.get("KAFKA_PORT", "9092")) + 100
    port = int(os.environ.get("KAFKA_CLUSTER_PORT", str(base)))
    cluster = LocalCluster(port=port, data_dir=REPO / ".kafka" / f"cluster-{port}")
    cluster.start()
    yield cluster
    if not os.environ.get("KAFKA_CLUSTER_KEEP"):
        cluster.stop()


@pytest.fixture
async def world(kafka_cluster: LocalCluster, tmp_path: Path) -> AsyncIterator[World]:
    """An emulator serving changing rows, the cluster, and the daemons a test starts (killed
    at teardown if still running); the cluster is whole again afterwards."""
    await kafka_cluster.heal()
    emu = Emulator(seed=11, now=T0)
    emu.clock.follow_wall_clock(True)
    emu.instance.configure(nodes=2)
    async with serve(emu) as served:
        world = World(emu, by_host_name(served), kafka_cluster, unique("cl"), tmp_path)
        try:
            yield world
        finally:
            await world.close()
            await kafka_cluster.heal()
            await world.delete_topics()
