"""Field governance (SPEC §15.2): which columns of a table leave the process, and how. Pure.

A table's :class:`Governance` (its ``fields.exclude`` globs, ``fields.hash`` and ``fields.mask``
names, ``sensitive.fields`` and the hash key) decides, column by column, one :class:`Action`:

- ``EXCLUDE``: the column is taken out of the row (a ``fields.exclude`` glob matches it, or the
  dictionary says its ``internal_type`` is a password or encrypted one and sensitive columns
  are excluded);
- ``HASH``: a non-empty value becomes the lower-case hex HMAC-SHA256 of its raw UTF-8 text
  under ``governance.hash.key`` (the same text gives the same hash, so joins still work);
- ``MASK``: a non-empty value becomes ``****``;
- ``KEEP``: anything else, and always the cursor fields and ``sys_mod_count`` (the cursor and
  the dedup cache need them as they are; naming one is a config error, and a glob skips them).

Precedence: a sensitive column is excluded before any list is read (a hash of a password is
still a password's fingerprint); then ``fields.exclude``, ``fields.hash``, ``fields.mask``.

The engine applies a :class:`ColumnRules` (the governance plus what the dictionary said, when it
could be read) to every page's rows in place, before their values are used for anything: dedup
digests, record values, typed conversion, log lines. :func:`governed_columns` is the same
decision for a schema derived from the dictionary (excluded columns absent, hashed and masked
ones strings).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Final

# ``sys_dictionary.internal_type`` values whose columns hold secrets. ServiceNow's own Stream
# Producer leaves these out, and so does snowsource unless ``sensitive.fields: include``.
SENSITIVE_TYPES: Final = frozenset({"password", "password2", "glide_encrypted"})
MASK: Final = "****"
# The internal type a hashed or masked column has for typed values and schemas: its text.
GOVERNED_TYPE: Final = "string"
_MEMO_ENTRIES: Final = 4096


class Action(StrEnum):
    """What happens to one column's value."""

    KEEP = "keep"
    EXCLUDE = "exclude"
    HASH = "hash"
    MASK = "mask"


def hmac_hex(key: bytes, text: str) -> str:
    """Lower-case hex HMAC-SHA256 of ``text``'s UTF-8 bytes under ``key``."""
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


class Hasher:
    """:func:`hmac_hex` under one key, for a hashed column of every row: keyed once (copying
    the keyed state costs a third of building it again), and the last few thousand texts
    remembered (references and emails repeat across rows; the memory holds values this
    process reads anyway, and is dropped whole when full)."""

    __slots__ = ("_keyed", "_memo")

    def __init__(self, key: bytes) -> None:
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)
        self._memo: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        known = self._memo.get(text)
        if known is not None:
            return known
        mac = self._keyed.copy()
        mac.update(text.encode())
        digest = mac.hexdigest()
        if len(self._memo) >= _MEMO_ENTRIES:
            self._memo.clear()
        self._memo[text] = digest
        return digest


@dataclass(frozen=True)
class Governance:
    """One table's governance settings; the default governs nothing but sensitive columns.

    ``protected`` holds the columns that are never governed (the table's cursor fields and
    ``sys_mod_count``). ``hash_key`` is the secret's bytes: kept out of ``repr`` so a spec
    printed in a diagnostic never shows it.
    """

    exclude: tuple[str, ...] = ()
    hash: tuple[str, ...] = ()
    mask: tuple[str, ...] = ()
    sensitive_exclude: bool = True
    protected: frozenset[str] = frozenset()
    hash_key: bytes = field(default=b"", repr=False)

    @property
    def lists(self) -> bool:
        """Whether any of the three lists names a column."""
        return bool(self.exclude or self.hash or self.mask)

    def excluded_by_name(self, column: str) -> bool:
        """Whether a ``fields.exclude`` glob matches ``column`` (never a protected column)."""
        if column in self.protected:
            return False
        return any(fnmatchcase(column, pattern) for pattern in self.exclude)

    def action(self, column: str, internal_type: str | None = None) -> Action:
        """The action for ``column``, whose dictionary type is ``internal_type`` (None: not
        known, because the dictionary does not list it or could not be read)."""
        if column in self.protected:
            return Action.KEEP
        if self.sensitive_exclude and internal_type in SENSITIVE_TYPES:
            return Action.EXCLUDE
        if self.excluded_by_name(column):
            return Action.EXCLUDE
        if column in self.hash:
            return Action.HASH
        if column in self.mask:
            return Action.MASK
        return Action.KEEP


NO_GOVERNANCE: Final = Governance(sensitive_exclude=False)


def governed_columns(columns: Mapping[str, str], governance: Governance) -> dict[str, str]:
    """``element -> internal_type`` as records carry them: excluded columns left out, hashed
    and masked ones typed ``string`` (for a schema, or typed conversion)."""
    out: dict[str, str] = {}
    for name, internal_type in columns.items():
        action = governance.action(name, internal_type)
        if action is Action.EXCLUDE:
            continue
        out[name] = internal_type if action is Action.KEEP else GOVERNED_TYPE
    return out


def governed_projection(fields: Sequence[str], governance: Governance) -> tuple[str, ...]:
    """An explicit ``fields`` projection without the columns ``fields.exclude`` matches, so
    they are never asked of the instance. (Sensitive columns are known only from the
    dictionary, after the request is planned: they are removed from the rows instead.)"""
    return tuple(name for name in fields if not governance.excluded_by_name(name))


def _raw_text(value: Any) -> str:
    """The raw text of a value in any Table API shape (a ``{"value", ...}`` object for
    display values and reference links); "" for a missing or non-text value."""
    if isinstance(value, Mapping):
        value = value.get("value")
    return value if isinstance(value, str) else ""


@dataclass
class ColumnRules:
    """A table's governance applied to rows, with what the dictionary said of its columns.

    ``types`` is ``element -> internal_type`` from the dictionary, or None when it has not been
    (or could not be) read. Decisions are remembered per column name; :meth:`learn` forgets
    them when the dictionary is read again.
    """

    governance: Governance
    types: Mapping[str, str] | None = None
    _decided: dict[str, Action] = field(default_factory=dict, repr=False)
    _hash: Hasher = field(init=False, repr=False)
    _idle: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._hash = Hasher(self.governance.hash_key)
        self.learn(self.types)

    def learn(self, types: Mapping[str, str] | None) -> None:
        """The dictionary's columns (again): every decision is taken anew."""
        self.types = dict(types) if types is not None else None
        self._decided.clear()
        # Nothing to do for any row: no list names a column, and no column the dictionary
        # knows is sensitive (a column it does not know cannot be found sensitive either).
        g = self.governance
        self._idle = not g.lists and not (
            g.sensitive_exclude
            and self.types is not None
            and not SENSITIVE_TYPES.isdisjoint(self.types.values())
        )

    def decide(self, column: str) -> Action:
        """The action for one column (remembered)."""
        action = self._decided.get(column)
        if action is None:
            internal_type = self.types.get(column) if self.types is not None else None
            action = self.governance.action(column, internal_type)
            self._decided[column] = action
        return action

    def governed(self, columns: Iterable[str]) -> list[tuple[str, Action]]:
        """The columns among ``columns`` whose values change, with their action."""
        out: list[tuple[str, Action]] = []
        for name in columns:
            action = self.decide(name)
            if action is not Action.KEEP:
                out.append((name, action))
        return out

    def apply(self, rows: Iterable[MutableMapping[str, Any]]) -> int:
        """Govern ``rows`` in place; the number of values excluded, hashed or masked.

        A governed value becomes a plain string whatever its shape was (a display value or
        reference link of a column must not leave either); an empty one stays ``""``.
        """
        if self._idle:
            return 0
        rows = list(rows)
        if not rows:
            return 0
        names: set[str] = set()
        for row in rows:
            names.update(row)
        changes = self.governed(sorted(names))
        if not changes:
            return 0
        hash_text = self._hash
        done = 0
        for row in rows:
            for name, action in changes:
                if name not in row:
                    continue
                done += 1
                if action is Action.EXCLUDE:
                    del row[name]
                    continue
                text = _raw_text(row[name])
                if not text:
                    row[name] = ""
                elif action is Action.HASH:
                    row[name] = hash_text(text)
                else:
                    row[name] = MASK
        return done


def config_problems(
    *,
    exclude: Sequence[str],
    hash_names: Sequence[str],
    mask: Sequence[str],
    protected: Iterable[str],
) -> list[tuple[str, str]]:
    """``(key, message)`` for every list entry that names a column governance cannot touch,
    and for a column both hashed and masked."""
    kept = sorted(set(protected))
    lists = (("fields.exclude", exclude), ("fields.hash", hash_names), ("fields.mask", mask))
    found = [
        (
            key,
            f"{name!r} cannot be governed: the cursor fields and sys_mod_count "
            f"({', '.join(kept)}) are always sent as they are (the cursor and the dedup cache "
            f"depend on them); remove {name!r} from {key} (on the table, or at the top level "
            "when the table inherits it)",
        )
        for key, names in lists
        for name in names
        if name in kept
    ]
    found.extend(
        (
            "fields.mask",
            f"{name!r} is also in fields.hash: a column is either hashed or masked; "
            "remove it from one of the two lists",
        )
        for name in sorted(set(hash_names) & set(mask))
    )
    return found
