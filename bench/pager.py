"""(a) A bare aiohttp pager: the least work any reader of the same pages must do.

    python -m bench.pager URL TABLE [TABLE ...] [--batch 1000] [--concurrency 8]
        [--cookies none|one-session]

Reads every table with the daemon's own keyset queries and parameters (one sequential pager
per table, all tables at once, at most ``--concurrency`` requests in flight like
``max.concurrent.requests``), decodes each page with orjson and keeps nothing. Prints one JSON
line: rows, wall seconds and this process's CPU seconds, from the first request to the last.

``--cookies none`` (the default) keeps no cookie: every request opens a new session on an
instance (the Go bridge's pattern). ``one-session`` keeps one cookie jar for every request, as a
client with a default HTTP session does: an instance serves its requests one at a time.
``--seconds`` stops the readers after that long and reports the rows read until then.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime

import aiohttp
import orjson

from snowsource.core.cursor import Position, format_ts, page_query

START = "1970-01-01 00:00:00"


def page_params(query: str, batch: int) -> dict[str, str]:
    """The parameters the daemon sends with a page request (string records, default config)."""
    return {
        "sysparm_query": query,
        "sysparm_limit": str(batch),
        "sysparm_display_value": "false",
        "sysparm_exclude_reference_link": "true",
        "sysparm_no_count": "true",
        "sysparm_suppress_pagination_header": "true",
    }


async def read_table(
    session: aiohttp.ClientSession,
    url: str,
    table: str,
    *,
    batch: int,
    gate: asyncio.Semaphore,
    hi: str,
    read: list[int] | None = None,
) -> int:
    """Read ``table`` to ``hi`` page by page; the number of rows read (also added to
    ``read[0]`` page by page, for a run that is stopped before the end)."""
    position = Position(START, "")
    rows = 0
    while True:
        params = page_params(page_query("", "sys_updated_on", "sys_id", position, hi), batch)
        async with gate, session.get(f"{url}/api/now/table/{table}", params=params) as resp:
            resp.raise_for_status()
            page = orjson.loads(await resp.read())["result"]
        rows += len(page)
        if read is not None:
            read[0] += len(page)
        if len(page) < batch:
            return rows
        last = page[-1]
        position = Position(last["sys_updated_on"], last["sys_id"])


async def run(
    url: str,
    tables: list[str],
    batch: int,
    concurrency: int,
    *,
    cookies: str = "none",
    seconds: float | None = None,
) -> dict[str, float]:
    gate = asyncio.Semaphore(concurrency)
    hi = format_ts(datetime.now(UTC))
    auth = aiohttp.BasicAuth("admin", "admin")
    connector = aiohttp.TCPConnector(limit=concurrency)
    # unsafe: keep cookies for an IP-address host too (the bench reaches 127.0.0.1).
    jar = aiohttp.CookieJar(unsafe=True) if cookies == "one-session" else aiohttp.DummyCookieJar()
    async with aiohttp.ClientSession(auth=auth, connector=connector, cookie_jar=jar) as session:
        wall, cpu = time.perf_counter(), time.process_time()
        read = [0]
        readers = [
            asyncio.create_task(
                read_table(session, url, t, batch=batch, gate=gate, hi=hi, read=read)
            )
            for t in tables
        ]
        _, unfinished = await asyncio.wait(readers, timeout=seconds)
        for task in unfinished:  # --seconds: stopped there, rows counted up to the last page
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=bool(unfinished))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"rows": read[0], "wall": wall, "cpu": cpu, "stopped": bool(unfinished)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("tables", nargs="+")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--cookies", choices=("none", "one-session"), default="none")
    parser.add_argument("--seconds", type=float, help="stop after this long (rows so far)")
    args = parser.parse_args()
    result = asyncio.run(
        run(
            args.url,
            args.tables,
            args.batch,
            args.concurrency,
            cookies=args.cookies,
            seconds=args.seconds,
        )
    )
    print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()
