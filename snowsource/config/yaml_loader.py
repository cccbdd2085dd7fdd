"""Reading the config file: safe YAML, timestamps kept as text, duplicates and alias bombs refused.

PyYAML shares the node of an anchor between its aliases, so a 600-byte file of nested aliases
("billion laughs") composes instantly but expands to billions of nodes for whoever walks the
result — the duplicate-key check, pydantic, the effective-config log. The loader counts the
expanded size while composing (each node's size is remembered, so the count itself costs one
pass over the text) and stops at the first alias past ``MAX_EXPANDED_NODES``. Nesting is bounded
too: the composer recurses per level, and a file of ten thousand ``[`` would otherwise end in a
RecursionError instead of a message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import yaml
from yaml.events import AliasEvent

from snowsource.core.errors import ConfigError

MAX_EXPANDED_NODES: Final = 10_000
# A configuration is six levels deep; a hundred leaves room for lists of mappings.
MAX_DEPTH: Final = 100
CONFIG_HINT: Final = "pass --config PATH or set SNOWSOURCE_CONFIG"


class ConfigFileNotFoundError(ConfigError):
    """The config file does not exist: said as such, not as an invalid configuration."""

    def __init__(self, path: Path, hint: str) -> None:
        self.path = path
        super().__init__([("", f"config file not found: {path} ({hint})")])

    def __str__(self) -> str:
        return self.problems[0][1]


class _RefusedError(Exception):
    def __init__(self, line: int, reason: str) -> None:
        super().__init__(line, reason)
        self.line = line
        self.reason = reason


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps ``1970-01-01 00:00:00`` a string and bounds alias expansion."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}
        self._expanded = 0
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        # The composer recurses per level: refuse deep nesting before Python's stack does.
        if self._depth >= MAX_DEPTH:
            raise _RefusedError(
                line, f"nested more than {MAX_DEPTH} levels deep (a configuration needs six)"
            )
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is None:
            return None
        if isinstance(event, AliasEvent):
            self._aliases += 1
            size = self._sizes.get(id(node))
            if size is None:
                # The anchor is still being composed: the alias sits inside its own anchor.
                raise _RefusedError(
                    line,
                    "an alias refers to its own anchor (a recursive structure): "
                    "write the values out",
                )
            self._expanded += size
        else:
            self._expanded += 1
            self._sizes[id(node)] = 1 + sum(self._sizes[id(child)] for child in _children(node))
        # Without aliases the count is the size of the text, which is not what is bounded.
        if self._aliases and self._expanded > MAX_EXPANDED_NODES:
            raise _RefusedError(
                line,
                f"anchors and aliases expand to more than {MAX_EXPANDED_NODES} nodes: "
                "write the values out",
            )
        return node


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def _duplicate_keys(
    node: yaml.Node | None, path: tuple[str, ...], problems: list[tuple[str, str]]
) -> None:
    # PyYAML keeps the last of two equal keys silently; a duplicated table alias or key is
    # almost always a copy-paste mistake, so it is an error.
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key == "<<":
                continue
            if key in seen:
                line = key_node.start_mark.line + 1
                problems.append(
                    (".".join((*path, key)), f"duplicate key (again on line {line}): keep one")
                )
            seen.add(key)
            _duplicate_keys(value_node, (*path, key), problems)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _duplicate_keys(item, (*path, str(index)), problems)


def read_yaml(path: Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Parse the file; returns the document and its duplicate-key problems.

    Raises ``ConfigFileNotFoundError`` for a missing file and ``ConfigError`` for one that
    cannot be read or parsed.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileNotFoundError(path, CONFIG_HINT) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([("", f"cannot read config file {str(path)!r}: {reason}")]) from None
    problems: list[tuple[str, str]] = []
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        _duplicate_keys(node, (), problems)
        document = loader.construct_document(node) if node is not None else None
    except _RefusedError as exc:
        raise ConfigError(
            [("", f"{path}: YAML refused at line {exc.line}: {exc.reason}")]
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError([("", f"{path}: YAML syntax error{where}: {what}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"{path}: YAML error: {exc}")]) from None
    finally:
        loader.dispose()
    if document is None:
        return {}, problems
    if not isinstance(document, dict):
        raise ConfigError(
            [("", f"{path}: the top level must be a mapping of keys (name:, snow:, ...)")]
        )
    return document, problems
