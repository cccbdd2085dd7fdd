"""``snowsource config import FILE``: print the YAML equivalent of a Kafka Connect connector config.

The file is the connector's JSON as Connect's REST API takes it (flat, or wrapped as
``{"name": ..., "config": {...}}``), or a standalone worker's ``.properties`` connector file.
Exit 0 with the YAML on stdout (a comment for every key that could not be mapped), 2 when the
file cannot be read as a config of either the Java ServiceNow connector or Confluent's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from snowsource.core.connector_import import import_connector, render_yaml, unwrap
from snowsource.core.errors import ConnectorImportError

EXIT_OK = 0
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="snowsource config", description="Work with configuration files."
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    imp = sub.add_parser(
        "import",
        help="print the snowsource YAML for a Kafka Connect ServiceNow connector config",
        description="Read a Java ServiceNow source connector or Confluent ServiceNow source "
        "connector config (JSON, flat or {name, config}; or .properties) and print the "
        "equivalent snowsource YAML, with a comment on every key that could not be mapped.",
    )
    imp.add_argument("file", metavar="FILE", help="the connector config to import")
    imp.add_argument(
        "--include-secrets",
        action="store_true",
        help="copy passwords and client secrets into the YAML (default: name the environment "
        "variable that provides each instead)",
    )
    return parser


def _properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` file: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments."""
    out: dict[str, str] = {}
    pending = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        entry, pending = pending + stripped, ""
        cut = min((i for i in (entry.find("="), entry.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ConnectorImportError(f"line {number} is not key=value")
        out[entry[:cut].strip()] = entry[cut + 1 :].strip()
    return out


def read_connector_config(path: Path) -> Any:
    """The parsed content of ``path``; raises ``ConnectorImportError`` saying what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConnectorImportError("no such file") from None
    except UnicodeDecodeError:
        raise ConnectorImportError("not UTF-8 text") from None
    except OSError as exc:
        raise ConnectorImportError(f"cannot be read ({exc.strerror})") from None
    if text.lstrip().startswith(("{", "[")):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ConnectorImportError(f"not valid JSON ({exc})") from None
    return _properties(text)


def import_file(path: Path, *, include_secrets: bool = False) -> str:
    """The YAML for the connector config in ``path``."""
    data = read_connector_config(path)
    imported = import_connector(data, include_secrets=include_secrets)
    return render_yaml(imported, unwrap(data), path.name)


def main(argv: Sequence[str]) -> int:
    """Entry point of ``snowsource config``."""
    parser = _parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return EXIT_OK if exc.code in (0, None) else EXIT_USAGE
    path = Path(args.file)
    try:
        text = import_file(path, include_secrets=args.include_secrets)
    except ConnectorImportError as exc:
        print(
            f"snowsource config import: {path}: {exc}; expected a Kafka Connect connector "
            "config of the Java ServiceNow source connector (snow.* keys) or Confluent's "
            "ServiceNow source connector (servicenow.* keys), as JSON or .properties",
            file=sys.stderr,
        )
        return EXIT_USAGE
    sys.stdout.write(text)
    return EXIT_OK
