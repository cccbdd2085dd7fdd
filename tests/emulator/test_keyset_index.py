"""Keyset pages from the ``(ts, sys_id)`` index give exactly what the full evaluator gives.

The evaluator (read every visible row, filter, sort) is the reference; the indexed path must
agree on every page and count, across late-visible versions, replica reads, deletes, domain
separation and ``^NQ`` base queries, and while the index is maintained incrementally.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snowsource.core.cursor import Position, page_query
from snowsource.core.query import normalise_query
from snowsource.emulator import Emulator
from snowsource.emulator.auth import User
from snowsource.emulator.encoded_query import ParsedQuery, parse_encoded_query
from snowsource.emulator.keyset import KeyRange, indexed_page, key_range
from tests.emulator.conftest import FIXED_NOW, Client, table

BASE = FIXED_NOW - timedelta(hours=1)
ORDER = "^ORDERBYsys_updated_on^ORDERBYsys_id"
BASE_QUERIES = (
    "",
    "priority=1",
    "priority<=2^NQactive=true",
    "priority=1^ORpriority=3",
    "active=true^priority!=2^NQpriority=3",
    "sys_domain=acme",
)
OTHER_QUERIES = (
    # Not built by the cursor, still ordered by (ts, sys_id): bounds come from other shapes.
    "priority=2" + ORDER,
    ORDER.lstrip("^"),
    "sys_updated_on<2026-09-29 06:00:03" + ORDER,
    "sys_updated_on>=2026-09-29 06:00:02^ORsys_updated_on=2026-09-29 06:00:00" + ORDER,
    "sys_updated_onBETWEEN2026-09-29 06:00:01@2026-09-29 06:00:03" + ORDER,
    "sys_updated_on>2026-09-29" + ORDER,  # date only: midnight, so no bound is taken from it
    "sys_id>0000000000000000000000000000000a" + ORDER,
    "sys_updated_on=2026-09-29 06:00:02^NQsys_updated_on>2026-09-29 06:00:04" + ORDER,
    # Bounds alone (an exact range: its rows are not evaluated), and near misses.
    "sys_updated_on>2026-09-29 06:00:02^sys_updated_on<=2026-09-29 06:00:05" + ORDER,
    "sys_updated_on=2026-09-29 06:00:02^sys_id>=0000000000000000000000000000000a"
    "^NQsys_updated_on>2026-09-29 06:00:02" + ORDER,
    "sys_updated_on=2026-09-29 06:00:02^sys_id>0000000000000000000000000000000a"
    "^NQsys_updated_on>=2026-09-29 06:00:03^sys_updated_on<=2026-09-29 06:00:03"
    "^NQsys_updated_on>2026-09-29 06:00:03" + ORDER,
    "sys_updated_on=2026-09-29 06:00:02^sys_id>00000000000000000000000000000004"
    "^sys_id>0000000000000000000000000000000a^NQsys_updated_on>2026-09-29 06:00:02" + ORDER,
    "sys_updated_on>2026-09-29 06:00:01^sys_updated_on<=2026-09-29 06:00:02"
    "^NQsys_updated_on>=2026-09-29 06:00:04" + ORDER,
    "sys_updated_on>2026-09-29 06:00:01^sys_updated_on<2026-09-29 06:00:04" + ORDER,
    "sys_updated_on>2026-09-29 06:00:04^sys_updated_on<=2026-09-29 06:00:02" + ORDER,
    "sys_updated_on>=2026-09-29 06:00:01^sys_id>0000000000000000000000000000000a" + ORDER,
    "sys_updated_on>=2026-09-29 06:00:01^sys_updated_on!=2026-09-29 06:00:03" + ORDER,
    # A key sweep's pages: sys_id order alone, the index keyed by the id itself.
    "ORDERBYsys_id",
    "sys_id>0000000000000000000000000000000a^ORDERBYsys_id",
    "priority=1^sys_id>00000000000000000000000000000005^NQactive=true"
    "^sys_id>00000000000000000000000000000005^ORDERBYsys_id",
)


def _sid(n: int) -> str:
    return f"{n:032x}"


def _ts(second: int) -> str:
    return (BASE + timedelta(seconds=second)).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Write:
    """One mutation: insert a new row, update or delete an earlier one."""

    kind: str
    target: int
    second: int
    priority: int
    domain: str
    late: bool


writes = st.builds(
    Write,
    kind=st.sampled_from(("insert", "insert", "insert", "update", "delete")),
    target=st.integers(0, 30),
    second=st.integers(0, 6),
    priority=st.integers(1, 3),
    domain=st.sampled_from(("global", "global", "acme", "other")),
    late=st.booleans(),
)


@dataclass(frozen=True)
class Read:
    """One list request, as a cursor page or another (ts, sys_id)-ordered query."""

    base: str
    other: str | None
    after_second: int
    after_id: int | None
    hi_second: int
    offset: int
    limit: int
    need_total: bool
    replica: bool
    user: str
    all_domains: bool


reads = st.builds(
    Read,
    base=st.sampled_from(BASE_QUERIES),
    other=st.none() | st.sampled_from(OTHER_QUERIES),
    after_second=st.integers(0, 6),
    after_id=st.none() | st.integers(0, 31),
    hi_second=st.integers(0, 7),
    offset=st.integers(0, 3),
    limit=st.integers(1, 6),
    need_total=st.booleans(),
    replica=st.booleans(),
    user=st.sampled_from(("admin", "acme.user")),
    all_domains=st.booleans(),
)


def _world() -> Emulator:
    emu = Emulator(seed=5, now=FIXED_NOW)
    emu.add_user("acme.user", "pw", domains=("acme",))
    emu.replica_lag(30)
    return emu


def _apply(emu: Emulator, write: Write, inserted: list[str], counter: list[int]) -> None:
    at = BASE + timedelta(seconds=write.second)
    visible = emu.clock.now() + timedelta(seconds=20) if write.late else None
    values = {"priority": str(write.priority), "sys_domain": write.domain}
    alive = [s for s in inserted if emu.get("incident", s) is not None]
    if write.kind == "insert" or not alive:
        counter[0] += 1
        row = emu.insert(
            "incident", {**values, "sys_id": _sid(counter[0])}, at=at, visible_at=visible
        )
        inserted.append(row["sys_id"])
    elif write.kind == "update":
        target = alive[write.target % len(alive)]
        emu.update("incident", target, values, at=at, visible_at=visible)
    else:
        emu.delete("incident", alive[write.target % len(alive)])
    emu.clock.advance(1)


def _parse(emu: Emulator, read: Read) -> ParsedQuery:
    if read.other is not None:
        text = read.other
    else:
        after_id = "" if read.after_id is None else _sid(read.after_id)
        text = page_query(
            normalise_query(read.base),
            "sys_updated_on",
            "sys_id",
            Position(_ts(read.after_second), after_id),
            _ts(read.hi_second),
        )
    return parse_encoded_query(text, field_type=emu.field_type("incident"), user_tz=ZoneInfo("UTC"))


def _check(emu: Emulator, read: Read) -> None:
    parsed = _parse(emu, read)
    keys = key_range(parsed, "sys_id")
    assert keys is not None  # every query here must take the indexed path
    user: User = emu.user(read.user)
    at = emu.clock.timestamp() - (emu.replica_lag_seconds if read.replica else 0)
    expected = parsed.apply(emu.read_at("incident", at, user, all_domains=read.all_domains))
    page, total = indexed_page(
        emu,
        "incident",
        parsed,
        keys,
        at=at,
        user=user,
        all_domains=read.all_domains,
        offset=read.offset,
        limit=read.limit,
        need_total=read.need_total,
    )
    assert [r["sys_id"] for r in page] == [
        r["sys_id"] for r in expected[read.offset : read.offset + read.limit]
    ]
    assert page == expected[read.offset : read.offset + read.limit]
    if read.need_total:
        assert total == len(expected)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(writes, max_size=25),
    after=st.lists(writes, max_size=25),
    first=st.lists(reads, min_size=1, max_size=4),
    second=st.lists(reads, min_size=1, max_size=4),
)
def test_indexed_pages_equal_the_evaluator(
    before: list[Write], after: list[Write], first: list[Read], second: list[Read]
) -> None:
    emu = _world()
    inserted: list[str] = []
    counter = [0]
    for write in before:
        _apply(emu, write, inserted, counter)
    for read in first:  # builds the index
        _check(emu, read)
    for write in after:  # maintained write by write from here on
        _apply(emu, write, inserted, counter)
    for read in second:
        _check(emu, read)


def test_cursor_pages_and_other_sorts_take_the_index() -> None:
    emu = _world()
    page = page_query(
        normalise_query("priority=1^NQactive=true"),
        "sys_updated_on",
        "sys_id",
        Position(_ts(2), _sid(4)),
        _ts(5),
    )
    parsed = parse_encoded_query(
        page, field_type=emu.field_type("incident"), user_tz=ZoneInfo("UTC")
    )
    keys = key_range(parsed, "sys_id")
    assert keys is not None
    # sys_id > S: no key lies between (T, S) and (T, S + "\0"), and (T, S) is not selected.
    assert keys.low == (_ts(2), _sid(4) + "\0")
    assert keys.high_ts == _ts(5)
    assert not keys.exact  # the table's own filter: each row is evaluated
    other = parse_encoded_query(
        "priority=1^ORDERBYsys_id^ORDERBYsys_updated_on",
        field_type=emu.field_type("incident"),
        user_tz=ZoneInfo("UTC"),
    )
    assert key_range(other, "sys_id") is None
    sweep = parse_encoded_query(
        "priority=1^ORDERBYsys_id", field_type=emu.field_type("incident"), user_tz=ZoneInfo("UTC")
    )
    assert key_range(sweep, "sys_id") == KeyRange("sys_id", None, None)
    everything = parse_encoded_query(
        "ORDERBYsys_id", field_type=emu.field_type("incident"), user_tz=ZoneInfo("UTC")
    )
    assert key_range(everything, "sys_id") == KeyRange("sys_id", None, None, exact=True)
    descending = parse_encoded_query(
        "ORDERBYsys_updated_on^ORDERBYDESCsys_id",
        field_type=emu.field_type("incident"),
        user_tz=ZoneInfo("UTC"),
    )
    assert key_range(descending, "sys_id") is None


def test_a_keyset_page_of_bounds_alone_is_an_exact_range() -> None:
    """The daemon's page of a table without a filter: bounds only, contiguous across its two
    ^NQ groups (the rest of second T after id S, then every later second up to HI)."""
    emu = _world()
    types = emu.field_type("incident")
    for after in (Position(_ts(2), _sid(4)), Position(_ts(2), "")):
        page = page_query("", "sys_updated_on", "sys_id", after, _ts(5))
        keys = key_range(
            parse_encoded_query(page, field_type=types, user_tz=ZoneInfo("UTC")), "sys_id"
        )
        assert keys is not None
        assert keys.exact, page
    gap = "sys_updated_on=2026-09-29 06:00:02^NQsys_updated_on>2026-09-29 06:00:04" + ORDER
    keys = key_range(parse_encoded_query(gap, field_type=types, user_tz=ZoneInfo("UTC")), "sys_id")
    assert keys is not None
    assert not keys.exact


def test_many_writes_after_the_index_exists_are_merged() -> None:
    # More buffered writes than are placed one by one: the whole list is re-sorted.
    emu = _world()
    for n in range(50):
        emu.insert("incident", {"sys_id": _sid(1000 + n)}, at=BASE + timedelta(seconds=n % 7))
    read = Read("", None, 0, None, 7, 0, 500, need_total=True, replica=False, user="admin",
                all_domains=False)  # fmt: skip
    _check(emu, read)
    for n in range(300):
        emu.insert("incident", {"sys_id": _sid(n)}, at=BASE + timedelta(seconds=n % 7))
    for n in range(0, 300, 3):
        emu.update("incident", _sid(n), {"priority": "1"}, at=BASE + timedelta(seconds=6))
    _check(emu, read)
    _check(emu, Read("priority=1", None, 3, 5, 6, 1, 40, need_total=True, replica=False,
                     user="admin", all_domains=False))  # fmt: skip


async def test_http_keyset_pages_walk_a_large_table_in_order(
    emulator: Emulator, emulator_client: Client
) -> None:
    for n in range(3000):
        emulator.insert("incident", {"sys_id": _sid(n)}, at=BASE + timedelta(seconds=n % 11))
    hi = _ts(10)
    position = Position(_ts(0), "")
    seen: list[tuple[str, str]] = []
    while True:
        rows, headers = await table(
            emulator_client,
            "incident",
            sysparm_query=page_query("", "sys_updated_on", "sys_id", position, hi),
            sysparm_limit="700",
            sysparm_fields="sys_id,sys_updated_on",
            sysparm_no_count="true",
        )
        assert "X-Total-Count" not in headers
        seen += [(r["sys_updated_on"], r["sys_id"]) for r in rows]
        if len(rows) < 700:
            break
        position = Position(*seen[-1])
    assert seen == sorted((_ts(n % 11), _sid(n)) for n in range(3000))
