"""One line of the ``snowsource check`` report: its status, text and the exit code of a set."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = ["CheckResult", "Status", "exit_code", "format_result"]


class Status(StrEnum):
    """Outcome of one check. Only FAIL (and SKIP, which follows a FAIL) make the exit code 1."""

    PASS = "PASS"  # noqa: S105 - a status word, not a credential
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class CheckResult:
    """One line of the report, with optional indented explanation lines."""

    name: str
    status: Status
    detail: str = ""
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """Whether this result makes ``check`` exit 1."""
        return self.status in (Status.FAIL, Status.SKIP)


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 when no check failed (warnings allowed), else 1."""
    return 1 if any(result.failed for result in results) else 0


_COLORS: Final = {
    Status.PASS: "\x1b[32m",
    Status.WARN: "\x1b[33m",
    Status.FAIL: "\x1b[31m",
    Status.SKIP: "\x1b[2m",
}


def format_result(result: CheckResult, *, color: bool = False) -> str:
    """``PASS  name: detail`` plus indented notes; ANSI colours on request."""
    word = result.status.value
    if color:
        word = f"{_COLORS[result.status]}{word}\x1b[0m"
    line = f"{word}  {result.name}"
    if result.detail:
        line += f": {result.detail}"
    return "\n".join([line, *(f"      {note}" for note in result.notes)])
