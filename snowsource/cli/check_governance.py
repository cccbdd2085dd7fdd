"""``snowsource check``'s line for a table's sensitive columns (SPEC §15.2).

With ``sensitive.fields: exclude`` (the default) the daemon reads the table's dictionary to find
``password``, ``password2`` and ``glide_encrypted`` columns and leaves them out. Without read
access to the dictionary it runs the table anyway and WARNs that they are not verified: this
line says so before the daemon starts, and otherwise names the columns that will be left out.
A typed table's dictionary line already asks the same question (and FAILs on a refusal).
"""

from __future__ import annotations

from snowsource.adapters.servicenow import ServiceNowClient
from snowsource.cli.check_report import CheckResult, Status
from snowsource.config.fields import SensitiveFields, ValueFormat
from snowsource.config.snow import TableConfig
from snowsource.core.errors import RetriableError, ServiceNowError, TableFailedError
from snowsource.core.governance import SENSITIVE_TYPES
from snowsource.engine.dictionary_reader import read_columns

__all__ = ["sensitive_check", "sensitive_name", "wants_sensitive_check"]


def sensitive_name(alias: str) -> str:
    """The line's name."""
    return f"table {alias} sensitive columns (sensitive.fields: exclude)"


def wants_sensitive_check(table: TableConfig) -> bool:
    """Whether the table has the line: sensitive columns excluded, and no typed dictionary
    line that asks the same."""
    return (
        table.sensitive_fields is SensitiveFields.EXCLUDE
        and table.value_format is not ValueFormat.TYPED
    )


async def sensitive_check(client: ServiceNowClient, alias: str, table: TableConfig) -> CheckResult:
    """Read the table's dictionary as the daemon does; which sensitive columns it excludes."""
    name = sensitive_name(alias)
    try:
        columns = await read_columns(client, table.name, label=alias)
    except (ServiceNowError, TableFailedError) as exc:
        if isinstance(exc, RetriableError):
            return CheckResult(name, Status.FAIL, str(exc) or type(exc).__name__)
        return CheckResult(
            name,
            Status.WARN,
            f"the dictionary of {table.name} cannot be read ({exc}): the table runs, but its "
            "password and encrypted columns are not verified and would be sent",
            (
                "grant the integration user read access to sys_db_object and sys_dictionary, "
                "or exclude such columns by name with fields.exclude",
            ),
        )
    found = sorted(n for n, kind in columns.items() if kind in SENSITIVE_TYPES)
    excluded = f"excluded: {', '.join(found)}" if found else "none found"
    return CheckResult(name, Status.PASS, f"{len(columns)} column(s) of {table.name}; {excluded}")
