"""``snowsource check`` warns where the instance will not tell snowsource everything (SPEC §14.3).

Each warning of issue 21's item 4 against the emulator: ``deletes: audit`` on a
``no_audit_delete`` table and on a ``sys_*`` table the property does not list, ``journal: true``
behind the journal ACL (200 and an empty result), and the delete stream's read access to
``sys_audit_delete`` asked at start rather than after the table's first completed sweep.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from snowsource.cli.check import CheckResult, Status, exit_code, run_checks
from snowsource.config.loader import load_config
from snowsource.core.deletes import ACCESS_HINT
from snowsource.core.table_status import TableState
from tests.integration.conftest import Env
from tests.integration.engine import running, status, write_config
from tests.polling import poll_until

pytestmark = pytest.mark.kafka

AUDITED = "table incident deletes recorded by the instance"
JOURNAL = "table incident journal readable (sys_journal_field)"


async def _check(env: Env, tables: dict[str, dict[str, Any]]) -> dict[str, CheckResult]:
    path = write_config(env.tmp_path / f"check-{time.monotonic_ns()}.yaml", env.document(tables))
    results = await run_checks(load_config(path, env={}))
    assert exit_code(results) == 0, [r for r in results if r.failed]  # warnings never fail
    return {result.name: result for result in results}


async def test_audit_deletes_on_a_no_audit_delete_table_suggest_reconcile(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=3)
    tables = {"incident": {"name": "incident", "deletes": "audit"}}
    assert (await _check(env, tables))[AUDITED].status is Status.PASS
    env.emu.set_no_audit_delete("incident")
    found = (await _check(env, tables))[AUDITED]
    assert found.status is Status.WARN
    assert "no_audit_delete=true" in found.detail
    assert any("deletes: reconcile" in note for note in found.notes)


async def test_audit_deletes_on_an_unlisted_sys_table_suggest_reconcile(env: Env) -> None:
    tables = {
        "users": {"name": "sys_user", "deletes": "audit"},
        "tables": {"name": "sys_db_object", "deletes": "audit"},
    }
    found = await _check(env, tables)
    listed = found["table users deletes recorded by the instance"]
    assert listed.status is Status.PASS, listed
    unlisted = found["table tables deletes recorded by the instance"]
    assert unlisted.status is Status.WARN
    assert "missing from glide.ui.audit_deleted_tables" in unlisted.detail
    assert any("deletes: reconcile" in note for note in unlisted.notes)
    env.emu.set_property("glide.ui.audit_deleted_tables", "sys_user,sys_db_object")
    again = (await _check(env, tables))["table tables deletes recorded by the instance"]
    assert again.status is Status.PASS, again


async def test_journal_behind_its_acl_warns(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=3)
    parent = env.emu.rows("incident")[0]["sys_id"]
    env.emu.add_journal_entry("incident", parent, "first comment")
    tables = {"incident": {"name": "incident", "journal": True}}
    readable = (await _check(env, tables))[JOURNAL]
    assert readable.status is Status.PASS, readable
    env.emu.deny_journal()
    hidden = (await _check(env, tables))[JOURNAL]
    assert hidden.status is Status.WARN
    assert "sees no sys_journal_field rows of incident" in hidden.detail
    assert "1 entries match but none is readable" in hidden.detail


async def test_journal_acl_without_a_count_warns_for_a_table_with_journal_fields(
    env: Env,
) -> None:
    env.emu.seed(tables=("incident",), rows=3)
    env.emu.deny_journal()
    found = (await _check(env, {"incident": {"name": "incident", "journal": True}}))[JOURNAL]
    assert found.status is Status.WARN
    assert "incident has journal fields" in found.detail


async def test_the_delete_stream_asks_for_sys_audit_delete_at_start(env: Env) -> None:
    env.emu.seed(tables=("incident",), rows=100)
    env.emu.deny_table("admin", "sys_audit_delete")
    env.emu.latency_ms = 40  # the table's first sweep takes 20 pages
    settings = env.settings(
        {"incident": {"name": "incident", "deletes": "audit"}}, **{"batch.size": 5}
    )
    async with running(settings) as daemon:
        await poll_until(lambda: status(daemon, "incident.deletes").state == TableState.FAILED)
        table = status(daemon, "incident")
        assert table.sweeps == 0, "the delete stream failed only after the table's sweep"
        assert table.state != TableState.FAILED
        error = status(daemon, "incident.deletes").last_error
    assert error is not None
    # The test user's password is "admin", which the redactor masks wherever it appears.
    assert ACCESS_HINT.split(" (")[0] in error
