"""A whole instance's table catalog for discovery (SPEC §15.2), and the control call that
creates a table while the emulator runs.

``whole_instance`` adds what ``sys_db_object`` shows on a real instance: the ``task`` and
``cmdb_ci`` hierarchies, ``sys_`` tables, custom ``u_`` tables (one whose name cannot be an
alias), database views (``sys_class_name`` ``sys_db_view``), a table the integration user may not
read (403) and one whose every row an ACL hides (an empty page while ``X-Total-Count`` says
rows exist). ``POST /emulator/tables`` creates and seeds a table at run time.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from aiohttp import web

from snowsource.emulator.emulator import Emulator
from snowsource.emulator.tableapi import EMULATOR, json_response

__all__ = [
    "ACL_EMPTY",
    "CATALOG_PATH",
    "FORBIDDEN",
    "INVALID_ALIAS",
    "VIEWS",
    "add_table",
    "catalog_routes",
    "whole_instance",
]

CATALOG_PATH: Final = "/emulator/tables"

# (name, parent): parents come first. incident, change_request, cmdb_ci, cmdb_ci_server,
# task, sys_user and the other built-in tables exist already.
HIERARCHY: Final = (
    ("problem", "task"),
    ("change_task", "task"),
    ("incident_task", "task"),
    ("problem_task", "task"),
    ("sc_request", "task"),
    ("sc_req_item", "task"),
    ("sc_task", "task"),
    ("u_priority_incident", "incident"),
    ("cmdb_ci_hardware", "cmdb_ci"),
    ("cmdb_ci_computer", "cmdb_ci_hardware"),
    ("cmdb_ci_linux_server", "cmdb_ci_server"),
    ("cmdb_ci_win_server", "cmdb_ci_server"),
    ("cmdb_ci_appl", "cmdb_ci"),
    ("cmdb_ci_database", "cmdb_ci"),
    ("cmdb_ci_service", "cmdb_ci"),
    ("cmdb_ci_netgear", "cmdb_ci_hardware"),
    ("sys_user_group", None),
    ("sys_user_role", None),
    ("sys_choice", None),
    ("sys_email", None),
    ("sys_attachment", None),
    ("sys_update_set", None),
    ("sys_script", None),
    ("u_vendor_contract", None),
    ("u_site", None),
    ("u_badge", None),
    ("u_asset_note", None),
    ("u_Legacy_Import", None),
)
#: A table whose reads the integration user is refused (403).
FORBIDDEN: Final = "u_secret_ledger"
#: A table whose every row an ACL hides from the integration user.
ACL_EMPTY: Final = "u_hr_private"
#: A custom table whose name is not a valid alias (capitals).
INVALID_ALIAS: Final = "u_Legacy_Import"
VIEWS: Final = ("incident_sla_view", "u_ci_view")


def add_table(emu: Emulator, name: str, parent: str | None = None, rows: int = 0) -> None:
    """Create ``name`` (under ``parent``) with ``rows`` rows stamped over the last hour."""
    emu.create_table(name, {"u_name": "string"}, parent=parent)
    now = emu.clock.now()
    for i in range(rows):
        at = now - timedelta(minutes=60) + timedelta(seconds=i)
        emu.insert(name, {"u_name": f"{name} {i}"}, at=at)


def whole_instance(emu: Emulator, *, rows: int = 3) -> None:
    """Add the catalog above, each new table with ``rows`` rows (built-in ones keep theirs)."""
    for name, parent in HIERARCHY:
        add_table(emu, name, parent, rows)
    for name in (FORBIDDEN, ACL_EMPTY):
        add_table(emu, name, None, rows)
    emu.deny_table(emu.default_user.name, FORBIDDEN)
    emu.hide_rows(ACL_EMPTY, lambda row: True)
    emu.create_view(
        "incident_sla_view", {"inc": "incident", "sla": "task_sla"}, join=("inc_sys_id", "sla_task")
    )
    emu.create_view("u_ci_view", {"ci": "cmdb_ci"})


async def _create(request: web.Request) -> web.Response:
    emu: Emulator = request.app[EMULATOR]
    body = await request.json()
    name = body.get("name")
    if not isinstance(name, str) or not name:
        return json_response({"error": "name is required"}, status=400)
    try:
        add_table(emu, name, body.get("parent"), int(body.get("rows", 0)))
    except ValueError as error:
        return json_response({"error": str(error)}, status=409)
    return json_response({"created": name}, status=201)


def catalog_routes(router: web.UrlDispatcher) -> None:
    """``POST /emulator/tables`` ``{"name", "parent", "rows"}``: create a table while running."""
    router.add_post(CATALOG_PATH, _create)
