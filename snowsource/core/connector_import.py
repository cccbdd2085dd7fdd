"""A Kafka Connect connector config mapped to snowsource's YAML (``snowsource config import``).

Pure. Two dialects are understood: the Java ServiceNow source connector whose offsets snowsource
adopts (``snow.url``, ``snow.tables``, ``snow.table.<alias>.*``, ``snow.auth.*``, ...) and
Confluent's ServiceNow source connector (``servicenow.url``, ``servicenow.table``,
``kafka.topic``, ...). Every key is either mapped or reported with the reason it was not, so the
printed YAML can carry a comment for each. Secret values are not copied unless asked for: the
YAML then names the environment variable or ``.file`` key that provides them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Final, Literal

import yaml

from snowsource.core.connect_transforms import is_transform_key, map_transforms
from snowsource.core.connector_registry_import import registry_keys
from snowsource.core.errors import ConnectorImportError
from snowsource.core.secret_text import mask

Dialect = Literal["java", "confluent"]

_TABLE_NAME_RE: Final = re.compile(r"[A-Za-z0-9_]+")
_SINCE_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# Our secret keys (never printed unless asked for), and words that mark a source key whose
# value must not be echoed in a comment.
_SECRET_TARGETS: Final = frozenset({"password", "oauth.client.secret", "api.key"})
_SECRET_WORDS: Final = (
    "password",
    "secret",
    "api.key",
    "apikey",
    "token",
    "license",
    "credential",
    "user.info",
)
_FRAMEWORK_KEYS: Final = {
    "connector.class": "not needed: snowsource is the connector",
    "key.converter": "snowsource writes the row's id as a UTF-8 string key",
    "value.converter": "snowsource writes JSON values (see value.format and value.schema) or, "
    "with an Avro or JSON Schema converter, value.format: avro | json_schema",
    "key.converter.schemas.enable": "snowsource writes string keys",
    "value.converter.schemas.enable": "use value.schema: connect for the JsonConverter envelope",
    "header.converter": "snowsource writes UTF-8 string headers",
}
_FRAMEWORK_PREFIXES: Final = {
    "predicates": "single message transforms are not supported",
    "errors.": "snowsource FAILs a table with a diagnostic instead of an error policy",
    "producer.override.": "set producer options under kafka: in the YAML",
    "confluent.": "Confluent licensing and its own topic are not needed",
}


class Omitted:
    """A secret deliberately left out of the YAML; rendered as a comment naming how to set it."""

    def __init__(self, hint: str) -> None:
        self.hint = hint

    def __repr__(self) -> str:
        return f"Omitted({self.hint!r})"


@dataclass
class Imported:
    """The mapped document (nested, in YAML key order), and every key that was not mapped."""

    dialect: Dialect
    document: dict[str, Any]
    unmapped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def unwrap(data: Any) -> dict[str, Any]:
    """The flat config map of a flat or ``{"name": ..., "config": {...}}`` document."""
    if not isinstance(data, Mapping):
        raise ConnectorImportError("expected a JSON object of connector settings")
    if isinstance(data.get("config"), Mapping):
        inner = dict(data["config"])
        extra = set(data) - {"name", "config", "tasks", "type"}
        if extra:
            raise ConnectorImportError(
                f"a wrapped connector config has only name and config, not {sorted(extra)}"
            )
        if "name" in data:
            inner.setdefault("name", data["name"])
        return inner
    return dict(data)


def detect(config: Mapping[str, Any]) -> Dialect:
    """Which connector wrote ``config``; raises :class:`ConnectorImportError` when neither did."""
    java = any(k.startswith("snow.") for k in config)
    confluent = any(k.startswith("servicenow.") for k in config)
    if java and confluent:
        raise ConnectorImportError("the config mixes snow.* (Java connector) and servicenow.* keys")
    if java:
        return "java"
    if confluent:
        return "confluent"
    raise ConnectorImportError(
        "no snow.* (Java ServiceNow connector) or servicenow.* (Confluent) keys found"
    )


def _secret_key(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def _env_name(path: str) -> str:
    """``snow.auth.password`` -> ``SNOWSOURCE_SNOW__AUTH__PASSWORD`` (the documented mapping)."""
    sections = {"snow", "auth", "http", "kafka", "rest", "log"}
    out: list[str] = []
    buffer: list[str] = []
    for part in path.split("."):
        if part in sections and not buffer:
            out.append(part)
        else:
            buffer.append(part)
    if buffer:
        out.append("_".join(buffer))
    return "SNOWSOURCE_" + "__".join(p.upper() for p in out)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _as_int(value: Any) -> int:
    text = _text(value)
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ValueError(f"{text!r} is not a whole number")
    return int(text)


def _as_bool(value: Any) -> bool:
    text = _text(value).lower()
    if text not in ("true", "false"):
        raise ValueError(f"{_text(value)!r} is not true or false")
    return text == "true"


def _as_list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [_text(v) for v in value if _text(v)]
    return [part.strip() for part in _text(value).split(",") if part.strip()]


def _as_text(value: Any) -> str:
    return _text(value)


def _as_display(value: Any) -> str:
    text = _text(value).lower()
    if text not in ("true", "false", "all"):
        raise ValueError(f"{_text(value)!r} is not one of false, true, all")
    return text


Convert = Callable[[Any], Any]
_TABLE_KEYS: Final[dict[str, Convert]] = {
    "name": _as_text,
    "topic": _as_text,
    "query": _as_text,
    "query.domain": _as_bool,
    "query.category": _as_text,
    "timestamp.field": _as_text,
    "id.field": _as_text,
    "fields": _as_list,
    "display.value": _as_display,
    "exclude.reference.link": _as_bool,
    "start.timestamp": _as_text,
    "batch.size": _as_int,
    "poll.interval.ms": _as_int,
    "overlap.seconds": _as_int,
    "safety.lag.seconds": _as_int,
}
_AUTH_KEYS: Final[dict[str, Convert]] = {
    "type": lambda v: _text(v).lower(),
    "username": _as_text,
    "password": _as_text,
    "oauth.grant.type": lambda v: _text(v).lower(),
    "oauth.client.id": _as_text,
    "oauth.client.secret": _as_text,
    "oauth.token.url": _as_text,
    "api.key": _as_text,
}
_HTTP_KEYS: Final[dict[str, Convert]] = {
    "connect.timeout.ms": _as_int,
    "request.timeout.ms": _as_int,
    "max.concurrent.requests": _as_int,
    "retry.initial.backoff.ms": _as_int,
    "retry.max.backoff.ms": _as_int,
    "proxy.url": _as_text,
    "ca.file": _as_text,
}
_JAVA_TOP_KEYS: Final[dict[str, tuple[list[str], Convert]]] = {
    "name": (["name"], _as_text),
    "tasks.max": (["tasks.max"], _as_int),
    "topic.prefix": (["topic.prefix"], _as_text),
    "batch.size": (["batch.size"], _as_int),
    "poll.interval.ms": (["poll.interval.ms"], _as_int),
    "snow.source.overlap.seconds": (["overlap.seconds"], _as_int),
    "overlap.seconds": (["overlap.seconds"], _as_int),
    "safety.lag.seconds": (["safety.lag.seconds"], _as_int),
    "snow.source.safety.lag.seconds": (["safety.lag.seconds"], _as_int),
    # A connector's own offsets topic (KIP-618); otherwise the worker's offset.storage.topic.
    "offsets.storage.topic": (["offset.storage.topic"], _as_text),
    "snow.url": (["snow", "url"], _as_text),
}


class _Builder:
    """Collects mapped values into the nested document and the reasons for the rest."""

    def __init__(self, dialect: Dialect, *, include_secrets: bool) -> None:
        self.result = Imported(dialect=dialect, document={})
        self.include_secrets = include_secrets

    def put(self, path: list[str], value: Any) -> None:
        node = self.result.document
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value

    def skip(self, key: str, reason: str) -> None:
        self.result.unmapped.append((key, reason))

    def convert(self, key: str, raw: Any, convert: Convert, path: list[str]) -> None:
        """Map one value; a secret becomes an :class:`Omitted` unless secrets are included."""
        if isinstance(raw, dict | list) and convert is not _as_list:
            self.skip(key, "expected a single value")
            return
        if path[-1] in _SECRET_TARGETS and not self.include_secrets:
            dotted = ".".join(path)
            self.put(
                path,
                Omitted(
                    f"secret not copied: set {_env_name(dotted)}, or {path[-1]}.file: "
                    "<a file holding it>"
                ),
            )
            return
        if isinstance(raw, str) and raw.strip().startswith("${"):
            self.skip(key, "a Connect config provider reference: put the value itself here")
            return
        try:
            self.put(path, convert(raw))
        except ValueError as exc:
            self.skip(key, str(exc))

    def framework(self, key: str) -> bool:
        """Report a Connect framework key; True when ``key`` was one."""
        if key in _FRAMEWORK_KEYS:
            self.skip(key, _FRAMEWORK_KEYS[key])
            return True
        for prefix, reason in _FRAMEWORK_PREFIXES.items():
            if key.startswith(prefix):
                self.skip(key, reason)
                return True
        return False

    def topic_creation(self, key: str, raw: Any) -> bool:
        """Connect's ``topic.creation.default.*`` keys; True when ``key`` was one."""
        prefix = "topic.creation.default."
        if not key.startswith(prefix):
            if key.startswith("topic.creation."):
                self.skip(key, "only the default topic creation group can be mapped")
                return True
            return False
        option = key[len(prefix) :]
        if option == "partitions":
            self.convert(key, raw, _as_int, ["topic.creation.partitions"])
        elif option == "replication.factor":
            self.convert(key, raw, _as_int, ["topic.creation.replication.factor"])
        elif option in ("include", "exclude"):
            self.skip(key, "snowsource applies topic creation settings to every output topic")
        else:
            configs = self.result.document.setdefault("topic.creation.configs", {})
            configs[option] = _text(raw)
        return True


def _alias_for(original: str) -> str:
    alias = re.sub(r"[^a-z0-9_]", "_", original.lower())
    return alias or "table"


def _java(config: Mapping[str, Any], builder: _Builder) -> None:
    aliases_raw = config.get("snow.tables")
    aliases = _as_list(aliases_raw) if aliases_raw is not None else []
    renamed = {original: _alias_for(original) for original in aliases}
    prefix = _text(config.get("topic.prefix", "servicenow."))
    for original, alias in renamed.items():
        builder.put(["snow", "tables", alias], {})
        if alias != original and f"snow.table.{original}.topic" not in config:
            # The alias decides the default topic: keep the topic the Java connector wrote to.
            builder.put(["snow", "tables", alias, "topic"], prefix + original)
            builder.result.notes.append(
                f"table alias {original!r} became {alias!r} (aliases are lower case "
                "[a-z0-9_]); its topic is kept"
            )
    for key, raw in config.items():
        if key != "snow.tables":
            _java_key(key, raw, renamed, builder)
    tables = builder.result.document.get("snow", {}).get("tables", {})
    for original, alias in renamed.items():
        if "name" not in tables.get(alias, {}):
            # The partition hashes the table name: guessing it wrong means a new backfill.
            tables[alias]["name"] = original
            builder.result.notes.append(
                f"snow.table.{original}.name is not set: assumed table {original!r}; check it, "
                "the source partition depends on it"
            )
    if not aliases:
        builder.skip("snow.tables", "missing: list the table aliases, comma-separated")


def _java_key(key: str, raw: Any, renamed: Mapping[str, str], builder: _Builder) -> None:
    """One key of the Java connector's configuration (other than ``snow.tables``)."""
    if key in _JAVA_TOP_KEYS:
        target, convert = _JAVA_TOP_KEYS[key]
        builder.convert(key, raw, convert, target)
    elif key.startswith("snow.auth."):
        option = key[len("snow.auth.") :]
        if option in _AUTH_KEYS:
            builder.convert(key, raw, _AUTH_KEYS[option], ["snow", "auth", option])
        else:
            builder.skip(key, f"unknown auth option (known: {', '.join(_AUTH_KEYS)})")
    elif key.startswith("snow.http."):
        option = key[len("snow.http.") :]
        if option in _HTTP_KEYS:
            builder.convert(key, raw, _HTTP_KEYS[option], ["snow", "http", option])
        else:
            builder.skip(key, "unknown HTTP option")
    elif key.startswith("snow.table."):
        _java_table_key(key, raw, renamed, builder)
    elif not builder.framework(key) and not builder.topic_creation(key, raw):
        builder.skip(key, "no snowsource equivalent")


def _java_table_key(key: str, raw: Any, renamed: Mapping[str, str], builder: _Builder) -> None:
    rest = key[len("snow.table.") :]
    original, _, option = rest.partition(".")
    if original not in renamed:
        builder.skip(key, f"table alias {original!r} is not listed in snow.tables")
    elif option not in _TABLE_KEYS:
        builder.skip(key, "unknown table option")
    else:
        builder.convert(
            key, raw, _TABLE_KEYS[option], ["snow", "tables", renamed[original], option]
        )


def _since(value: Any) -> str:
    text = _text(value)
    if not _SINCE_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a yyyy-MM-dd date")
    try:
        date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a calendar date") from None
    return f"{text} 00:00:00"


def _seconds_to_ms(value: Any) -> int:
    return _as_int(value) * 1000


def _confluent(config: Mapping[str, Any], builder: _Builder) -> None:
    table = _text(config.get("servicenow.table", ""))
    alias = _alias_for(table) if table else ""
    if not table:
        builder.skip("servicenow.table", "missing: the table to read")
    elif not _TABLE_NAME_RE.fullmatch(table):
        builder.skip("servicenow.table", f"{table!r} is not a table name")
        alias = ""
    else:
        builder.put(["snow", "tables", alias, "name"], table)
    table_keys: dict[str, tuple[str, Convert]] = {
        "kafka.topic": ("topic", _as_text),
        "servicenow.since": ("start.timestamp", _since),
    }
    top_keys: dict[str, tuple[list[str], Convert]] = {
        "name": (["name"], _as_text),
        "tasks.max": (["tasks.max"], _as_int),
        "servicenow.url": (["snow", "url"], _as_text),
        "servicenow.username": (["snow", "auth", "username"], _as_text),
        "servicenow.user": (["snow", "auth", "username"], _as_text),
        "servicenow.password": (["snow", "auth", "password"], _as_text),
        "batch.max.rows": (["batch.size"], _as_int),
        "poll.interval.s": (["poll.interval.ms"], _seconds_to_ms),
        "servicenow.proxy.url": (["snow", "http", "proxy.url"], _as_text),
    }
    for key, raw in config.items():
        if key == "servicenow.table":
            continue
        if key in table_keys:
            if alias:
                option, convert = table_keys[key]
                builder.convert(key, raw, convert, ["snow", "tables", alias, option])
            else:
                builder.skip(key, "no table to apply it to")
        elif key in top_keys:
            path, convert = top_keys[key]
            builder.convert(key, raw, convert, path)
        elif not builder.framework(key) and not builder.topic_creation(key, raw):
            builder.skip(key, "no snowsource equivalent")


def import_connector(data: Any, *, include_secrets: bool = False) -> Imported:
    """Map a parsed connector config (flat or wrapped) to a snowsource document."""
    config = unwrap(data)
    dialect = detect(config)
    builder = _Builder(dialect, include_secrets=include_secrets)
    # The value format and registry keys, in either dialect: the rest is the dialect's.
    handled = registry_keys(config, builder)
    config = {key: value for key, value in config.items() if key not in handled}
    plain = {k: v for k, v in config.items() if not is_transform_key(k)}
    if dialect == "java":
        _java(plain, builder)
    else:
        _confluent(plain, builder)
    _transforms(config, builder)
    _raw_values_with_a_schema(builder)
    document = builder.result.document
    if "snow" in document:
        # Key order of the YAML: the instance before its tables, as in the documentation.
        snow = document["snow"]
        document["snow"] = {k: snow[k] for k in ("url", "auth", "http", "tables") if k in snow}
        if "auth" in snow:
            auth = snow["auth"]
            document["snow"]["auth"] = {k: auth[k] for k in _AUTH_KEYS if k in auth}
    first: dict[str, Any] = {k: document[k] for k in ("name", "tasks.max", "snow") if k in document}
    builder.result.document = {**first, **document}
    return builder.result


def _raw_values_with_a_schema(builder: _Builder) -> None:
    """Avro and JSON Schema records carry raw values, so ``display.value: all`` would make the
    imported file one that refuses to load: it is left out, with a note saying why."""
    document = builder.result.document
    if document.get("value.format") not in ("avro", "json_schema"):
        return
    tables = document.get("snow", {}).get("tables", {})
    for alias, table in tables.items():
        if isinstance(table, dict) and table.get("display.value") == "all":
            del table["display.value"]
            builder.result.notes.append(
                f"table {alias}: display.value all left out: with value.format "
                f"{document['value.format']} records carry raw values (set value.format: "
                "string to keep display values)"
            )


def _transforms(config: Mapping[str, Any], builder: _Builder) -> None:
    """ReplaceField and MaskField as governance keys: top-level lists, or each table's
    ``fields`` for an include list (SPEC §15.2)."""
    tables: dict[str, dict[str, Any]] = builder.result.document.get("snow", {}).get("tables", {})
    cursor = {str(t.get("timestamp.field", "sys_updated_on")) for t in tables.values()}
    cursor |= {str(t.get("id.field", "sys_id")) for t in tables.values()}
    mapped = map_transforms(dict(config), frozenset({*cursor, "sys_mod_count"}))
    builder.result.unmapped += mapped.unmapped
    builder.result.notes += mapped.notes
    if mapped.exclude:
        builder.put(["fields.exclude"], list(dict.fromkeys(mapped.exclude)))
    if mapped.mask:
        builder.put(["fields.mask"], list(dict.fromkeys(mapped.mask)))
    if mapped.include is None:
        return
    for alias, table in tables.items():
        own = table.get("fields")
        if own:
            table["fields"] = [name for name in own if name in mapped.include]
            builder.result.notes.append(
                f"table {alias!r}: its fields narrowed to those ReplaceField includes"
            )
        else:
            table["fields"] = list(mapped.include)


# --- rendering ----------------------------------------------------------------------------------


def _scalar(value: Any) -> str:
    dumped = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return dumped.removesuffix("\n...\n").strip()


def _render(node: Mapping[str, Any], indent: int, out: list[str]) -> None:
    pad = "  " * indent
    for key, value in node.items():
        name = _scalar(key)
        if isinstance(value, Omitted):
            out.append(f"{pad}# {name}: {value.hint}")
        elif isinstance(value, Mapping):
            out.append(f"{pad}{name}:" + (" {}" if not value else ""))
            _render(value, indent + 1, out)
        else:
            out.append(f"{pad}{name}: {_scalar(value)}")


def _comment_value(key: str, value: Any, secrets: list[str]) -> str:
    if _secret_key(key):
        return "<secret>"
    text = _text(value) if not isinstance(value, dict | list) else "<structured value>"
    # Masked before it is cut, so no part of a secret pasted into this key is shown.
    text = mask(text, secrets)
    return text if len(text) <= 60 else text[:57] + "..."


def render_yaml(imported: Imported, source: Mapping[str, Any], origin: str) -> str:
    """The YAML text: a header, the document, and a comment for every key not mapped."""
    if imported.dialect == "java":
        dialect = "Java ServiceNow source connector"
        hint = (
            "With the same name and the worker's offsets topic, each table resumes from the "
            "connector's offsets."
        )
    else:
        dialect = "Confluent ServiceNow source connector"
        hint = (
            "Confluent's offsets are not read: set start.timestamp from the connector's last "
            "record, and prefer a name of its own."
        )
    out = [f"# snowsource configuration imported from {origin} ({dialect} config)."]
    out.append(f"# {hint} See docs/migration.md.")
    # The secrets of the source: one pasted into another key must not reach a comment either.
    secrets = [v for k, v in source.items() if _secret_key(k) and isinstance(v, str)]
    out += [mask(f"# Note: {note}", secrets) for note in imported.notes]
    if imported.unmapped:
        out.append("# Keys that could not be mapped:")
        for key, raw_reason in imported.unmapped:
            value = _comment_value(key, source.get(key, ""), secrets)
            reason = mask(raw_reason, secrets)
            out.append(f"#   {key} = {value}  ({reason})" if value else f"#   {key}  ({reason})")
    _render(imported.document, 0, out)
    # A connector config does not say which cluster or offsets topic its worker used.
    out.append("# From the Connect worker's own config (not part of a connector config):")
    out.append("# kafka:")
    out.append("#   bootstrap.servers: <the worker's bootstrap.servers>")
    if "offset.storage.topic" not in imported.document:
        out.append(
            "# offset.storage.topic: <the worker's offset.storage.topic, e.g. connect-offsets>"
        )
    return "\n".join(out) + "\n"
