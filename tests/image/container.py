"""Running the built image the way each engine can: Docker, Podman, or buildah's chroot isolation.

Docker and Podman run containers as usual (``--network host``, so 127.0.0.1 is the host's, as with
chroot isolation). Where neither works, ``buildah run --isolation chroot`` runs a command in a
working container made from the image: it shares the host's network and PID namespace, applies the
image's user, environment and working directory, but not its ENTRYPOINT/CMD (added here) nor a
stop signal. A stop is therefore delivered as an engine delivers it to PID 1: the image's stop
signal, sent to the container's first process (signalling ``buildah run`` itself kills it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENGINES = ("docker", "podman", "buildah")


@dataclass(frozen=True)
class ImageConfig:
    """The parts of the image configuration the smoke test checks."""

    user: str
    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    labels: dict[str, str]
    stop_signal: str
    healthcheck: list[str]


@dataclass(frozen=True)
class Mount:
    """A host file or directory, mounted read-only."""

    source: Path
    target: str

    def volume(self) -> str:
        return f"{self.source}:{self.target}:ro"


@dataclass
class Running:
    """A container started in the background."""

    process: subprocess.Popen[str]
    engine: Engine
    name: str
    stop_signal: str

    def stop(self, timeout: float) -> int:
        """Stop it as the engine's ``stop`` does; the exit code, within ``timeout`` seconds."""
        if self.engine.kind == "buildah":
            os.kill(self.engine.first_process(self.process.pid), _signal(self.stop_signal))
        else:
            subprocess.run(
                [self.engine.kind, "stop", "--time", str(int(timeout) + 5), self.name],
                check=True,
                capture_output=True,
                timeout=timeout + 30,
            )
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """End it whatever state it is in (a failed test's clean-up); no container stays behind."""
        if self.process.poll() is not None:
            return
        if self.engine.kind == "buildah":
            # Killing `buildah run` alone could leave the command running outside any container.
            with contextlib.suppress(AssertionError, ProcessLookupError):
                os.kill(self.engine.first_process(self.process.pid), signal.SIGKILL)
        else:
            subprocess.run(
                [self.engine.kind, "rm", "--force", self.name], capture_output=True, check=False
            )
        self.process.kill()
        self.process.wait()


@dataclass
class Engine:
    """One engine and the image under test; ``close`` removes buildah's working containers."""

    kind: str
    image: str
    _working: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise ValueError(f"SNOWSOURCE_IMAGE_ENGINE={self.kind!r}: expected one of {ENGINES}")

    def config(self) -> ImageConfig:
        if self.kind == "buildah":
            out = _capture(["buildah", "inspect", "--type", "image", self.image])
            cfg: dict[str, Any] = json.loads(out)["Docker"]["config"]
            health = cfg.get("Healthcheck") or {}
        else:
            out = _capture([self.kind, "image", "inspect", self.image])
            found = json.loads(out)[0]
            cfg = found["Config"]
            health = cfg.get("Healthcheck") or found.get("Healthcheck") or {}
        env = dict(item.split("=", 1) for item in cfg.get("Env") or [])
        return ImageConfig(
            user=cfg.get("User") or "",
            entrypoint=list(cfg.get("Entrypoint") or []),
            cmd=list(cfg.get("Cmd") or []),
            env=env,
            labels=dict(cfg.get("Labels") or {}),
            stop_signal=cfg.get("StopSignal") or "SIGTERM",
            healthcheck=list(health.get("Test") or []),
        )

    def argv(
        self,
        command: Sequence[str] | None,
        *,
        entrypoint: Sequence[str] | None = None,
        mounts: Sequence[Mount] = (),
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        name: str | None = None,
    ) -> list[str]:
        """The host command line that runs ``command`` (None: the image's CMD) in the image.

        ``entrypoint`` replaces the image's ENTRYPOINT (``[]`` runs ``command`` as it is).
        """
        env = env or {}
        if self.kind == "buildah":
            cfg = self.config()
            first = list(cfg.entrypoint if entrypoint is None else entrypoint)
            full = first + list(cfg.cmd if command is None else command)
            args = ["buildah", "run", "--isolation", "chroot", "--network", "host"]
            args += [f"--volume={m.volume()}" for m in mounts]
            args += [f"--env={k}={v}" for k, v in env.items()]
            if user is not None:
                args.append(f"--user={user}")
            return [*args, self._working_container(), "--", *full]
        args = [self.kind, "run", "--rm", "--network", "host"]
        if name is not None:
            args += ["--name", name]
        args += [f"--volume={m.volume()}" for m in mounts]
        args += [f"--env={k}={v}" for k, v in env.items()]
        if user is not None:
            args.append(f"--user={user}")
        rest = list(command or [])
        if entrypoint is not None:
            args.append(f"--entrypoint={entrypoint[0] if entrypoint else ''}")
            rest = [*entrypoint[1:], *rest]
        return [*args, self.image, *rest]

    def run(
        self, command: Sequence[str] | None, *, timeout: float = 120, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(command, **kwargs),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, command: Sequence[str] | None, *, log: Path, **kwargs: Any) -> Running:
        name = f"snowsource-smoke-{uuid.uuid4().hex[:8]}"
        with log.open("w") as sink:
            process = subprocess.Popen(
                self.argv(command, name=name, **kwargs),
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
            )
        return Running(process, self, name, self.config().stop_signal)

    def first_process(self, runner_pid: int) -> int:
        """The first process of a ``buildah run`` container, the one a stop signal is for.

        Below the runner, buildah's own chroot helper already has the container's root but runs
        from a memfd; the command is the first process whose executable lies inside that root.
        """
        for pid in _descendants(runner_pid):
            try:
                root = os.readlink(f"/proc/{pid}/root")
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:  # it ended meanwhile
                continue
            if root != "/" and exe.startswith(f"{root}/"):
                return pid
        raise AssertionError(f"no container process below buildah run (pid {runner_pid})")

    def close(self) -> None:
        for container in self._working:
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
        self._working.clear()

    def _working_container(self) -> str:
        # One per command: concurrent `buildah run`s would otherwise share one container's mounts.
        name = f"snowsource-smoke-{uuid.uuid4().hex[:8]}"
        _capture(["buildah", "from", "--pull-never", "--name", name, self.image])
        self._working.append(name)
        return name


def _capture(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr}")
    return result.stdout


def _signal(name: str) -> int:
    """An image's StopSignal: ``SIGTERM``, ``TERM`` or ``15``."""
    if name.isdigit():
        return int(name)
    return int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])


def _descendants(pid: int) -> Iterator[int]:
    """Processes below ``pid``, parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields start after the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    queue = list(children.get(pid, []))
    while queue:
        current = queue.pop(0)
        yield current
        queue.extend(children.get(current, []))
