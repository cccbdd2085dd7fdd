"""The project's URLs are stated once (pyproject.toml) and the image's source label follows them."""

from __future__ import annotations

import re
import subprocess
import tomllib

from tests.kafka_support import REPO


def _urls() -> dict[str, str]:
    with (REPO / "pyproject.toml").open("rb") as f:
        urls: dict[str, str] = tomllib.load(f)["project"]["urls"]
    return urls


def test_pyproject_names_source_documentation_and_issues() -> None:
    urls = _urls()
    assert set(urls) == {"Source", "Documentation", "Issues"}
    for url in urls.values():
        assert url.startswith("https://")
        assert url.startswith(urls["Source"])


def test_the_image_labels_its_source_from_pyproject_not_from_the_clone() -> None:
    source = _urls()["Source"]
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    default = re.search(r'^ARG SOURCE_URL="(.*)"$', dockerfile, re.MULTILINE)
    assert default is not None
    assert default.group(1) == source
    # image.sh's own function, run alone: what `image.sh build` passes as SOURCE_URL and label.
    script = (REPO / "scripts" / "image.sh").read_text(encoding="utf-8")
    function = re.search(r"^source_url\(\) \{\n.*?^\}\n", script, re.MULTILINE | re.DOTALL)
    assert function is not None
    printed = subprocess.run(
        ["bash", "-c", f'{function.group(0)}\nhere="$1"; source_url', "-", str(REPO)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == source
    assert "remote get-url" not in function.group(0)
