"""Starting with one broker of three down (SPEC §15.4): the daemon in both modes, ``check``,
``snowsource offsets list`` and the REST offsets call all work while the broker that leads
every partition of the connector is gone, and nothing is logged at ERROR for it."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from tests.cluster.harness import Daemon, World
from tests.integration.processes import SNOWSOURCE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _command(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        SNOWSOURCE,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 180)
    return proc.returncode or 0, out.decode("utf-8", "replace")


async def _rest_offsets(port: int, daemon: Daemon) -> dict[str, object]:
    url = f"http://127.0.0.1:{port}/connectors/{daemon.name}/offsets"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200, await response.text()
        body: dict[str, object] = await response.json()
        return body


def _errors(daemon: Daemon) -> list[dict[str, object]]:
    return [line for line in daemon.lines() if line.get("level") in ("error", "critical", "raw")]


async def test_everything_starts_with_the_leader_of_every_partition_just_killed(
    world: World,
) -> None:
    ports = _free_port(), _free_port()
    alo = world.daemon("alo", exactly_once=False, rest={"enabled": True, "port": ports[0]})
    eos = world.daemon("eos", exactly_once=True, rest={"enabled": True, "port": ports[1]})
    for daemon in (alo, eos):
        await world.place(daemon, output=2, offsets=2)
    world.backfill("incident", 300)
    async with world.changing():
        # Killed just before: the metadata still names node 2 until the controller fences it.
        await world.cluster.kill(2)
        await asyncio.gather(alo.start(), eos.start())
        code, out = await _command("offsets", "list", "--config", str(alo.config))
        assert code == 0, out
        code, out = await _command("check", "--config", str(eos.config))
        assert code == 0, out
        await world.streaming(alo, eos)
        for port, daemon in zip(ports, (alo, eos), strict=True):
            body = await _rest_offsets(port, daemon)
            assert body.get("offsets"), body
        await world.cluster.restart(2)
    await world.settled(alo, eos)
    for daemon in (alo, eos):
        assert not _errors(daemon), _errors(daemon)[:3]
        warned = [line for line in daemon.lines() if line.get("logger") == "snowsource.kafka"]
        # The WARN names the killed broker: "node 2 (HOST:PORT)", or its bare address when only
        # the bootstrap list named it (its port follows KAFKA_CLUSTER_PORT).
        killed = world.cluster.address(2)
        assert any(
            "node 2" in str(line.get("broker")) or killed in str(line.get("broker"))
            for line in warned
        ), warned
