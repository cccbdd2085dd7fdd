"""Which source code is running: the git commit reported by ``GET /`` (Connect's ``commit``).

Two places can know it, tried in order:

1. ``snowsource/BUILD_COMMIT``, a one-line file an image or package build writes next to the
   package (``git rev-parse HEAD > snowsource/BUILD_COMMIT`` before ``pip install .``);
2. the git checkout the package is imported from (``pip install -e .`` or ``python -m
   snowsource`` in a clone), asked once with ``git rev-parse HEAD``.

Otherwise the commit is ``unknown``, the word Kafka itself reports when its build carries none.
A package installed inside someone else's repository (a virtualenv under a project directory) is
not mistaken for a checkout of snowsource: the checkout's top level must be the package's parent.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Final

UNKNOWN_COMMIT: Final = "unknown"
BUILD_FILE: Final = "BUILD_COMMIT"
_PACKAGE: Final = Path(__file__).resolve().parents[1]
_COMMIT: Final = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")  # SHA-1, or SHA-256 repositories


def _from_build_file(package: Path) -> str | None:
    try:
        text = (package / BUILD_FILE).read_text(encoding="ascii").strip().lower()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _COMMIT.fullmatch(text) else None


def _git(checkout: Path, *args: str) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run(  # noqa: S603 - fixed arguments, no shell
            [git, "-C", str(checkout), *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _from_checkout(package: Path) -> str | None:
    checkout = package.parent
    top = _git(checkout, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != checkout:
        return None
    head = _git(checkout, "rev-parse", "HEAD")
    return head if head is not None and _COMMIT.fullmatch(head) else None


def find_commit(package: Path = _PACKAGE) -> str:
    """The commit of the code in ``package``, or ``unknown``."""
    return _from_build_file(package) or _from_checkout(package) or UNKNOWN_COMMIT


@functools.cache
def commit() -> str:
    """The running code's commit, looked up once per process (the code was loaded at start)."""
    return find_commit()
