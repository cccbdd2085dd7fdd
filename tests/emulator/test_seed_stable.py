"""Seeding is fast-pathed (one template per table, values drawn inline): what it stores must
stay exactly what the plain insert path stored, row for row, for a given seed."""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime, timedelta, timezone

from snowsource.emulator import Emulator
from snowsource.emulator.clock import stamp

# The rows of this seed as the general insert path wrote them before the fast path. A
# deliberate change to the seeded data changes this digest; an optimisation must not. (Release
# 3 added sys_journal_field, sys_properties and the dictionary's attributes column; release 4
# sys_user's password2 and glide_encrypted columns, whose dictionary rows shift every sys_id,
# then the built-in sys_db_view_table, whose schema rows do the same.)
SEEDED_DIGEST = "7ec82297cc1b576400b0ab3c930ab17ceff517d9b5a5c5afc7a72a477c321e0d"


def _digest(emu: Emulator) -> str:
    digest = hashlib.sha256()
    for table in sorted(emu.tables):
        for row in emu.rows(table):
            digest.update(repr(sorted(row.items())).encode())
    return digest.hexdigest()


def test_seeded_rows_are_unchanged_for_a_seed() -> None:
    emu = Emulator(seed=3, now=datetime(2026, 9, 29, 7, 0, tzinfo=UTC))
    emu.seed(tables=("incident", "change_request", "cmdb_ci", "task_sla"), rows=400)
    assert _digest(emu) == SEEDED_DIGEST


def test_insert_after_seeding_fills_defaults_like_any_insert() -> None:
    emu = Emulator(seed=3, now=datetime(2026, 9, 29, 7, 0, tzinfo=UTC))
    emu.seed(tables=("incident",), rows=5)
    row = emu.insert("incident", {"short_description": "typed", "impact": 2})
    assert row["impact"] == "2"
    assert row["sys_class_name"] == "incident"
    assert row["sys_created_on"] == row["sys_updated_on"] == row["opened_at"]
    assert row["sys_created_by"] == row["sys_updated_by"] == "system"
    assert row["number"].startswith("INC")
    # The returned row is a copy: changing it does not change what is stored.
    row["short_description"] = "changed"
    stored = emu.get("incident", row["sys_id"])
    assert stored is not None
    assert stored["short_description"] == "typed"


def test_stamp_is_the_utc_second_of_any_instant() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        instant = datetime(1, 1, 2, tzinfo=UTC) + timedelta(seconds=rng.uniform(0, 3.15e11))
        offset = timezone(timedelta(minutes=rng.randint(-900, 900)))
        shown = instant.astimezone(offset) if 2 < instant.year < 9998 else instant
        assert stamp(shown) == instant.isoformat(" ", "seconds")[:19]
    naive = datetime(2026, 9, 29, 7, 30, 1, 999999)  # local time, as astimezone reads it
    assert stamp(naive) == naive.astimezone(UTC).isoformat(" ", "seconds")[:19]
