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
    async with serve(emu) as url:
        name = unique("conn")
        yield Env(emu, url, kafka_bootstrap, name, f"{name}-offsets", tmp_path)


@pytest.fixture
def past() -> Callable[[float], datetime]:
    """``past(s)``: an aware UTC instant ``s`` seconds before the emulator's T0."""
    from datetime import timedelta

    return lambda seconds: T0 - timedelta(seconds=seconds)
