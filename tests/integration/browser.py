"""Headless Chromium for the console's tests: Debian's ``chromium`` driven by Playwright.

Playwright's own browser download cannot work on these machines, so the browser is always the
system's (``executable_path``). The tests skip only when that browser or the ``playwright``
package is truly missing; ``CONSOLE_BROWSER_REQUIRED=1`` (set by ``.ci/run``) turns that skip into
a failure, so CI never passes without having run them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page, ViewportSize

REPO = Path(__file__).resolve().parents[2]
#: Screenshots the tests take (git-ignored; docs/img/console.png is a copy of one).
SCREENSHOTS = REPO / ".artifacts" / "console"
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}


def chromium_path() -> str | None:
    """The system's Chromium, or None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def unavailable(why: str) -> NoReturn:
    """Skip, unless CI requires the browser tests to run."""
    if os.environ.get("CONSOLE_BROWSER_REQUIRED") == "1":
        pytest.fail(f"the console's browser tests cannot run: {why}")
    pytest.skip(why)


@contextlib.asynccontextmanager
async def system_chromium() -> AsyncIterator[Browser]:
    """Headless system Chromium, or a skip (a failure under ``CONSOLE_BROWSER_REQUIRED=1``)."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    executable = chromium_path()
    if executable is None:
        unavailable("no chromium on PATH (apt-get install chromium)")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=executable, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


class PageProblems:
    """What the page complained about: script errors and CSP refusals fail a test."""

    def __init__(self, page: Page) -> None:
        self.messages: list[str] = []
        page.on("pageerror", lambda exc: self.messages.append(f"page error: {exc}"))
        page.on(
            "console",
            # The browser logs every non-2xx answer; the tests check those answers themselves.
            lambda msg: (
                self.messages.append(f"console {msg.type}: {msg.text}")
                if msg.type == "error" and not msg.text.startswith("Failed to load resource")
                else None
            ),
        )


async def open_console(
    browser: Browser,
    base_url: str,
    *,
    viewport: ViewportSize | None = None,
    before: Callable[[Page], Awaitable[None]] | None = None,
) -> tuple[Page, PageProblems]:
    """A fresh browser context (no storage) on ``base_url``/console; ``before`` runs on the
    page first (e.g. to route requests)."""
    context = await browser.new_context(viewport=viewport or DESKTOP)
    page = await context.new_page()
    problems = PageProblems(page)
    if before is not None:
        await before(page)
    await page.goto(f"{base_url}/console")
    return page, problems


async def screenshot(page: Page, name: str) -> Path:
    """Write ``name``.png under ``SCREENSHOTS``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path
