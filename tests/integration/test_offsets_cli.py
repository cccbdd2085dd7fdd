"""``snowsource offsets``: every subcommand against a real broker, with and without a daemon.

The script runs in-process through ``offsets_cli.amain`` (the daemon shares the event loop in
some tests) and once as the installed console script. Offsets are seeded with ``OffsetStore``
(the daemon's own writer) where a daemon run would only make the test slower.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from snowsource.adapters.membership import describe_members
from snowsource.adapters.offset_store import OffsetStore
from snowsource.cli.offsets import amain
from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.offsets_codec import (
    SourceOffset,
    SourcePartition,
    encode_key,
    encode_value,
    legacy_partition_for,
    parse_key,
    partition_for,
)
from snowsource.engine.wiring import kafka_connection
from tests.integration.conftest import Env
from tests.integration.engine import caught_up, read_topic, running, write_config
from tests.integration.processes import SNOWSOURCE
from tests.kafka_support import unique
from tests.polling import poll_until

TABLES: dict[str, dict[str, Any]] = {
    "incident": {"name": "incident"},
    "change": {"name": "change_request"},
}


@dataclass
class Result:
    code: int
    out: str
    err: str


Cli = Callable[..., Awaitable[Result]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """``await cli(config, "list", ...)``: run the script in this event loop, capture output."""

    async def run(config: Path, *args: str) -> Result:
        capsys.readouterr()
        code = await amain([*args, "--config", str(config)])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def configure(
    env: Env, tables: dict[str, dict[str, Any]] = TABLES, **top: Any
) -> tuple[Settings, Path]:
    """A config file for the script and the same settings for a daemon."""
    path = write_config(env.tmp_path / f"{unique('config')}.yaml", env.document(tables, **top))
    return load_config(path, env={}).settings, path


def partition(env: Env, table: str, query: str | None = None) -> SourcePartition:
    return partition_for(
        snow_url=env.url,
        table=table,
        query=query,
        query_domain=True,
        timestamp_field="sys_updated_on",
    )


def offset(
    p: SourcePartition,
    ts: str = "2026-09-29 06:00:00",
    sys_id: str = "a1" * 16,
    phase: str = "stream",
) -> bytes:
    value = encode_value(SourceOffset(ts, sys_id, phase, p.query_fingerprint))
    assert value is not None
    return value


async def seed(settings: Settings, writes: Sequence[tuple[bytes, bytes | None]]) -> None:
    """Write exact key/value bytes to the offsets topic (created if missing)."""
    async with OffsetStore(
        kafka_connection(settings),
        topic=settings.offset_storage_topic,
        connector=settings.name,
        partitions=settings.offset_storage_partitions,
    ) as store:
        for key, value in writes:
            await store.write_raw(key, value)


async def live(env: Env, topic: str | None = None) -> dict[bytes, bytes]:
    """Live key -> value bytes of the offsets topic (last write wins, tombstones delete)."""
    state: dict[bytes, bytes] = {}
    for record in await read_topic(env.bootstrap, topic or env.offsets_topic):
        assert record.key is not None
        if record.value is None:
            state.pop(record.key, None)
        else:
            state[record.key] = record.value
    return state


def key(env: Env, p: SourcePartition) -> bytes:
    return encode_key(env.name, p)


def table_rows(out: str) -> list[list[str]]:
    """The rows of ``offsets list`` (header dropped, notes excluded)."""
    lines = out.split("notes:", maxsplit=1)[0].strip().splitlines()
    assert lines[0].split() == ["ALIAS", "TABLE", "MATCH", "TIMESTAMP", "SYS_ID", "PHASE"]
    return [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in lines[1:]]


# --------------------------------------------------------------------------------------------
# list / export


async def test_list_shows_ok_stale_and_orphaned_partitions(env: Env, cli: Cli) -> None:
    tables = {"incident": {"name": "incident", "query": "active=true"}, "change": TABLES["change"]}
    settings, config = configure(env, tables)
    ok = partition(env, "incident", "active=true")
    stale = partition(env, "incident")  # the query was changed since this was written
    removed = partition(env, "problem")
    other_connector = encode_key("someone-else", partition(env, "incident", "active=true"))
    await seed(
        settings,
        [
            (key(env, ok), offset(ok, "2026-09-29 06:30:00", "51" * 16)),
            (key(env, stale), offset(stale, "2026-09-01 00:00:00", "s2", "backfill")),
            (key(env, removed), offset(removed, "2026-08-01 00:00:00", "s3")),
            (other_connector, offset(ok)),
        ],
    )

    result = await cli(config, "list")
    assert result.code == 0, result.err
    assert table_rows(result.out) == [
        ["incident", "incident", "ok", "2026-09-29 06:30:00", "51" * 16, "stream"],
        ["orphaned", "incident", "stale", "2026-09-01 00:00:00", "s2", "backfill"],
        ["orphaned", "problem", "removed", "2026-08-01 00:00:00", "s3", "stream"],
    ]
    notes = result.out.split("notes:")[1]
    assert f"{stale.query_fingerprint} is not the one configured for 'incident'" in notes
    assert "no stored offset (starts from start.timestamp): change (1970-01-01 00:00:00)" in notes

    # --config may also come before the subcommand.
    assert await amain(["--config", str(config), "list", "--json"]) == 0
    result = await cli(config, "list", "--json")
    assert result.code == 0
    assert orjson.loads(result.out) == {
        "offsets": [
            {"partition": p.as_dict(), "offset": orjson.loads(offset(p, ts, s, ph))}
            for p, ts, s, ph in [
                (ok, "2026-09-29 06:30:00", "51" * 16, "stream"),
                (stale, "2026-09-01 00:00:00", "s2", "backfill"),
                (removed, "2026-08-01 00:00:00", "s3", "stream"),
            ]
        ]
    }
    first = orjson.loads(result.out)["offsets"][0]["partition"]
    assert list(first) == ["instance", "timestamp_field", "query_fingerprint", "table"]


async def test_read_only_commands_never_create_the_offsets_topic(
    env: Env, cli: Cli, kafka_admin: AIOKafkaAdminClient
) -> None:
    _settings, config = configure(env)
    for args in (["list"], ["list", "--json"], ["export", str(env.tmp_path / "x.json")]):
        result = await cli(config, *args)
        assert result.code == 1
        assert f"offsets topic {env.offsets_topic!r} does not exist" in result.err
        assert result.out == ""
    topics = await kafka_admin.describe_topics([env.offsets_topic])
    assert topics[0]["error_code"] != 0
    assert not (env.tmp_path / "x.json").exists()


async def test_subprocess_list_and_config_error(env: Env) -> None:
    settings, config = configure(env)
    p = partition(env, "incident")
    await seed(settings, [(key(env, p), offset(p, "2026-09-29 06:30:00", "abc0" * 8))])

    proc = await asyncio.create_subprocess_exec(
        SNOWSOURCE,
        "offsets",
        "list",
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert table_rows(out.decode()) == [
        ["incident", "incident", "ok", "2026-09-29 06:30:00", "abc0" * 8, "stream"]
    ]

    bad = write_config(env.tmp_path / "bad.yaml", {**env.document(TABLES), "nmae": "typo"})
    proc = await asyncio.create_subprocess_exec(
        SNOWSOURCE,
        "offsets",
        "list",
        "--config",
        str(bad),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 2
    assert "nmae" in err.decode()
    assert out == b""


# --------------------------------------------------------------------------------------------
# rewind / set / delete / reset with the daemon


async def test_rewind_then_daemon_reemits_rows_from_that_point(env: Env, cli: Cli) -> None:
    env.emu.seed(tables=("incident",), rows=60)
    rows = sorted(env.emu.rows("incident"), key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    settings, config = configure(env, {"incident": {"name": "incident"}}, **{"overlap.seconds": 0})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    first = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(first) == 60
    before = (await live(env))[key(env, partition(env, "incident"))]

    to = rows[40]["sys_updated_on"]
    result = await cli(config, "rewind", "incident", "--to", to)
    assert result.code == 0, result.err
    expected = offset(partition(env, "incident"), to, "", "backfill")
    assert f"before: {before.decode()}" in result.out
    assert f"after:  {expected.decode()}" in result.out
    assert (await live(env))[key(env, partition(env, "incident"))] == expected

    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    again = (await read_topic(env.bootstrap, env.topic("incident")))[len(first) :]
    assert again, "the rewound range was not emitted again"
    assert all(r.headers["snow.timestamp"].decode() >= to for r in again)
    assert {r.key.decode() for r in again if r.key} == {
        r["sys_id"] for r in rows if r["sys_updated_on"] >= to
    }


async def test_delete_then_daemon_replays_from_start_timestamp(env: Env, cli: Cli) -> None:
    env.emu.seed(tables=("incident",), rows=30)
    rows = sorted(env.emu.rows("incident"), key=lambda r: (r["sys_updated_on"], r["sys_id"]))
    settings, config = configure(env, {"incident": {"name": "incident"}})
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    first = await read_topic(env.bootstrap, env.topic("incident"))
    assert len(first) == 30

    # Backfill again from a new start.timestamp: it is read only when a table has no offset
    # (and does not change the partition), so change it and delete the offset.
    start = rows[12]["sys_updated_on"]
    settings, config = configure(env, {"incident": {"name": "incident", "start.timestamp": start}})
    result = await cli(config, "delete", "incident")
    assert result.code == 0, result.err
    assert "after:  (deleted)" in result.out
    assert key(env, partition(env, "incident")) not in await live(env)

    again = await cli(config, "delete", "incident")
    assert again.code == 0
    assert "nothing to delete" in again.out

    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
    replayed = (await read_topic(env.bootstrap, env.topic("incident")))[len(first) :]
    # A sliced backfill produces its ranges side by side: the replay is a set, not a sequence.
    assert sorted(r.key.decode() for r in replayed if r.key) == sorted(
        r["sys_id"] for r in rows if r["sys_updated_on"] >= start
    )


async def test_refused_while_a_daemon_runs_force_overrides_free_at_once_after_stop(
    env: Env, cli: Cli
) -> None:
    env.emu.seed(tables=("incident",), rows=5)
    settings, config = configure(env, {"incident": {"name": "incident"}})
    p = partition(env, "incident")
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident"))
        conn = kafka_connection(settings)
        await poll_until(lambda: _has_members(conn, env.name), timeout=20)
        stored = (await live(env))[key(env, p)]

        refused = await cli(config, "rewind", "incident", "--to", "2026-01-01 00:00:00")
        assert refused.code == 1
        assert "refused: 1 snowsource process(es)" in refused.err
        assert "task 0 on" in refused.err
        assert "(SIGTERM)" in refused.err
        assert "up to 10 seconds" in refused.err
        assert "--force" in refused.err
        assert f"PUT /connectors/{env.name}/stop does not help here" in refused.err
        assert (await live(env))[key(env, p)] == stored

        for args in (
            ["reset", "--yes"],
            ["delete", "incident"],
            ["set", "incident", "--timestamp", "2026-01-01 00:00:00", "--sys-id", "a" * 32],
        ):
            result = await cli(config, *args)
            assert result.code == 1
            assert "refused" in result.err
        assert (await live(env))[key(env, p)] == stored

        forced = await cli(config, "rewind", "incident", "--to", "2026-01-01 00:00:00", "--force")
        assert forced.code == 0, forced.err
        assert "--force: writing although 1 snowsource process(es)" in forced.err
        assert (await live(env))[key(env, p)] == offset(p, "2026-01-01 00:00:00", "", "backfill")

    # Clean shutdown leaves the group: the script works at once, no session timeout to wait.
    result = await cli(config, "rewind", "incident", "--to", "2026-02-02 00:00:00")
    assert result.code == 0, result.err
    assert (await live(env))[key(env, p)] == offset(p, "2026-02-02 00:00:00", "", "backfill")


async def _has_members(conn: Any, name: str) -> bool:
    return bool(await describe_members(conn, name))


# --------------------------------------------------------------------------------------------
# set / delete / reset without a daemon


async def test_set_writes_backfill_offset_and_replaces_foreign_spelling(env: Env, cli: Cli) -> None:
    settings, config = configure(env)
    p = partition(env, "incident")
    foreign = orjson.dumps([env.name, dict(reversed(list(p.as_dict().items())))])
    assert foreign != key(env, p)
    await seed(settings, [(foreign, offset(p, "2026-09-29 06:00:00", "old"))])

    result = await cli(
        config, "set", "incident", "--timestamp", "2026-09-01 12:00:00", "--sys-id", "ab" * 16
    )
    assert result.code == 0, result.err
    assert f"before: {offset(p, '2026-09-29 06:00:00', 'old').decode()}" in result.out
    assert "old key spelling" in result.out
    assert await live(env) == {key(env, p): offset(p, "2026-09-01 12:00:00", "ab" * 16, "backfill")}


async def test_delete_also_removes_foreign_spelling_and_legacy_offset(env: Env, cli: Cli) -> None:
    query = "priority<=2^active=true"  # normalisation reorders it: the Java partition differs
    settings, config = configure(env, {"incident": {"name": "incident", "query": query}})
    p = partition(env, "incident", query)
    legacy = legacy_partition_for(
        snow_url=env.url,
        table="incident",
        query=query,
        query_domain=True,
        timestamp_field="sys_updated_on",
    )
    assert legacy != p
    foreign = orjson.dumps([env.name, dict(reversed(list(p.as_dict().items())))])
    other = encode_key("someone-else", p)
    await seed(
        settings,
        [(foreign, offset(p)), (key(env, legacy), offset(legacy)), (other, offset(p))],
    )
    listed = await cli(config, "list")
    assert [
        "orphaned",
        "incident",
        "legacy",
        "2026-09-29 06:00:00",
        "a1" * 16,
        "stream",
    ] in table_rows(listed.out)
    assert "non-canonical key bytes" in listed.out

    result = await cli(config, "delete", "incident")
    assert result.code == 0, result.err
    assert "legacy fingerprint" in result.out
    assert await live(env) == {other: offset(p)}


async def test_delete_orphaned_keeps_configured_tables(env: Env, cli: Cli) -> None:
    settings, config = configure(env)
    ok = partition(env, "incident")
    stale = partition(env, "incident", "active=true")
    removed = partition(env, "problem")
    await seed(
        settings,
        [(key(env, q), offset(q)) for q in (ok, stale, removed)],
    )
    result = await cli(config, "delete", "--orphaned")
    assert result.code == 0, result.err
    assert await live(env) == {key(env, ok): offset(ok)}


async def test_reset_needs_yes_then_deletes_every_partition_of_the_connector(
    env: Env, cli: Cli
) -> None:
    settings, config = configure(env)
    ok = partition(env, "incident")
    removed = partition(env, "problem")
    not_ours = encode_key(env.name, {"filename": "/tmp/a"})
    other = encode_key("someone-else", ok)
    await seed(
        settings,
        [
            (key(env, ok), offset(ok)),
            (key(env, removed), offset(removed)),
            (not_ours, b'{"position":3}'),
            (other, offset(ok)),
        ],
    )
    before = await live(env)

    refused = await cli(config, "reset")
    assert refused.code == 1
    assert "reset --yes" in refused.err
    assert "3 record(s)" in refused.err
    assert await live(env) == before

    result = await cli(config, "reset", "--yes")
    assert result.code == 0, result.err
    assert result.out.count("after:  (deleted)") == 3
    assert await live(env) == {other: offset(ok)}


async def test_invalid_inputs_exit_2_and_write_nothing(env: Env, cli: Cli) -> None:
    settings, config = configure(env)
    p = partition(env, "incident")
    await seed(settings, [(key(env, p), offset(p))])
    before = await live(env)

    cases: list[tuple[list[str], str]] = [
        (["rewind", "incident", "--to", "2026-09-29"], "is not formatted YYYY-MM-DD HH:MM:SS"),
        (["rewind", "incident", "--to", "2026-02-30 00:00:00"], "not a real date"),
        (["set", "incident", "--timestamp", "yesterday", "--sys-id", "x"], "--timestamp"),
        (["rewind", "incidnet", "--to", "2026-01-01 00:00:00"], "unknown table alias 'incidnet'"),
        (["delete", "nope"], "unknown table alias 'nope'"),
        (["delete", "incident", "--orphaned"], "either an ALIAS or --orphaned"),
        (["delete"], "either an ALIAS or --orphaned"),
        (["set", "incident", "--timestamp", "2026-01-01 00:00:00"], "--sys-id"),
        (["frobnicate"], "invalid choice"),
        ([], "a command is required"),
    ]
    for args, message in cases:
        result = await cli(config, *args)
        assert result.code == 2, (args, result)
        assert message in result.err, (args, result.err)
    missing = await amain(["list", "--config", str(env.tmp_path / "missing.yaml")])
    assert missing == 2
    assert await live(env) == before


# --------------------------------------------------------------------------------------------
# export / import


async def test_export_then_import_into_a_fresh_topic_reproduces_the_bytes(
    env: Env, cli: Cli
) -> None:
    env.emu.seed(tables=("incident", "change_request"), rows=20)
    settings, config = configure(env)
    async with running(settings) as daemon:
        await poll_until(caught_up(daemon, "incident", "change"))
    removed = partition(env, "problem")
    await seed(settings, [(key(env, removed), offset(removed))])
    source = {k: v for k, v in (await live(env)).items() if _connector(k) == env.name}
    assert len(source) == 3

    exported = env.tmp_path / "offsets.json"
    result = await cli(config, "export", str(exported))
    assert result.code == 0, result.err
    listing = orjson.loads(exported.read_bytes())
    assert len(listing["offsets"]) == 3
    assert listing == orjson.loads((await cli(config, "list", "--json")).out)

    target_topic = unique("imported")
    _target_settings, target = configure(env, TABLES, **{"offset.storage.topic": target_topic})
    result = await cli(target, "import", str(exported))
    assert result.code == 0, result.err
    assert "wrote 3 record(s)" in result.out
    assert "no configured table reads" in result.err  # the removed table's offset, kept
    assert await live(env, target_topic) == source

    again = await cli(target, "import", str(exported))
    assert again.code == 0
    assert "nothing to change" in again.out


async def test_import_validates_every_entry_before_writing(
    env: Env, cli: Cli, kafka_admin: AIOKafkaAdminClient
) -> None:
    _settings, config = configure(env)
    good = partition(env, "incident")
    other = partition(env, "change_request")
    bad_offset = {**orjson.loads(offset(other)), "phase": "done"}
    shuffled = dict(sorted(good.as_dict().items()))
    document = {
        "offsets": [
            {"partition": shuffled, "offset": orjson.loads(offset(good))},
            {"partition": other.as_dict(), "offset": bad_offset},
            {"partition": {"filename": "/tmp/x"}, "offset": None},
        ]
    }
    path = env.tmp_path / "bad.json"
    path.write_bytes(orjson.dumps(document))
    result = await cli(config, "import", str(path))
    assert result.code == 2
    assert "nothing was written" in result.err
    assert "offsets[1]" in result.err
    assert "unknown phase 'done'" in result.err
    assert "offsets[2]" in result.err
    assert "not a snowsource partition" in result.err
    assert "offsets[0]" not in result.err
    topics = await kafka_admin.describe_topics([env.offsets_topic])
    assert topics[0]["error_code"] != 0, "nothing may be contacted or created"

    for content, message in ((b"{oops", "is not JSON"), (b'{"offsets": 3}', '"offsets"')):
        path.write_bytes(content)
        result = await cli(config, "import", str(path))
        assert (result.code, message in result.err) == (2, True), result.err

    # The valid entry alone (any key order, plus a tombstone) imports under canonical bytes.
    path.write_bytes(
        orjson.dumps(
            {"offsets": [document["offsets"][0], {"partition": other.as_dict(), "offset": None}]}
        )
    )
    result = await cli(config, "import", str(path))
    assert result.code == 0, result.err
    assert await live(env) == {key(env, good): offset(good)}


def _connector(key_bytes: bytes) -> str | None:
    parsed = parse_key(key_bytes)
    return parsed[0] if parsed else None


async def test_import_of_a_foreign_spelled_offset_rewrites_it_canonically(
    env: Env, cli: Cli
) -> None:
    settings, config = configure(env)
    p = partition(env, "incident")
    foreign = orjson.dumps([env.name, dict(reversed(list(p.as_dict().items())))])
    await seed(settings, [(foreign, offset(p))])
    path = env.tmp_path / "same.json"
    path.write_bytes(
        orjson.dumps({"offsets": [{"partition": p.as_dict(), "offset": orjson.loads(offset(p))}]})
    )
    result = await cli(config, "import", str(path))
    assert result.code == 0, result.err
    assert "wrote 2 record(s)" in result.out
    assert await live(env) == {key(env, p): offset(p)}


async def test_import_of_a_null_offset_also_deletes_the_tables_legacy_offset(
    env: Env, cli: Cli
) -> None:
    # As PATCH and delete: a reset must not let the daemon adopt the Java connector's offset.
    query = "priority<=2^active=true"  # normalisation reorders it: the Java partition differs
    settings, config = configure(env, {"incident": {"name": "incident", "query": query}})
    p = partition(env, "incident", query)
    legacy = legacy_partition_for(
        snow_url=env.url,
        table="incident",
        query=query,
        query_domain=True,
        timestamp_field="sys_updated_on",
    )
    assert legacy != p
    await seed(settings, [(key(env, p), offset(p)), (key(env, legacy), offset(legacy))])
    path = env.tmp_path / "reset.json"
    path.write_bytes(orjson.dumps({"offsets": [{"partition": p.as_dict(), "offset": None}]}))
    result = await cli(config, "import", str(path))
    assert result.code == 0, result.err
    assert "legacy fingerprint" in result.out
    assert await live(env) == {}
