"""``snowsource check`` asks what ``run`` will need beyond a table's own rows (SPEC §13.6, §13.7).

The emulator's table-level ACLs play an instance that lets the integration user read the table
but not its audit rows or its dictionary; a record put in an output topic plays offsets that
were lost.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from snowsource.cli.check import CheckResult, Status, exit_code, run_checks
from snowsource.config.loader import load_config
from tests.integration.conftest import Env
from tests.integration.engine import write_config

pytestmark = pytest.mark.kafka

DELETES = "table incident deletes readable (sys_audit_delete)"
DICTIONARY = "table incident dictionary readable (value.format: typed)"
INCIDENT = {"incident": {"name": "incident", "deletes": "audit", "value.format": "typed"}}


async def _check(env: Env, tables: dict[str, dict[str, Any]]) -> list[CheckResult]:
    path = write_config(env.tmp_path / f"check-{time.monotonic_ns()}.yaml", env.document(tables))
    return await run_checks(load_config(path, env={}))


def _by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {result.name: result for result in results}


@pytest.fixture
def seeded(env: Env) -> Env:
    env.emu.seed(tables=("incident",), rows=10)
    env.emu.delete("incident", env.emu.rows("incident")[0]["sys_id"])
    return env


async def test_readable_audit_rows_and_dictionary_pass_after_the_tables_own_lines(
    seeded: Env,
) -> None:
    results = await _check(seeded, INCIDENT)
    names = [r.name for r in results]
    assert names.index(DELETES) == names.index("table incident cursor fields visible") + 1
    assert names.index(DICTIONARY) == names.index(DELETES) + 1
    found = _by_name(results)
    assert found[DELETES].status is Status.PASS, found[DELETES]
    assert "1 delete(s) recorded" in found[DELETES].detail
    assert found[DICTIONARY].status is Status.PASS, found[DICTIONARY]
    assert "column(s) of incident" in found[DICTIONARY].detail
    assert exit_code(results) == 0


async def test_a_plain_table_gets_neither_line(seeded: Env) -> None:
    names = {r.name for r in await _check(seeded, {"incident": {"name": "incident"}})}
    assert DELETES not in names
    assert DICTIONARY not in names


async def test_a_403_on_the_audit_table_fails_naming_the_acl(seeded: Env) -> None:
    seeded.emu.deny_table("admin", "sys_audit_delete")
    results = await _check(seeded, INCIDENT)
    found = _by_name(results)
    deletes = found[DELETES]
    assert deletes.status is Status.FAIL
    assert "HTTP 403" in deletes.detail
    assert "delete stream of incident would FAIL" in deletes.detail
    assert any("read ACL on sys_audit_delete" in note for note in deletes.notes)
    assert any("deletes: none" in note for note in deletes.notes)
    # Only that line: the table itself and its dictionary are fine.
    assert found["table incident readable"].status is Status.PASS
    assert found[DICTIONARY].status is Status.PASS
    assert exit_code(results) == 1


async def test_a_403_on_the_dictionary_fails_naming_the_acl(seeded: Env) -> None:
    seeded.emu.deny_table("admin", "sys_dictionary")
    results = await _check(seeded, INCIDENT)
    found = _by_name(results)
    dictionary = found[DICTIONARY]
    assert dictionary.status is Status.FAIL
    assert "HTTP 403" in dictionary.detail
    assert "incident would FAIL at start" in dictionary.detail
    assert any("sys_db_object and sys_dictionary" in note for note in dictionary.notes)
    assert any("value.format: string" in note for note in dictionary.notes)
    assert found[DELETES].status is Status.PASS
    assert exit_code(results) == 1


async def test_unreachable_servicenow_skips_both_lines(seeded: Env) -> None:
    seeded.emu.faults.add(kind="disconnect", times=None)
    found = _by_name(await _check(seeded, INCIDENT))
    assert found[DELETES].status is Status.SKIP
    assert found[DICTIONARY].status is Status.SKIP


async def test_a_missing_offsets_topic_warns_when_output_topics_hold_records(
    seeded: Env,
) -> None:
    offsets = f"offsets topic {seeded.offsets_topic!r} compacted or creatable"
    tables = {"incident": {"name": "incident"}}
    # First run: nothing written anywhere yet, the offsets topic will simply be created.
    assert _by_name(await _check(seeded, tables))[offsets].status is Status.PASS

    admin = AIOKafkaAdminClient(bootstrap_servers=seeded.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(seeded.topic("incident"), 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=seeded.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(seeded.topic("incident"), b"{}", key=b"row")
    finally:
        await producer.stop()
    results = await _check(seeded, tables)
    line = _by_name(results)[offsets]
    assert line.status is Status.WARN
    assert seeded.topic("incident") in line.detail
    assert "`snowsource run` refuses to start" in line.detail
    assert line.notes == (
        "restore the offsets from an export: snowsource offsets import FILE",
        "or accept one full replay: snowsource run --allow-full-replay",
    )
    assert exit_code(results) == 0


async def test_deletes_on_a_parent_table_warn_that_child_class_deletes_are_missed(
    seeded: Env,
) -> None:
    """Issue 23 item 8: an incident's delete is recorded under tablename=incident, so a delete
    stream of ``task`` (whose topic holds the incident rows) never sees it."""
    results = _by_name(await _check(seeded, {"task": {"name": "task", "deletes": "audit"}}))
    line = results["table task deletes readable (sys_audit_delete)"]
    assert line.status is Status.WARN, line
    assert "incident" in line.detail
    assert "not read" in line.detail
    assert any("deletes: audit" in note for note in line.notes), line.notes
    # A table without child classes stays a PASS.
    plain = _by_name(await _check(seeded, INCIDENT))[DELETES]
    assert plain.status is Status.PASS, plain
