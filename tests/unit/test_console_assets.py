"""The console's static files keep the rules the CSP and SPEC §14.4 rely on, and ship in the
package (the browser tests exercise the behaviour; these catch a regression in the source)."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path

import pytest

from snowsource.api.console import ASSETS

REPO = Path(__file__).resolve().parents[2]
CONSOLE = REPO / "snowsource" / "api" / "console"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)


def _page() -> _Tags:
    parser = _Tags()
    parser.feed((CONSOLE / "index.html").read_text(encoding="utf-8"))
    return parser


def test_the_page_has_no_inline_script_style_or_handler() -> None:
    page = _page()
    assert page.script_text == []
    for tag, attrs in page.tags:
        assert tag != "style", "inline <style> (the CSP refuses it)"
        assert "style" not in attrs, f"style attribute on <{tag}>"
        handlers = [name for name in attrs if name.startswith("on")]
        assert not handlers, f"inline handler {handlers} on <{tag}>"
        if tag == "script":
            assert attrs.get("src"), "a <script> without src"


def test_the_page_loads_nothing_from_another_origin() -> None:
    for tag, attrs in _page().tags:
        for name in ("src", "href"):
            value = attrs.get(name) or ""
            assert not re.match(r"^(?:[a-z]+:)?//", value), f"<{tag} {name}={value}>"
    for name in ("console.js", "console.css"):
        text = (CONSOLE / name).read_text(encoding="utf-8")
        assert not re.search(r"https?://", text), f"{name} names an absolute URL"


@pytest.mark.parametrize(
    "pattern",
    [
        r"\.innerHTML\b",
        r"\.outerHTML\b",
        r"insertAdjacentHTML",
        r"document\.write",
        r"\beval\(",
        r"new Function",
        r"localStorage",
        r"document\.cookie",
        r"setAttribute\(\s*['\"]style",
    ],
)
def test_the_script_never_turns_api_text_into_markup_or_stores_the_token(pattern: str) -> None:
    script = (CONSOLE / "console.js").read_text(encoding="utf-8")
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("//"))
    assert not re.search(pattern, code), pattern


def test_every_asset_is_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["snowsource"]
    shipped = {name for name, _ in ASSETS.values()}
    files = {p.name for p in CONSOLE.iterdir() if p.suffix in {".html", ".css", ".js", ".svg"}}
    assert shipped == files
    for name in shipped:
        relative = f"api/console/{name}"
        assert any(fnmatch(relative, glob) for glob in globs), f"{relative} is not package data"
