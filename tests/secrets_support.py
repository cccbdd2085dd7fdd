"""The redactor's secret registry emptied for one test, and put back as it was after it.

The registry is process-wide by design (every log line and REST body goes through it); a test
that asserts what is or is not masked needs to start from nothing, without forgetting what
other tests registered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from snowsource.observability import redact


@contextlib.contextmanager
def empty_secret_registry() -> Iterator[None]:
    """Within the block the registry knows no secret; afterwards it knows what it knew."""
    # The registry's own state: there is no product API to forget secrets, and none is wanted.
    with redact._lock:
        saved = (set(redact._static), list(redact._transient))
    _replace(set(), [])
    try:
        yield
    finally:
        _replace(*saved)


def _replace(static: set[str], transient: list[str]) -> None:
    with redact._lock:
        redact._static.clear()
        redact._static.update(static)
        redact._transient.clear()
        redact._transient.extend(transient)
        redact._rebuild()
