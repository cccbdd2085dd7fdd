"""The demo's child processes (emulator, daemon) and its place on the terminal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from pydantic import SecretStr

from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.core.errors import ServiceNowError
from snowsource.demo.options import EMULATOR_PASSWORD, EMULATOR_USER


class InterruptedDemoError(Exception):
    """Ctrl-C before the daemon ran: a stop the user asked for, not a failure."""


def child_env() -> dict[str, str]:
    """The caller's environment without ``SNOWSOURCE_*``: the daemon runs exactly the
    configuration the demo wrote."""
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("SNOWSOURCE_")}


class Child:
    """A subprocess in its own session: Ctrl-C reaches only the demo, which stops it in order."""

    def __init__(self, name: str, argv: Sequence[str], log: IO[bytes], *, pipe: bool) -> None:
        self.name = name
        self._argv = list(argv)
        self._log = log
        self._pipe = pipe
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Child:
        self.proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdout=asyncio.subprocess.PIPE if self._pipe else self._log,
            stderr=asyncio.subprocess.PIPE if self._pipe else self._log,
            stdin=asyncio.subprocess.DEVNULL,
            env=child_env(),
            start_new_session=True,
            limit=16 * 1024 * 1024,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(within=15)

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended."""
        return None if self.proc is None else self.proc.returncode

    async def stop(self, within: float) -> int | None:
        """SIGTERM, wait up to ``within`` s, then SIGKILL. Safe to call more than once."""
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), within)
            except TimeoutError:
                print(f"demo: {self.name} did not stop within {within:g}s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        return proc.returncode

    def kill(self) -> None:
        """Stop at once (a second Ctrl-C)."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file, indented."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


async def wait_for_emulator(url: str, emulator: Child, log_path: Path, stop: asyncio.Event) -> None:
    """Until the emulator answers a read (seeding 20 000 rows per table takes a few seconds)."""
    auth = BasicAuth(EMULATOR_USER, SecretStr(EMULATOR_PASSWORD))
    deadline = time.monotonic() + 180
    async with ServiceNowClient(url, auth, connect_timeout=2, request_timeout=5) as client:
        while True:
            if stop.is_set():
                raise InterruptedDemoError("interrupted while the emulator was starting")
            if emulator.returncode is not None:
                raise SystemExit(
                    f"demo: the emulator exited with code {emulator.returncode}:\n{tail(log_path)}"
                )
            try:
                await client.get_page("incident", {"sysparm_limit": "1"})
                return
            except ServiceNowError:
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"demo: the emulator did not answer:\n{tail(log_path)}"
                    ) from None
                await asyncio.sleep(0.3)


@contextlib.contextmanager
def terminal_foreground() -> Iterator[None]:
    """Make the demo the terminal's foreground process group for the run.

    Ctrl-C signals the whole foreground group: under ``make demo`` that includes make, which
    then dies of SIGINT (exit 130) however cleanly the demo itself stops. In a group of its own
    the demo alone gets Ctrl-C and make sees its exit code. The terminal goes back to the
    previous group afterwards (the shell does that too when make ends). Without a terminal, or
    when the demo is not in the foreground, nothing changes.
    """
    restore = _take_foreground()
    try:
        yield
    finally:
        restore()


def _take_foreground() -> Callable[[], None]:
    def nothing() -> None:
        return None

    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return nothing
    try:
        previous = os.tcgetpgrp(fd)
        if previous != os.getpgrp() or os.getpid() == os.getsid(0):
            os.close(fd)
            return nothing  # in the background, or a session leader (cannot change group)
        os.setpgid(0, 0)
        _set_foreground(fd, os.getpgrp())
    except OSError:
        os.close(fd)
        return nothing

    def restore() -> None:
        with contextlib.suppress(OSError):
            _set_foreground(fd, previous)
        os.close(fd)

    return restore


def _set_foreground(fd: int, group: int) -> None:
    # A process outside the foreground group gets SIGTTOU for tcsetpgrp unless it ignores it.
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, group)
    finally:
        signal.signal(signal.SIGTTOU, old)
