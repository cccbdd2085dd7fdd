"""The operator console in a real browser (SPEC §14.4): headless Debian Chromium driven by
Playwright, against the emulator, a real daemon and the real broker."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import ClientSession

from snowsource.api.errors import ALTERED_MESSAGE
from tests.integration.browser import PHONE, open_console, screenshot, system_chromium
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running
from tests.integration.test_rest import (
    base_url,
    call,
    cursor_order,
    new_records,
    rest_of,
    rest_settings,
)
from tests.polling import poll_until

if TYPE_CHECKING:
    from playwright.async_api import Locator, Page

pytestmark = pytest.mark.kafka

TOKEN = "console-tok-7d1e-not-a-real-secret"
# Either would change the page's title if it ever ran.
XSS_ALIAS = '<script>document.title="pwned"</script>'
XSS_ERROR = '<script>document.title="pwned"</script><img src=x onerror="document.title=1">'


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession() as session:
        yield session


# The page refreshes every 3 s; on a loaded CI machine a refresh may take several more.
EXPECT_TIMEOUT_MS = 20_000


def expect(target: Any) -> Any:
    """Playwright's auto-waiting assertion, imported only once the browser is there."""
    from playwright.async_api import expect as playwright_expect

    playwright_expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    return playwright_expect(target)


def card(page: Page, alias: str) -> Locator:
    """The table card of ``alias`` (its ``data-alias``, set as an attribute, never as markup)."""
    quoted = alias.replace("\\", "\\\\").replace('"', '\\"')
    return page.locator(f'article.table[data-alias="{quoted}"]')


async def offset_records(env: Env) -> dict[tuple[int, int], tuple[bytes | None, bytes | None]]:
    """The offsets topic's records, by (partition, offset), as raw key and value bytes."""
    records = await read_topic(env.bootstrap, env.offsets_topic)
    return {(r.partition, r.offset): (r.key, r.value) for r in records}


async def written_since(
    env: Env, before: dict[tuple[int, int], tuple[bytes | None, bytes | None]]
) -> list[tuple[bytes | None, bytes | None]]:
    """The offsets-topic records that were not there in ``before`` (it has many partitions)."""
    now = await offset_records(env)
    return [record for place, record in sorted(now.items()) if place not in before]


def recipe_body(partition: dict[str, str], timestamp: str) -> dict[str, Any]:
    """docs/offsets.md's rewind: the listed partition, the timestamp, an empty sys_id."""
    offset = {
        "version": "1",
        "timestamp": timestamp,
        "sys_id": "",
        "phase": "backfill",
        "fingerprint": partition["query_fingerprint"],
    }
    return {"offsets": [{"partition": partition, "offset": offset}]}


async def with_hostile_alias(page: Page) -> None:
    """Rewrite ``/status`` in transit so it also lists a table under ``XSS_ALIAS``.

    The config refuses such an alias (a-z 0-9 _ only), so no daemon can report one; the page
    must still show whatever the API says as text, and this is how to hand it one.
    """
    from playwright.async_api import Route

    async def handle(route: Route) -> None:
        response = await route.fetch()
        status = await response.json()
        status["tables"][XSS_ALIAS] = dict(status["tables"]["incident"])
        await route.fulfill(response=response, json=status)

    await page.route("**/status", handle)


async def test_every_table_is_listed_with_its_phase_and_api_text_stays_text(env: Env) -> None:
    env.emu.seed(tables=("incident", "change_request", "cmdb_ci"), rows=200)
    env.emu.faults.add(status=500, times=None, table="cmdb_ci", message=XSS_ERROR)
    tables = {
        "incident": {"name": "incident"},
        "change_request": {"name": "change_request"},
        "cmdb_ci": {"name": "cmdb_ci"},
    }
    async with running(rest_settings(env, tables)) as daemon, system_chromium() as browser:
        await poll_until(caught_up(daemon, "incident", "change_request"))
        await poll_until(lambda: daemon.pollers["cmdb_ci"].status.consecutive_failures >= 2)
        page, problems = await open_console(browser, rest_of(daemon).url, before=with_hostile_alias)

        await expect(page.locator("article.table")).to_have_count(4)
        await expect(page.locator("#connector-name")).to_have_text(env.name)
        await expect(page.locator("#connector-state")).to_have_text("RUNNING")
        # Readiness from /metrics, the session pool from the status's servicenow section.
        await expect(page.locator("#ready")).to_have_text("ready")
        pool = re.compile(r"concurrency limit \d+ of \d+ · sessions open \d+")
        await expect(page.locator("#pool")).to_contain_text(pool)
        for alias in ("incident", "change_request", XSS_ALIAS):
            await expect(card(page, alias).locator(".alias")).to_have_text(alias)
            await expect(card(page, alias).locator(".phase")).to_have_text("stream")
            await expect(card(page, alias).locator(".progress-text")).to_contain_text("streaming")
        failing = card(page, "cmdb_ci")
        await expect(failing.locator(".last-error")).to_contain_text(XSS_ERROR)
        await expect(failing.locator(".failure-head")).to_contain_text("consecutive failure")
        await expect(failing.locator(".failure-head")).to_contain_text("since 20")
        # The texts arrived as text: no element was made of them and nothing ran.
        assert await page.locator("#tables script, #tables img").count() == 0
        assert await page.title() == "snowsource console"
        await screenshot(page, "console-desktop")

        # A refresh updates the cards in place (no flicker): the same nodes are still there.
        await page.locator("article.table").first.evaluate(
            "node => { node.dataset.probe = 'kept' }"
        )
        shown = await page.locator("#refreshed").inner_text()
        await expect(page.locator("#refreshed")).not_to_have_text(shown)
        assert await page.locator("article.table[data-probe=kept]").count() == 1

        await page.set_viewport_size(PHONE)
        await expect(card(page, "incident").locator(".phase")).to_have_text("stream")
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"the page is {overflow} px wider than a phone's window"
        await screenshot(page, "console-phone")
        assert problems.messages == []


async def test_a_live_backfill_shows_progress_eta_and_rows_per_second(env: Env) -> None:
    aliases = ("incident", "change_request", "cmdb_ci")
    env.emu.seed(tables=aliases, rows=6000)
    env.emu.latency_ms = 200  # 60 pages a table: a backfill of several polls of the page
    tables = {alias: {"name": alias} for alias in aliases}
    # One slice: at the default four, 60 pages take about three seconds, which a loaded
    # machine can finish before the console has the two rates an ETA needs.
    settings = rest_settings(env, tables, **{"batch.size": 100, "backfill.slices": 1})
    async with running(settings) as daemon, system_chromium() as browser:
        page, problems = await open_console(browser, rest_of(daemon).url)
        incident = card(page, "incident")
        await expect(incident.locator(".phase")).to_have_text("backfill")
        await expect(incident.locator(".progress-text")).to_contain_text("ETA", timeout=20_000)
        # Two rates (three polls) draw a line.
        await expect(incident.locator(".line")).to_have_attribute("points", re.compile(r"\d+,\d"))
        bar = incident.locator(".progress")
        first = float(await bar.evaluate("node => node.value"))
        rate = float(await incident.locator(".rate").inner_text())
        if await incident.locator(".phase").inner_text() == "backfill":
            await screenshot(page, "console-backfill")  # docs/img/console.png is one of these
            assert 0 < first < 1
            assert rate > 0
        await expect(incident.locator(".phase")).to_have_text("stream", timeout=60_000)
        await expect(incident.locator(".progress-text")).to_have_text("backfill done, streaming")
        assert float(await bar.evaluate("node => node.value")) == 1
        assert problems.messages == []


async def test_a_sliced_backfill_shows_its_slices_ranges_and_rows_ahead(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident",), rows=4000)
    env.emu.latency_ms = 1000  # 40 pages over 4 slices: about ten seconds of slices reading
    settings = rest_settings(env, {"incident": {"name": "incident"}}, **{"batch.size": 100})
    async with running(settings) as daemon, system_chromium() as browser:
        page, problems = await open_console(browser, rest_of(daemon).url)
        incident = card(page, "incident")
        slices = incident.locator(".slices")
        await expect(slices).to_have_text(
            re.compile(r"^[1-4] slice\(s\) reading \d+ range\(s\): [\d,]+ rows read, [\d,]+ of")
        )
        _, answer = await call(http, "GET", f"{base_url(daemon)}/status")
        assert answer["tables"]["incident"]["backfill"] is not None, "the backfill ended early"
        assert problems.messages == []


async def test_stop_rewind_resume_through_the_page_writes_what_the_curl_recipe_writes(
    env: Env, http: ClientSession
) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=150)
    tables = {"incident": {"name": "incident"}, "change_request": {"name": "change_request"}}
    rows = cursor_order(env.emu.rows("incident"))
    rewind_to = rows[len(rows) // 2]["sys_updated_on"]
    settings = rest_settings(env, tables, **{"overlap.seconds": 0})
    async with running(settings) as daemon, system_chromium() as browser:
        await poll_until(caught_up(daemon, "incident", "change_request"))
        url = base_url(daemon)
        page, problems = await open_console(browser, rest_of(daemon).url)
        incident = card(page, "incident")
        await expect(incident.locator(".phase")).to_have_text("stream")
        await expect(incident.locator(".rewind-button")).to_be_disabled()

        await page.click("#action-stop")
        # The status says STOPPED while the final offsets are still being written; the notice
        # comes with the 204, once they are.
        await expect(page.locator("#notice")).to_have_text(re.compile("^stopped"))
        await expect(page.locator("#connector-state")).to_have_text("STOPPED")
        await expect(page.locator("#action-resume")).to_be_enabled()
        before = await offset_records(env)
        before_inc = await read_topic(env.bootstrap, env.topic("incident"))
        before_chg = await read_topic(env.bootstrap, env.topic("change_request"))

        await incident.locator(".rewind-at").fill(rewind_to)
        await incident.locator(".rewind-button").click()
        await expect(incident.locator(".rewind-message")).to_have_text(ALTERED_MESSAGE)
        by_page = await written_since(env, before)
        assert len(by_page) == 1
        after_page = await offset_records(env)

        # The recipe, by hand: copy the partition from GET offsets, PATCH the same timestamp.
        _, listing = await call(http, "GET", f"{url}/offsets")
        partition = next(
            o["partition"] for o in listing["offsets"] if o["partition"]["table"] == "incident"
        )
        answer = await call(http, "PATCH", f"{url}/offsets", recipe_body(partition, rewind_to))
        assert answer == (200, {"message": ALTERED_MESSAGE})
        by_recipe = await written_since(env, after_page)
        assert by_recipe == by_page  # the same key bytes, the same value bytes

        await page.click("#action-resume")
        await expect(page.locator("#notice")).to_have_text(re.compile("^resumed"))
        await expect(page.locator("#connector-state")).to_have_text("RUNNING")
        await poll_until(caught_up(daemon, "incident", "change_request"))
        replayed = await new_records(env, "incident", before_inc)
        expected = [r["sys_id"] for r in rows if r["sys_updated_on"] >= rewind_to]
        # A rewind resumes as a backfill, read by slices: every row once, in slice order.
        assert sorted(r.key.decode() for r in replayed if r.key) == sorted(expected)
        assert await new_records(env, "change_request", before_chg) == []
        await expect(incident.locator(".phase")).to_have_text("stream")
        assert problems.messages == []


async def test_a_refused_rewind_shows_the_validators_message(env: Env, http: ClientSession) -> None:
    env.emu.seed(tables=("incident",), rows=50)
    async with (
        running(rest_settings(env, {"incident": {"name": "incident"}})) as daemon,
        system_chromium() as browser,
    ):
        await poll_until(caught_up(daemon, "incident"))
        url = base_url(daemon)
        page, problems = await open_console(browser, rest_of(daemon).url)
        await page.click("#action-stop")
        await expect(page.locator("#notice")).to_have_text(re.compile("^stopped"))
        before = await offset_records(env)

        incident = card(page, "incident")
        await incident.locator(".rewind-at").fill("2026-02-30 25:00:00")
        await incident.locator(".rewind-button").click()
        message = incident.locator(".rewind-message")
        await expect(message).to_have_class("rewind-message error")
        # What the validator answers the same body sent by hand, word for word.
        _, partition_listing = await call(http, "GET", f"{url}/status")
        partition = partition_listing["tables"]["incident"]["partition"]
        status, refusal = await call(
            http, "PATCH", f"{url}/offsets", recipe_body(partition, "2026-02-30 25:00:00")
        )
        assert status == 400
        await expect(message).to_have_text(refusal["message"])
        assert "timestamp" in refusal["message"]
        assert await offset_records(env) == before
        assert problems.messages == []


async def test_with_a_token_the_page_asks_for_it_and_says_unauthorised_when_wrong(
    env: Env,
) -> None:
    env.emu.seed(tables=("incident",), rows=50)
    settings = rest_settings(env, {"incident": {"name": "incident"}}, rest={"auth.token": TOKEN})
    async with running(settings) as daemon, system_chromium() as browser:
        await poll_until(caught_up(daemon, "incident"))
        page, problems = await open_console(browser, rest_of(daemon).url)
        await expect(page.locator("#login")).to_be_visible()
        await expect(page.locator("#login-message")).to_be_hidden()

        await page.fill("#token", "not-the-token")
        await page.click("#login-form button[type=submit]")
        await expect(page.locator("#login-message")).to_contain_text("unauthorised")
        await screenshot(page, "console-unauthorised")
        # A refused token is not kept for the next request.
        assert await page.evaluate("sessionStorage.length") == 0
        await expect(page.locator("article.table")).to_have_count(0)

        await page.fill("#token", TOKEN)
        await page.click("#login-form button[type=submit]")
        await expect(card(page, "incident").locator(".phase")).to_have_text("stream")
        await expect(page.locator("#login")).to_be_hidden()
        # Kept in this tab's session only: no URL, cookie or local storage holds it.
        assert await page.evaluate("sessionStorage.getItem('snowsource.console.token')") == TOKEN
        assert await page.evaluate("localStorage.length") == 0
        assert await page.context.cookies() == []
        assert TOKEN not in page.url

        await page.reload()  # the same tab keeps it
        await expect(card(page, "incident").locator(".phase")).to_have_text("stream")
        fresh, _ = await open_console(browser, rest_of(daemon).url)  # a new session does not
        await expect(fresh.locator("#login")).to_be_visible()
        assert problems.messages == []
