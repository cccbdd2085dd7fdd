"""Shared test vectors from ``../shared/testdata`` (relative to the repository root)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TESTDATA = REPO / ".." / "shared" / "testdata"


def vector(name: str) -> Any:
    """The parsed JSON file ``<repo>/../shared/testdata/<name>`` (a fresh copy on each call)."""
    return json.loads((TESTDATA / name).read_text(encoding="utf-8"))
