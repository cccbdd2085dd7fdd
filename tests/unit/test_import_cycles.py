"""No import cycle anywhere in the package (emulator included) or the benchmarks, counting
every import statement.

An import inside a function or under ``TYPE_CHECKING`` still ties two modules together; it only
hides the knot from the interpreter. So every ``import`` node counts here, wherever it sits.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = (ROOT / "snowsource", ROOT / "bench")


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _targets(
    node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: set[str]
) -> set[str]:
    """The project modules one import statement depends on.

    ``from pkg import name`` depends on ``pkg.name`` when that is a module, else on ``pkg``
    itself; the parent packages every import runs implicitly are not counted (otherwise each
    package whose ``__init__`` re-exports a child would be a cycle).
    """
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if node.level:
        # ``from . import x`` inside a.b.c means a.b; inside a package's __init__ it means a.b.c.
        anchor = importer.split(".")
        prefix = ".".join(anchor[: len(anchor) - node.level + (1 if is_package else 0)])
        base = f"{prefix}.{node.module}" if node.module else prefix
    else:
        base = node.module or ""
    return {
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
        for alias in node.names
    }


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same top-level tree it imports (any import statement)."""
    base = package_dir.parent
    while (base / "__init__.py").exists():
        base = base.parent
    files = {
        _module_name(p, base): p for p in package_dir.rglob("*.py") if "__pycache__" not in p.parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges |= _targets(node, name, is_package, set(files))
        graph[name] = {target for target in edges if target in files and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package_dir", CHECKED, ids=lambda p: p.name)
def test_no_import_cycle(package_dir: Path) -> None:
    found = cycles(import_graph(package_dir))
    assert not found, f"import cycles in {package_dir.name}: {found}"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("importer", "statement"),
    [
        ("a.py", "from pkg.sub import b\n"),
        ("a.py", "def late():\n    from pkg.sub.b import thing  # noqa: PLC0415\n"),
        ("a.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.sub.b\n"),
        ("a.py", "from .b import thing\n"),
        ("a.py", "from . import b\n"),
    ],
    ids=["from-package", "in-function", "type-checking", "relative", "relative-package"],
)
def test_the_check_sees_hidden_cycles(tmp_path: Path, importer: str, statement: str) -> None:
    """The detector itself: a cycle however it is written is found; a chain is not a cycle."""
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/sub/b.py": "from pkg.sub.c import x\n",
            "pkg/sub/c.py": "from pkg.sub.a import y\n",
            f"pkg/sub/{importer}": statement,
        },
    )
    assert cycles(import_graph(tmp_path / "pkg" / "sub")) == [
        ["pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]
    ]
    (tmp_path / "pkg" / "sub" / "c.py").write_text("import json\n", encoding="utf-8")
    assert cycles(import_graph(tmp_path / "pkg" / "sub")) == []
