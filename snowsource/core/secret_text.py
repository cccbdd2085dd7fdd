"""The forms a secret takes in text, and masking them: one rule for logs and config errors.

A secret is looked for as is and in every encoding it can travel in: URL-encoded (form bodies,
query strings), JSON-escaped, as Python ``repr`` shows it inside ``bytes`` (aiokafka's request
dumps) and inside a ``str`` (an error that quotes a value), and base64 alone. Pure: the log
redactor (``observability/redact``) registers its secrets once and builds one pattern from these
forms; a config error masks the secrets of the configuration being loaded with :func:`mask`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, quote_plus

import orjson

REDACTED: Final = "***"
# Shorter forms would blank ordinary words and digits all over the text.
MIN_SECRET_LENGTH: Final = 3


def encodings(value: str) -> set[str]:
    """Every form of ``value`` worth looking for (none shorter than ``MIN_SECRET_LENGTH``)."""
    forms = {
        value,
        quote(value, safe=""),
        quote_plus(value, safe=""),
        orjson.dumps(value).decode()[1:-1],
        repr(value)[1:-1],
        repr(value.encode())[2:-1],
        base64.b64encode(value.encode()).decode(),
    }
    return {f for f in forms if len(f) >= MIN_SECRET_LENGTH}


def mask(text: str, values: Iterable[str]) -> str:
    """``text`` with every form of each of ``values`` as ``***``.

    A value too short to look for bare is still masked where it is quoted (``'ab'``), as an
    error shows the value it refused.
    """
    forms: set[str] = set()
    for value in values:
        if value:
            forms |= encodings(value)
            forms.add(repr(value))
    # Longest first, so a secret that contains another one is masked whole.
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text
