"""Where ``GET /`` finds the commit it reports: a build-time file, else the checkout."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from snowsource.observability.build import BUILD_FILE, UNKNOWN_COMMIT, find_commit

SHA = "0123456789abcdef0123456789abcdef01234567"

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _package(root: Path) -> Path:
    package = root / "snowsource"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    return package


def test_a_build_file_wins(tmp_path: Path) -> None:
    package = _package(tmp_path)
    (package / BUILD_FILE).write_text(SHA.upper() + "\n")
    assert find_commit(package) == SHA


def test_a_build_file_that_is_not_a_commit_is_ignored(tmp_path: Path) -> None:
    package = _package(tmp_path)
    (package / BUILD_FILE).write_text("$(git rev-parse HEAD)\n")
    assert find_commit(package) == UNKNOWN_COMMIT


def test_no_build_file_and_no_checkout_is_unknown(tmp_path: Path) -> None:
    assert find_commit(_package(tmp_path)) == UNKNOWN_COMMIT


@needs_git
def test_a_checkout_reports_its_head(tmp_path: Path) -> None:
    package = _package(tmp_path)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "first")
    assert find_commit(package) == _git(tmp_path, "rev-parse", "HEAD")


@needs_git
def test_a_package_inside_another_projects_repository_is_not_a_checkout(tmp_path: Path) -> None:
    # e.g. a virtualenv's site-packages under someone's project directory
    _git(tmp_path, "init", "-q")
    (tmp_path / "README").write_text("x")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "theirs")
    package = _package(tmp_path / "venv" / "lib" / "site-packages")
    assert find_commit(package) == UNKNOWN_COMMIT
