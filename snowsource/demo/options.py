"""What a demo run does, from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

TABLES: Final = ("incident", "change_request", "cmdb_ci")
EMULATOR_USER: Final = "admin"
EMULATOR_PASSWORD: Final = "admin"  # noqa: S105 - the bundled emulator's well-known demo login
# Enough seeded rows, and enough latency per page, to watch a backfill for a while.
DEFAULT_ROWS: Final = 20000
DEFAULT_LATENCY_MS: Final = 150.0
DEFAULT_ACTIVITY: Final = 5.0
DEFAULT_KAFKA_PORT: Final = 9092


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"demo: {name} must be a number, got {raw!r}") from None


@dataclass(frozen=True)
class Options:
    """``DEMO_SECONDS`` (headless for that long), ``KAFKA_BOOTSTRAP`` (default
    ``127.0.0.1:$KAFKA_PORT``, the broker ``scripts/kafka.sh`` runs), ``DEMO_ROWS`` (rows seeded
    per table), ``DEMO_ACTIVITY`` (rows changed per second), ``DEMO_LATENCY_MS`` (emulated
    latency per request), ``DEMO_TOPIC_PREFIX`` (``<prefix><alias>`` instead of the example's
    topics), ``DEMO_REGISTRY_URL`` (write ``value.format: avro`` through this Schema Registry,
    ``make demo-avro``)."""

    seconds: float | None
    bootstrap: str
    kafka_port: int | None  # the local broker's port when the demo uses it
    rows: int
    activity: float
    latency_ms: float
    topic_prefix: str | None
    registry_url: str | None = None

    @classmethod
    def from_env(cls) -> Options:
        """Read the variables named in the class docstring."""
        seconds = _number("DEMO_SECONDS", 0)
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
        port: int | None = int(_number("KAFKA_PORT", DEFAULT_KAFKA_PORT))
        if bootstrap:
            port = None
        else:
            bootstrap = f"127.0.0.1:{port}"
        return cls(
            seconds=seconds if seconds > 0 else None,
            bootstrap=bootstrap,
            kafka_port=port,
            rows=int(_number("DEMO_ROWS", DEFAULT_ROWS)),
            activity=_number("DEMO_ACTIVITY", DEFAULT_ACTIVITY),
            latency_ms=_number("DEMO_LATENCY_MS", DEFAULT_LATENCY_MS),
            topic_prefix=os.environ.get("DEMO_TOPIC_PREFIX") or None,
            registry_url=os.environ.get("DEMO_REGISTRY_URL", "").strip() or None,
        )
