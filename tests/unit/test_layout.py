"""The layout is the architecture: dependencies point one way (cli -> api/engine -> adapters ->
runtime -> core), the pure core imports no I/O library, the API sees the engine's facade and
never an adapter, the configuration or the wiring, only the wiring and the supervisor build
adapters, and no product function is longer than a screen (import cycles:
``test_import_cycles.py``)."""

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
    # The API reads everything through the engine's facade (``engine.facade``): no config.
    "api": {"core", "runtime", "observability", "engine"},
    # The demo drives the daemon as a process; it reads Kafka and ServiceNow itself.
    "demo": {"core", "config", "runtime", "adapters", "observability"},
    # The emulator is its own world: a fake ServiceNow that shares only the redactor.
    "emulator": {"observability"},
    # The command line composes everything; nothing imports it.
    "cli": {"core", "config", "runtime", "adapters", "observability", "engine", "api", "emulator"},
}
# The API sees the engine through its facade, never an adapter, the configuration or the wiring.
API_FORBIDDEN = {"snowsource.adapters", "snowsource.config", "snowsource.engine.wiring"}
# The engine modules that build adapters from the configuration, and orchestrate them.
ADAPTER_BUILDERS = {"wiring.py", "supervisor.py"}
#: The longest a product function may be, in lines from ``def`` to its end, its docstring
#: counted as ruff counts it (PLR0915 counts a docstring as a statement; it counts statements,
#: which lets a function of long calls grow, hence this rule beside it).
MAX_FUNCTION_LINES = 60


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


@pytest.mark.parametrize("path", _modules("api"), ids=lambda p: p.name)
def test_the_api_imports_no_adapter_config_or_wiring(path: Path) -> None:
    used = {
        name
        for name in _imports(path)
        if any(name == bad or name.startswith(f"{bad}.") for bad in API_FORBIDDEN)
    }
    assert not used, f"api/{path.name} imports {sorted(used)}"


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_imports_are_absolute(path: Path) -> None:
    """The rules above read absolute imports only: a relative one would slip past them."""
    relative = [
        f"{node.module}:{node.lineno}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert not relative, f"{path.relative_to(PACKAGE)} imports relatively: {relative}"


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_only_the_wiring_and_the_supervisor_import_adapters(path: Path) -> None:
    if path.name in ADAPTER_BUILDERS:
        return
    used = {name for name in _imports(path) if name.startswith("snowsource.adapters")}
    assert not used, (
        f"engine/{path.name} imports {sorted(used)}; only engine/wiring.py builds adapters "
        f"(the supervisor orchestrates them): take a port (engine/ports.py) or a value instead"
    )


def _function_lengths(path: Path) -> list[tuple[str, int]]:
    return [
        (f"{node.name}:{node.lineno}", (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_the_length_rule_sees_a_long_function_docstring_included(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 2))
    source = tmp_path / "long.py"
    source.write_text(f'def long():\n    """Doc."""\n{body}\n')
    assert _function_lengths(source) == [("long:1", MAX_FUNCTION_LINES)]
    source.write_text(f'def long():\n    """Doc.\n\n    More.\n    """\n{body}\n')
    assert _function_lengths(source) == [("long:1", MAX_FUNCTION_LINES + 3)]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_product_function_is_longer_than_a_screen(path: Path) -> None:
    long = [(name, n) for name, n in _function_lengths(path) if n > MAX_FUNCTION_LINES]
    assert not long, (
        f"{path.relative_to(PACKAGE)}: functions over {MAX_FUNCTION_LINES} lines: {long}"
    )


def _calls(path: Path, names: set[str]) -> list[str]:
    return [
        f"{node.func.attr}:{node.lineno}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
    ]


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_the_engine_asks_servicenow_through_one_request_path(path: Path) -> None:
    """SPEC §15.3: one retry policy for every ServiceNow request, so one module sends them."""
    if path.name == "snow_requests.py":
        assert _calls(path, {"get_page"}), "the request path sends the requests"
        return
    if path.name == "dictionary_reader.py":
        return  # handed a page source: the request path in the daemon, the client in check
    sent = _calls(path, {"get_page", "get_json"})
    assert not sent, f"engine/{path.name} asks ServiceNow itself: {sent}"


# Callbacks still set on another object after its construction: none (the sliced backfill
# waits for its table's first offset on an event, and a page's transaction offset is built
# into its plan); the set only shrinks.
CALLBACKS_SET_LATE: set[tuple[str, str]] = set()


def _package_functions() -> set[str]:
    return {
        node.name
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)
    }


def test_no_callback_is_assigned_on_another_object_after_construction() -> None:
    """A callback is passed to the constructor (``GroupOwner(join=...)``), never set later
    (``owner.rejoin = membership.request_rejoin``): an object is whole once built."""
    functions = _package_functions()
    found: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if "emulator" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if not isinstance(target, ast.Attribute) or (
                    isinstance(target.value, ast.Name) and target.value.id == "self"
                ):
                    continue
                value = node.value
                if (
                    isinstance(value, ast.Lambda)
                    or target.attr.startswith("on_")
                    or (isinstance(value, ast.Attribute) and value.attr in functions)
                ):
                    found.add((str(path.relative_to(PACKAGE)), target.attr))
    assert found == CALLBACKS_SET_LATE
