"""The layout is the architecture: dependencies point one way (cli -> api/engine -> adapters ->
runtime -> core), and the pure core imports no I/O library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "snowsource"
IO_LIBRARIES = {"asyncio", "aiohttp", "aiokafka", "socket", "ssl", "structlog", "prometheus_client"}
# What each layer may import from the project (besides itself); the emulator is its own world.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "config": {"core"},
    "runtime": {"core"},
    "observability": {"core", "config"},
    "adapters": {"core", "runtime", "observability"},
    "engine": {"core", "config", "runtime", "adapters", "observability"},
    "api": {"core", "config", "runtime", "adapters", "observability", "engine"},
    # The demo drives the daemon as a process; it reads Kafka and ServiceNow itself.
    "demo": {"core", "config", "runtime", "adapters", "observability"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("core"), ids=lambda p: p.name)
def test_core_imports_no_io_library(path: Path) -> None:
    roots = {name.split(".")[0] for name in _imports(path)}
    assert not roots & IO_LIBRARIES, f"{path.name} imports {sorted(roots & IO_LIBRARIES)}"


@pytest.mark.parametrize(
    "path",
    [p for layer in ALLOWED for p in _modules(layer)],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_dependencies_point_one_way(path: Path) -> None:
    layer = path.relative_to(PACKAGE).parts[0]
    allowed = ALLOWED[layer] | {layer}
    used = {
        name.split(".")[1]
        for name in _imports(path)
        if name.startswith("snowsource.") and name.count(".") >= 1
    }
    extra = used - allowed
    assert not extra, f"{layer}/{path.name} imports layers {sorted(extra)}"


def test_every_module_lives_in_a_layer() -> None:
    loose = sorted(
        p.name for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py", "__main__.py"}
    )
    assert not loose, f"modules outside a layer package: {loose}"
