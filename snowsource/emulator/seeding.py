"""Realistic demo data: users, incidents, changes, CIs, SLAs, and a background activity loop.

Value generation is pure (a ``random.Random`` in, dicts out); :func:`seed` and
:func:`run_activity` write through the emulator's public mutation API so every row gets the same
system fields, audit and visibility handling as a test's own writes.
"""

from __future__ import annotations

import asyncio
import gc
import random
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from snowsource.emulator.clock import stamp
from snowsource.emulator.mutations import RowWrites

FIRST_NAMES = (
    "Abel",
    "Beth",
    "Carlos",
    "Dana",
    "Elif",
    "Fred",
    "Grace",
    "Hiro",
    "Ines",
    "Jamal",
    "Kara",
    "Luis",
    "Mina",
    "Nils",
    "Olga",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tariq",
)
LAST_NAMES = (
    "Tuter",
    "Anand",
    "Luddy",
    "Ortiz",
    "Kaya",
    "Nakamura",
    "Schmidt",
    "Okafor",
    "Rossi",
    "Novak",
    "Haddad",
    "Lindqvist",
    "Moreau",
    "Silva",
    "Walsh",
)
DEPARTMENTS = ("IT", "Finance", "HR", "Sales", "Engineering", "Facilities")
TIME_ZONES = (
    "America/Los_Angeles",
    "America/New_York",
    "Europe/London",
    "Europe/Berlin",
    "Asia/Kolkata",
    "",
)
INCIDENT_TEXTS = (
    "Email server is down",
    "Cannot connect to VPN",
    "Printer jams on floor 3",
    "SAP login fails",
    "Laptop battery swelling",
    "Wi-Fi drops in meeting room",
    "Password reset loop",
    "Slow response on CRM",
    "Disk full on db01",
    "Phone not receiving calls",
    "Outlook crashes on start",
    "Badge reader broken",
)
_INCIDENT_DESCRIPTIONS = tuple(f"Reported by phone. {text}." for text in INCIDENT_TEXTS)
CHANGE_TEXTS = (
    "Patch Linux fleet",
    "Upgrade Oracle to 19c",
    "Rotate TLS certificates",
    "Add firewall rule for partner",
    "Migrate file share",
    "Replace core switch",
    "Decommission legacy CRM",
    "Increase VM memory",
)
CI_PREFIXES = ("app", "db", "web", "mail", "file", "lb", "sw", "rtr")
OSES = ("Linux Red Hat", "Windows 2019 Standard", "Ubuntu 22.04", "AIX 7.2")
SLA_NAMES = (
    "Priority 1 resolution (4 hour)",
    "Priority 2 resolution (8 hour)",
    "Priority 3 resolution (3 day)",
    "Response time (1 hour)",
)
SEEDABLE = ("incident", "change_request", "cmdb_ci", "task_sla", "sys_user")


# Seeding a million rows makes ~20 million of these draws: one ``random()`` call each is several
# times cheaper than ``randrange``/``randint``, and just as deterministic for a seed.
def _pick(rng: random.Random, values: Sequence[str]) -> str:
    return values[int(rng.random() * len(values))]


def _randint(rng: random.Random, low: int, high: int) -> int:
    """A uniform integer in ``[low, high]``."""
    return low + int(rng.random() * (high - low + 1))


def _ip_address(rng: random.Random) -> str:
    return f"10.{_randint(rng, 0, 255)}.{_randint(rng, 0, 255)}.{_randint(rng, 1, 254)}"


def user_values(rng: random.Random, index: int) -> dict[str, str]:
    """A plausible ``sys_user`` row."""
    first, last = _pick(rng, FIRST_NAMES), _pick(rng, LAST_NAMES)
    login = f"{first}.{last}{index}".lower()
    return {
        "user_name": login,
        "name": f"{first} {last}",
        "first_name": first,
        "last_name": last,
        "email": f"{login}@example.com",
        "title": _pick(rng, ("Analyst", "Engineer", "Manager", "Technician")),
        "department": _pick(rng, DEPARTMENTS),
        "time_zone": _pick(rng, TIME_ZONES),
        "date_format": "",
        "time_format": "",
        "active": "true",
        "locked_out": "false",
        # Secrets (password2, glide_encrypted in the dictionary) that sensitive.fields keeps
        # out of Kafka. Derived, not drawn: a draw would change every row seeded after it.
        "user_password": f"pw!{login}",
        "u_recovery_code": f"rc-{index:06d}-{len(login)}",
    }


_INCIDENT_STATES = ("1", "1", "2", "2", "3", "6", "7", "8")
_CLOSED_STATES = frozenset(("6", "7", "8"))
_SEVERITIES = ("1", "2", "3")
_INCIDENT_CATEGORIES = ("inquiry", "software", "hardware", "network", "database")


def incident_values(
    rng: random.Random, users: Sequence[str], cis: Sequence[str], opened: datetime
) -> dict[str, str]:
    """A plausible new or progressed incident."""
    # ``_pick`` and ``_randint`` written out (the same draws, in the same order): seeding a
    # million incidents calls this a million times.
    r = rng.random
    state = _INCIDENT_STATES[int(r() * 8)]
    closed = state in _CLOSED_STATES
    impact, urgency = 1 + int(r() * 3), 1 + int(r() * 3)
    users_n, cis_n = len(users), len(cis)
    opened_text = stamp(opened)
    return {
        "short_description": INCIDENT_TEXTS[int(r() * len(INCIDENT_TEXTS))],
        "description": _INCIDENT_DESCRIPTIONS[int(r() * len(_INCIDENT_DESCRIPTIONS))],
        "caller_id": users[int(r() * users_n)] if users else "",
        "assigned_to": users[int(r() * users_n)] if users and r() < 0.8 else "",
        "opened_by": users[int(r() * users_n)] if users else "",
        "cmdb_ci": cis[int(r() * cis_n)] if cis and r() < 0.6 else "",
        "impact": str(impact),
        "urgency": str(urgency),
        "priority": str(min(5, impact + urgency - 1)),
        "severity": _SEVERITIES[int(r() * 3)],
        "state": state,
        "active": "false" if closed else "true",
        "category": _INCIDENT_CATEGORIES[int(r() * 5)],
        "opened_at": opened_text,
        "resolved_at": stamp(opened + timedelta(hours=1 + int(r() * 48))) if closed else "",
        "closed_at": stamp(opened + timedelta(hours=49 + int(r() * 48))) if state == "7" else "",
        "reassignment_count": str(int(r() * 4)),
    }


def change_values(
    rng: random.Random, users: Sequence[str], cis: Sequence[str], opened: datetime
) -> dict[str, str]:
    """A plausible change request."""
    state = _pick(rng, ("-5", "-4", "-3", "-2", "-1", "0", "3", "4"))
    start = opened + timedelta(days=_randint(rng, 1, 10), hours=_randint(rng, 0, 23))
    return {
        "short_description": _pick(rng, CHANGE_TEXTS),
        "description": "Planned maintenance.",
        "requested_by": _pick(rng, users) if users else "",
        "assigned_to": _pick(rng, users) if users and rng.random() < 0.7 else "",
        "opened_by": _pick(rng, users) if users else "",
        "cmdb_ci": _pick(rng, cis) if cis and rng.random() < 0.8 else "",
        "type": _pick(rng, ("normal", "normal", "standard", "emergency")),
        "risk": _pick(rng, ("2", "3", "4")),
        "category": _pick(rng, ("Hardware", "Software", "Service", "Network")),
        "priority": _pick(rng, ("2", "3", "4")),
        "impact": _pick(rng, ("1", "2", "3")),
        "urgency": _pick(rng, ("1", "2", "3")),
        "state": state,
        "active": "false" if state in ("3", "4") else "true",
        "opened_at": stamp(opened),
        "start_date": stamp(start),
        "end_date": stamp(start + timedelta(hours=_randint(rng, 1, 8))),
    }


def ci_values(rng: random.Random, users: Sequence[str], index: int) -> tuple[str, dict[str, str]]:
    """A plausible CI and the concrete class (table) it belongs to."""
    server = rng.random() < 0.4
    name = f"{_pick(rng, CI_PREFIXES)}{index:04d}"
    values = {
        "name": name,
        "asset_tag": f"P{_randint(rng, 100000, 999999)}",
        "serial_number": f"SN-{rng.getrandbits(40):010x}",
        "ip_address": _ip_address(rng),
        "install_status": _pick(rng, ("1", "1", "1", "3", "6", "7")),
        "operational_status": _pick(rng, ("1", "1", "1", "2", "5")),
        "assigned_to": _pick(rng, users) if users and rng.random() < 0.5 else "",
        "category": _pick(rng, ("Hardware", "Software", "Network")),
        "cost": f"{_randint(rng, 100, 99999)}.{_randint(rng, 0, 99):02d}",
        "discovery_source": _pick(rng, ("ServiceNow", "SCCM", "Manual Entry")),
    }
    if server:
        values.update(
            os=_pick(rng, OSES),
            cpu_count=str(rng.choice((2, 4, 8, 16))),
            ram=str(rng.choice((4096, 8192, 16384, 65536))),
        )
        # Derived, not drawn: one more random draw would change every row seeded after it.
        values["disk_space"] = f"{int(values['ram']) / 64:.2f}"
        return "cmdb_ci_server", values
    return "cmdb_ci", values


def sla_values(rng: random.Random, task: str, start: datetime) -> dict[str, str]:
    """A plausible ``task_sla`` row for a task."""
    stage = _pick(rng, ("in_progress", "completed", "paused", "cancelled"))
    planned = start + timedelta(hours=rng.choice((1, 4, 8, 72)))
    return {
        "task": task,
        "sla": _pick(rng, SLA_NAMES),
        "stage": stage,
        "has_breached": "true" if rng.random() < 0.15 else "false",
        "active": "true" if stage in ("in_progress", "paused") else "false",
        "start_time": stamp(start),
        "planned_end_time": stamp(planned),
        "end_time": stamp(planned - timedelta(minutes=_randint(rng, 1, 50)))
        if stage == "completed"
        else "",
        "business_percentage": f"{rng.uniform(0, 130):.2f}",
    }


def _spread(rng: random.Random, now: datetime, days: float = 30.0) -> tuple[datetime, datetime]:
    """A created/updated pair inside the last ``days``; a quarter of rows were never updated."""
    created = now - timedelta(seconds=rng.uniform(0, days * 86400))
    if rng.random() < 0.25:
        return created, created
    updated = created + timedelta(seconds=rng.uniform(0, (now - created).total_seconds()))
    return created, updated


def _spreads(rng: random.Random, now: datetime, rows: int) -> list[tuple[datetime, datetime]]:
    """``rows`` created/updated pairs, oldest update first.

    Rows stored in update order make the first keyset read's index sort (by ``sys_updated_on``)
    nearly linear: at a million rows that is seconds saved on the first page.
    """
    return sorted((_spread(rng, now) for _ in range(rows)), key=lambda pair: pair[1])


def seed(emu: RowWrites, tables: Sequence[str], rows: int, rng: random.Random) -> None:
    """Create ``rows`` rows per table (plus users to reference), stamped over the last 30 days."""
    unknown = [t for t in tables if t not in SEEDABLE]
    if unknown:
        raise ValueError(f"cannot seed {unknown}; seedable tables: {', '.join(SEEDABLE)}")
    # Seeding allocates millions of dicts and no cycles: the collector's full passes over an
    # ever larger heap would cost more than the writes themselves.
    collecting = gc.isenabled()
    gc.disable()
    try:
        _seed(emu, tables, rows, rng)
    finally:
        if collecting:
            gc.enable()


def _seed(emu: RowWrites, tables: Sequence[str], rows: int, rng: random.Random) -> None:
    now = emu.clock.now()
    users = [u["sys_id"] for u in emu.rows("sys_user")]
    wanted_users = max(20, rows // 50) if "sys_user" not in tables else rows
    for index in range(len(users), len(users) + wanted_users):
        created, updated = _spread(rng, now, days=365)
        users.append(_write(emu, "sys_user", user_values(rng, index), created, updated, rng=rng))
    cis = [r["sys_id"] for r in emu.rows("cmdb_ci")]
    if "cmdb_ci" in tables:
        for index in range(rows):
            created, updated = _spread(rng, now)
            table, values = ci_values(rng, users, len(cis) + index)
            values["last_discovered"] = stamp(updated)
            values["purchase_date"] = (created - timedelta(days=90)).date().isoformat()
            cis.append(_write(emu, table, values, created, updated, rng=rng))
    if "incident" in tables:
        for created, updated in _spreads(rng, now, rows):
            _write(
                emu,
                "incident",
                incident_values(rng, users, cis, created),
                created,
                updated,
                rng=rng,
            )
    if "change_request" in tables:
        for created, updated in _spreads(rng, now, rows):
            _write(
                emu,
                "change_request",
                change_values(rng, users, cis, created),
                created,
                updated,
                rng=rng,
            )
    if "task_sla" in tables:
        incidents = emu.rows("incident")
        for inc in incidents[:rows]:
            if rng.random() < 0.7:
                opened = datetime.fromisoformat(inc["sys_created_on"] + "+00:00")
                _write(
                    emu, "task_sla", sla_values(rng, inc["sys_id"], opened), opened, opened, rng=rng
                )


def _write(
    emu: RowWrites,
    table: str,
    values: dict[str, str],
    created: datetime,
    updated: datetime,
    *,
    rng: random.Random,
) -> str:
    mod_count = 0 if updated == created else _randint(rng, 1, 8)
    values.update(sys_updated_on=stamp(updated), sys_mod_count=str(mod_count))
    by = "admin" if rng.random() < 0.3 else "system"
    row = emu.insert_texts(table, values, at=created, visible_at=updated, by=by)
    return row["sys_id"]


# --- activity ---------------------------------------------------------------------------------


def burst(
    emu: RowWrites,
    table: str,
    n: int,
    rng: random.Random,
    *,
    at: datetime,
    values: Mapping[str, object] | None,
    visible_at: datetime | None,
) -> list[dict[str, str]]:
    """``n`` inserts into ``table`` stamped in the same second ``at`` (see ``Emulator.burst``)."""
    users = [u["sys_id"] for u in emu.rows("sys_user")]
    out: list[dict[str, str]] = []
    for _ in range(n):
        generated: dict[str, str] = {}
        if table == "incident":
            generated = incident_values(rng, users, [], at)
        elif table == "change_request":
            generated = change_values(rng, users, [], at)
        merged: dict[str, object] = {**generated, **(values or {})}
        out.append(emu.insert(table, merged, at=at, visible_at=visible_at))
    return out


_INCIDENT_NEXT = {"1": "2", "2": "6", "3": "2", "6": "7"}
_CHANGE_NEXT = {"-5": "-4", "-4": "-3", "-3": "-2", "-2": "-1", "-1": "0", "0": "3"}


def update_values(
    table: str, row: dict[str, str], rng: random.Random, users: Sequence[str], now: datetime
) -> dict[str, str]:
    """A plausible next change of a row (state moves forward, reassignments, rediscovery)."""
    if table == "incident":
        state = _INCIDENT_NEXT.get(row.get("state", ""), row.get("state", "1"))
        changes = {"state": state, "active": "false" if state in ("6", "7", "8") else "true"}
        if state == "6":
            changes["resolved_at"] = stamp(now)
        if state == "7":
            changes["closed_at"] = stamp(now)
        if users and rng.random() < 0.3:
            changes["assigned_to"] = _pick(rng, users)
        if rng.random() < 0.2:
            changes["priority"] = _pick(rng, ("1", "2", "3", "4", "5"))
        return changes
    if table == "change_request":
        state = _CHANGE_NEXT.get(row.get("state", ""), row.get("state", "-5"))
        return {"state": state, "active": "false" if state in ("3", "4") else "true"}
    if table.startswith("cmdb_ci"):
        return {
            "operational_status": _pick(rng, ("1", "1", "2", "5")),
            "ip_address": _ip_address(rng),
            "last_discovered": stamp(now),
        }
    return {}


def one_change(
    emu: RowWrites,
    table: str,
    rng: random.Random,
    users: Sequence[str],
    cis: Sequence[str],
    *,
    at: datetime | None = None,
) -> None:
    """Insert, update or (rarely) delete one row of ``table`` at the emulator clock."""
    now = at or emu.clock.now()
    sys_id = emu.random_sys_id(table, rng)
    roll = rng.random()
    if sys_id is None or roll < 0.35:
        if table == "incident":
            emu.insert(table, incident_values(rng, users, cis, now), at=at)
        elif table == "change_request":
            emu.insert(table, change_values(rng, users, cis, now), at=at)
        elif table == "cmdb_ci":
            concrete, values = ci_values(rng, users, _randint(rng, 10000, 99999))
            emu.insert(concrete, values, at=at)
        return
    current = emu.get(table, sys_id)
    if current is None:
        return
    if roll > 0.98:
        emu.delete(table, sys_id, at=at)
        return
    emu.update(table, sys_id, update_values(table, current, rng, users, now), at=at)


async def run_activity(
    emu: RowWrites, rows_per_s: float, tables: Sequence[str], rng: random.Random
) -> None:
    """Change ``rows_per_s`` rows a second until cancelled, with occasional same-second bursts."""
    tick = 0.1
    credit = 0.0
    users = [u["sys_id"] for u in emu.rows("sys_user")]
    cis = [c["sys_id"] for c in emu.rows("cmdb_ci")]
    while True:
        await asyncio.sleep(tick)
        credit += rows_per_s * tick
        count = int(credit)
        credit -= count
        for _ in range(count):
            one_change(emu, _pick(rng, tables), rng, users, cis)
        # About every 20 s: a burst of 20-200 changes stamped in one second, the case that breaks
        # readers whose cursor is the timestamp alone.
        if rng.random() < tick / 20:
            at = emu.clock.now()
            table = _pick(rng, tables)
            for _ in range(_randint(rng, 20, 200)):
                one_change(emu, table, rng, users, cis, at=at)
