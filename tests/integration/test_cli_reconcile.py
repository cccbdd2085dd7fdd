"""``snowsource reconcile``: the instance against the topic, as a user runs it (a subprocess).

One daemon run fills the topic; the emulator then changes under it so that each case the
command tells apart appears in turn: equal, rows missing in Kafka, rows missing in the instance,
and rows an ACL hides (the Aggregate API answers 403).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from tests.integration.conftest import Env
from tests.integration.engine import caught_up, running, write_config
from tests.kafka_support import REPO
from tests.polling import poll_until

SNOWSOURCE = str(REPO / ".venv" / "bin" / "snowsource")
TABLES = {"incident": {"name": "incident"}, "change": {"name": "change_request"}}


async def _reconcile(*args: str) -> tuple[int, str, str]:
    # The emulator serves from this event loop: the command must not block it.
    proc = await asyncio.create_subprocess_exec(
        SNOWSOURCE,
        "reconcile",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _report(config: Path, alias: str = "incident") -> tuple[int, dict[str, Any]]:
    code, out, err = await _reconcile("--config", str(config), "--table", alias, "--json")
    assert out, err
    tables = orjson.loads(out)["tables"]
    assert [t["alias"] for t in tables] == [alias]
    return code, tables[0]


async def test_reconcile_tells_each_case_apart_with_its_exit_code(env: Env) -> None:
    env.emu.set_no_audit_delete("incident")
    env.emu.seed(tables=("incident", "change_request"), rows=25)
    config = write_config(env.tmp_path / "config.yaml", env.document(TABLES))
    async with running(env.settings(TABLES)) as daemon:
        await poll_until(caught_up(daemon, "incident", "change"))

    code, out, _ = await _reconcile("--config", str(config))
    assert code == 0, out
    assert out.count(": equal") == 2
    code, report = await _report(config)
    assert code == 0
    assert report["equal"] is True
    assert report["instance_rows"] == report["kafka_keys"] == report["instance_keys"] == 25

    added = [env.emu.insert("incident", {"short_description": "new"})["sys_id"] for _ in range(3)]
    code, report = await _report(config)
    assert code == 1
    assert (report["missing_in_kafka"], report["missing_in_instance"]) == (3, 0)
    assert sorted(report["sample_missing_in_kafka"]) == sorted(added)
    assert report["instance_rows"] == 28
    code, other = await _report(config, "change")
    assert code == 0  # --table compares that table only
    assert other["equal"] is True

    gone = [row["sys_id"] for row in env.emu.rows("incident")[:2]]
    for sys_id in gone:
        env.emu.delete("incident", sys_id)
    code, report = await _report(config)
    assert code == 1
    assert (report["missing_in_kafka"], report["missing_in_instance"]) == (3, 2)
    assert sorted(report["sample_missing_in_instance"]) == sorted(gone)

    hidden = added[0]
    env.emu.hide_rows("incident", lambda row: row["sys_id"] == hidden)
    code, report = await _report(config)
    assert code == 1
    assert report["instance_rows"] is None
    assert report["problem"] == "the integration user cannot see every row (an ACL hides some)"
    code, out, _ = await _reconcile("--config", str(config), "--table", "incident")
    assert code == 1
    assert "incident (table incident, topic " in out
    assert "DIFFER" in out
    assert "the integration user cannot see every row (an ACL hides some)" in out


async def test_configuration_and_usage_errors_exit_2(tmp_path: Path) -> None:
    bad = write_config(tmp_path / "bad.yaml", {"snow": {"url": "https://x.service-now.com"}})
    code, _, err = await _reconcile("--config", str(bad))
    assert code == 2
    assert "username: required with type: basic" in err
    good = write_config(
        tmp_path / "good.yaml",
        {
            "snow": {
                "url": "https://x.service-now.com",
                "auth": {"username": "u", "password": "p"},
                "tables": {"incident": {"name": "incident"}},
            }
        },
    )
    code, _, err = await _reconcile("--config", str(good), "--table", "nope")
    assert code == 2
    assert "unknown table alias 'nope'" in err
    code, _, _ = await _reconcile("--bogus")
    assert code == 2
