"""``snowsource check`` lines for ``snow.discover`` (SPEC §15.2): what one discovery selects,
and a SKIPPED line per selected table the integration user cannot read.

The check runs the daemon's own discoverer once (the same sys_db_object paging, probe and
rules), with a target that only records what would start.
"""

from __future__ import annotations

from typing import Final

from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.cli.check_report import CheckResult, Status
from snowsource.config.models import Settings
from snowsource.engine.discovery import Collected, settings_discoverer
from snowsource.engine.wiring import snow_retry

__all__ = ["discovery_checks"]

NAME: Final = "discovery"
# Names listed on the discovery line before "and N more".
_LISTED: Final = 20


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    more = len(names) - _LISTED
    return f"{shown} and {more} more" if more > 0 else shown


async def discovery_checks(client: ServiceNowClient, settings: Settings) -> list[CheckResult]:
    """The discovery line, then one SKIPPED line per unreadable discovered table."""
    config = settings.snow.discover
    if config is None:
        return []
    target = Collected()
    discoverer = settings_discoverer(
        settings, client=lambda: client, retry=snow_retry(settings), target=target
    )
    await discoverer.discover_once()
    state = discoverer.state
    if state.discoveries == 0:
        return [CheckResult(NAME, Status.FAIL, "sys_db_object cannot be read: nothing discovered")]
    found = sorted(target.names)
    detail = f"{len(found)} readable tables selected" + (f": {_listed(found)}" if found else "")
    notes: tuple[str, ...] = ()
    if state.invalid:
        notes = (f"left out, not valid aliases: {', '.join(state.invalid)}",)
    lines = [CheckResult(NAME, Status.PASS if found else Status.WARN, detail, notes)]
    for name, reason in sorted(state.skipped.items()):
        lines.append(CheckResult(f"table {name} readable", Status.WARN, f"SKIPPED: {reason}"))
    return lines
