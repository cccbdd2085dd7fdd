"""A benchmark case and the emulator process seeded for it (shared by the suite and its parts)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import orjson

from bench.procstat import cpu_seconds


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark setting: tables with row counts, and the emulator's added latency."""

    name: str
    tables: tuple[tuple[str, int], ...]
    latency_ms: float = 0.0
    nodes: int = 2  # the emulator models an instance with this many nodes (SPEC §14.1)
    rate_limit: int = 0  # a rate-limit rule of this many requests per (compressed) window
    rate_window: float = 3600.0  # the rule's "hour", in seconds

    @property
    def rows(self) -> int:
        return sum(n for _, n in self.tables)


class Emulator:
    """The emulator process of one case."""

    def __init__(self, case: Case) -> None:
        args = [sys.executable, "-m", "bench.emulator_proc", "--latency-ms", str(case.latency_ms)]
        args += ["--nodes", str(case.nodes)]
        if case.rate_limit:
            args += ["--rate-limit", str(case.rate_limit), "--rate-window", str(case.rate_window)]
        for table, rows in case.tables:
            args += ["--table", f"{table}={rows}"]
        self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the emulator process exited before it was ready")
        ready = orjson.loads(line)
        self.url: str = ready["url"]
        self.control: str = ready["control"]
        self.seed_seconds: float = ready["seed_seconds"]
        self.index_seconds: float = ready["index_seconds"]

    def cpu(self) -> float:
        """The emulator process's CPU seconds so far."""
        return cpu_seconds(self.process.pid)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
