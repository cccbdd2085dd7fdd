"""User-facing documents speak to users: no internal references, a license, upgrade notes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_DOCS = sorted([REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md")])
# Words that only make sense to the people who built it: a contract's section numbers, the
# ticket that asked for something, a folder that exists on the developers' machine only.
INTERNAL = re.compile(r"\bSPEC\b|§|\b[Tt]he issue\b|\.\./shared|/work/shared")


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_user_docs_have_no_internal_references(path: Path) -> None:
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if INTERNAL.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_license_file_is_the_one_pyproject_names() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text


def _releases() -> dict[str, str]:
    """Each ``## `` section of the changelog by its heading, newest first."""
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_changelog_has_upgrade_notes_for_this_release() -> None:
    releases = _releases()
    newest = next(iter(releases.values()))
    assert "### Upgrade notes" in newest
    # Offset values as Kafka Connect writes them: the 0.2 upgrade note that must stay.
    assert "key order" in releases["Unreleased (0.2.0)"]


def test_readme_links_resolve() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (REPO / target).exists(), target


def test_rest_docs_list_the_intentional_differences_from_connect() -> None:
    text = (REPO / "docs" / "rest.md").read_text(encoding="utf-8")
    section = text.split("## Where snowsource answers differently on purpose", 1)[1]
    assert "PATCH validates the offsets" in section
    assert "Malformed JSON is a 400" in section


def test_offsets_docs_warn_about_a_connect_workers_rest_api() -> None:
    text = (REPO / "docs" / "offsets.md").read_text(encoding="utf-8")
    section = text.split("### A Kafka Connect worker's REST API is not snowsource's", 1)[1]
    assert "overwrites it" in section
    assert "Stop snowsource first" in section
