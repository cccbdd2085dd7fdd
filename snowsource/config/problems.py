"""From pydantic's errors to the user's problems: ``(dotted key path, what is allowed)``.

A value is echoed back (``(got 'yesterday')``) only where that is safe: never for a secret key,
never for a key the model does not know (it may be a misspelt secret: ``pasword: hunter2``),
never for a whole section that holds secrets, never under an ``auth``/``sasl`` key (a secret
pasted one line off: ``sasl.mechanism: <password>``), and URLs always with their userinfo
masked. As the last line of defence, every value that equals a configured secret is masked
wherever it appears in a problem (:func:`safe_problems`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from snowsource.config.fields import PROBLEMS_ERROR
from snowsource.config.models import Settings
from snowsource.config.redaction import mask_userinfo
from snowsource.config.schema import (
    Loc,
    aliased_loc,
    dict_model_of,
    field_at,
    holds_secret,
    is_secret,
    keys_with_files,
    model_at,
    model_of,
)
from snowsource.core.secret_text import mask


def dotted(loc: Iterable[str | int]) -> str:
    """``('snow', 'tables', 'incident', 'fields', 1)`` as ``snow.tables.incident.fields[1]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else part
    return out


# Keys next to credentials: a value there may be a secret in the wrong key.
_CREDENTIAL_KEYS = frozenset({"auth", "sasl"})


def _near_credentials(loc: Loc) -> bool:
    """Whether ``loc`` is under an ``auth``/``sasl`` key (``snow.auth.*``, ``kafka.sasl.*``,
    ``rest.auth.token``)."""
    return any(isinstance(part, str) and part.split(".")[0] in _CREDENTIAL_KEYS for part in loc)


def _may_echo(loc: Loc) -> bool:
    """Whether the value at ``loc`` may be shown in an error."""
    if not loc or _near_credentials(loc):
        return False
    info = field_at(Settings, loc)
    if info is None:
        # An unknown key (maybe a misspelt secret) is never shown; a table alias or an item
        # of a list of names is.
        parent = field_at(Settings, loc[:-1])
        if parent is None or is_secret(parent.annotation):
            return False
        return isinstance(loc[-1], int) or dict_model_of(parent.annotation) is not None
    if is_secret(info.annotation):
        return False
    section = model_of(info.annotation) or dict_model_of(info.annotation)
    return section is None or not holds_secret(section)


def _describe(error: Mapping[str, Any], loc: Loc) -> str:
    kind = error["type"]
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        model = model_at(Settings, loc[:-1])
        if model is None:
            return "unknown key"
        allowed = keys_with_files(model)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        suggestion = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key: {suggestion}allowed here: {', '.join(allowed)}"
    message = str(error["msg"])
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = "must be a mapping (a YAML section of keys)"
    elif kind == "list_type":
        message = "must be a list (in YAML: [a, b] or one '- item' per line)"
    elif kind == "string_type" and isinstance(error.get("input"), int | float | bool):
        message = "must be a string: quote the value in YAML"
    given = error.get("input")
    if kind != "string_type" and isinstance(given, str | int | float | bool) and _may_echo(loc):
        shown = mask_userinfo(given) if isinstance(given, str) else given
        message += f" (got {shown!r})"
    return message


def validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """Every error of ``exc`` as ``(key path, message)``, in pydantic's order."""
    problems: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        loc: Loc = tuple(error["loc"])
        if loc and loc[-1] == "[key]":
            # A dict key (a table alias) failed: report it at the alias itself.
            loc = loc[:-1]
        if error["type"] != "extra_forbidden":
            # An unknown key is the user's own spelling (maybe a field name): keep it.
            loc = aliased_loc(Settings, loc)
        if error["type"] == PROBLEMS_ERROR:
            for sub, message in error["ctx"]["problems"]:
                problems.append((dotted((*loc, sub)), message))
            continue
        message = _describe(error, loc)
        given = error.get("input")
        if isinstance(given, str) and _near_credentials(loc):
            # A validator's own message may quote its input (``'x' is not host:port``).
            message = mask(message, (given,))
        problems.append((dotted(loc), message))
    return problems


def safe_problems(
    problems: Iterable[tuple[str, str]], secrets: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """Problems without repeats, URL credentials and every value equal to one of ``secrets``
    (the configured secrets) masked: the last line of defence."""
    known = tuple(secrets)
    unique = dict.fromkeys(
        (mask(path, known), mask(mask_userinfo(message), known)) for path, message in problems
    )
    return list(unique)
