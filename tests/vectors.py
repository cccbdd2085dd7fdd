"""The contract's test vectors, kept in ``tests/data`` (see its README)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TESTDATA = Path(__file__).resolve().parent / "data"


def vector(name: str) -> Any:
    """The parsed JSON file ``tests/data/<name>`` (a fresh copy on each call)."""
    return json.loads((TESTDATA / name).read_text(encoding="utf-8"))
