"""The rules of field governance's keys (SPEC §15.2), outside ``snow.py``.

Per table (or as top-level defaults): ``fields.exclude``, ``fields.hash``, ``fields.mask`` and
``sensitive.fields``; at the top level the secret ``governance.hash.key`` that every
``fields.hash`` needs. The decisions themselves are ``core.governance``'s.
"""

from __future__ import annotations

from typing import Protocol

from snowsource.config.fields import FILE_SUFFIX, SensitiveFields
from snowsource.core.governance import Governance, config_problems
from snowsource.core.records import RAW_FIELDS_EXTRA

HASH_KEY = "governance.hash.key"


class GovernedTable(Protocol):
    """The keys of a table's configuration (``config.snow.TableConfig``) governance reads."""

    @property
    def timestamp_field(self) -> str: ...
    @property
    def id_field(self) -> str: ...
    @property
    def fields_exclude(self) -> list[str]: ...
    @property
    def fields_hash(self) -> list[str]: ...
    @property
    def fields_mask(self) -> list[str]: ...
    @property
    def sensitive_fields(self) -> SensitiveFields: ...


def protected_columns(table: GovernedTable) -> frozenset[str]:
    """The columns governance never touches: the cursor fields and ``sys_mod_count``."""
    return frozenset({table.timestamp_field, table.id_field, *RAW_FIELDS_EXTRA})


def governance_problems(table: GovernedTable) -> list[tuple[str, str]]:
    """``(key, message)`` for every governance list entry the table cannot have."""
    return config_problems(
        exclude=table.fields_exclude,
        hash_names=table.fields_hash,
        mask=table.fields_mask,
        protected=protected_columns(table),
    )


def hash_key_problem(hashing: list[str]) -> tuple[str, str] | None:
    """The problem of a missing ``governance.hash.key`` when the aliases ``hashing`` hash."""
    if not hashing:
        return None
    return (
        "hash.key",
        f"required when a table hashes columns (fields.hash of {', '.join(hashing)}): set "
        f"{HASH_KEY} (or {HASH_KEY}{FILE_SUFFIX}: /path/to/file) to a long random secret, "
        "the same for every process of the connector so hashes join",
    )


def table_governance(table: GovernedTable, hash_key: str | None) -> Governance:
    """The table's :class:`Governance` from its resolved keys and the hash key's text."""
    return Governance(
        exclude=tuple(table.fields_exclude),
        hash=tuple(table.fields_hash),
        mask=tuple(table.fields_mask),
        sensitive_exclude=table.sensitive_fields is SensitiveFields.EXCLUDE,
        protected=protected_columns(table),
        hash_key=(hash_key or "").encode(),
    )
