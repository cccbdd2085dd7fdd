"""The demo's configuration: ``config.example.yaml`` pointed at this run's emulator and Kafka."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import yaml

from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.errors import ConfigError
from snowsource.demo.options import EMULATOR_PASSWORD, EMULATOR_USER, Options

DEMO_DISCOVER: Final = {"extends": ["task"], "exclude": ["sc_*"], "interval.seconds": 60}
CHECKOUT: Final = Path(__file__).resolve().parents[2]
EXAMPLE: Final = CHECKOUT / "config.example.yaml"


def write_config(path: Path, *, url: str, options: Options, rest_port: int | None) -> Settings:
    """Write the derived configuration to ``path`` and return it validated."""
    try:
        text = EXAMPLE.read_text(encoding="utf-8")
    except OSError:
        raise SystemExit(
            f"demo: {EXAMPLE} not found; the demo runs from a clone of snowsource (make demo)"
        ) from None
    document: dict[str, Any] = yaml.safe_load(text)
    # A unique connector name: every run backfills from scratch.
    document["name"] = "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    document["snow"]["url"] = url
    document["snow"]["auth"].update(
        {"type": "basic", "username": EMULATOR_USER, "password": EMULATOR_PASSWORD}
    )
    document["kafka"]["bootstrap.servers"] = options.bootstrap
    # A livelier stream view than the example's 5 s; everything else is the example's.
    document["poll.interval.ms"] = 1000
    document["log"] = {"format": "json", "level": "INFO"}
    document["rest"] = (
        {"enabled": True, "host": "127.0.0.1", "port": rest_port}
        if rest_port is not None
        else {"enabled": False}
    )
    if options.registry_url is not None:
        document["value.format"] = "avro"
        document["schema.registry"] = {"url": options.registry_url}
    # The whole instance (SPEC §15.2): every table under task beside the explicit ones, found
    # in sys_db_object at start and again every minute.
    document["snow"]["discover"] = DEMO_DISCOVER
    # The demo's tables are small: all of them backfill at once, so each shows rows within
    # seconds (the default of 4 would queue the discovered ones behind the explicit three).
    document["backfill.max.tables"] = 16
    if options.topic_prefix is not None:
        document["topic.prefix"] = options.topic_prefix
        for table in document["snow"]["tables"].values():
            table.pop("topic", None)
    path.write_text(
        "# Written by the snowsource demo from config.example.yaml\n"
        + yaml.safe_dump(document, sort_keys=False),
        encoding="utf-8",
    )
    try:
        return load_config(path, env={}).settings
    except ConfigError as exc:
        raise SystemExit(f"demo: the derived configuration is invalid: {exc}") from None
