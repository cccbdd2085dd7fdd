"""Fixtures for engine tests: a live emulator whose clock follows real time, config factories."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from snowsource.config.models import Settings
from snowsource.emulator import Emulator, serve
from tests.integration.engine import base_config, settings_from
from tests.kafka_support import unique

T0 = datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC)


@dataclass
class Env:
    """One test's world: emulator, broker, unique connector name and offsets topic."""

    emu: Emulator
    url: str
    bootstrap: str
    name: str
    offsets_topic: str
    tmp_path: Path

    def topic(self, alias: str) -> str:
        return f"{self.name}.{alias}"

    def document(self, tables: dict[str, dict[str, Any]], **top: Any) -> dict[str, Any]:
        """A config document whose tables write to per-test topics."""
        resolved = {alias: {"topic": self.topic(alias), **spec} for alias, spec in tables.items()}
        return base_config(
            emulator_url=self.url,
            bootstrap=self.bootstrap,
            name=self.name,
            offsets_topic=self.offsets_topic,
            tables=resolved,
            **top,
        )

    def settings(self, tables: dict[str, dict[str, Any]], **top: Any) -> Settings:
        return settings_from(self.tmp_path, self.document(tables, **top))


@pytest.fixture
async def env(kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Env]:
    emu = Emulator(seed=11, now=T0)
    emu.clock.follow_wall_clock(True)
    # Engine tests meet an instance: sessions by JSESSIONID, two nodes with their semaphores
    # (SPEC §14.1), reached by a host name as users do (cookie jars treat IP addresses apart).
    emu.instance.configure(nodes=2)
    async with serve(emu) as served:
        name = unique("conn")
        url = by_host_name(served)
        yield Env(emu, url, kafka_bootstrap, name, f"{name}-offsets", tmp_path)


def by_host_name(url: str) -> str:
    """``http://127.0.0.1:PORT`` as ``http://localhost:PORT`` (the emulator listens on both)."""
    return url.replace("://127.0.0.1:", "://localhost:", 1)


@pytest.fixture
def past() -> Callable[[float], datetime]:
    """``past(s)``: an aware UTC instant ``s`` seconds before the emulator's T0."""
    from datetime import timedelta

    return lambda seconds: T0 - timedelta(seconds=seconds)
