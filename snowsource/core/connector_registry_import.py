"""``config import``: the Schema Registry keys of a connector config (SPEC §15.1). Pure.

Confluent's ServiceNow connector says ``output.data.format: AVRO | JSON_SR | JSON``; any
Connect connector may name a value converter (``io.confluent.connect.avro.AvroConverter``,
``io.confluent.connect.json.JsonSchemaConverter``, Apicurio's converters) with
``value.converter.schema.registry.url`` and basic-auth keys. They map to ``value.format`` and the
``schema.registry`` block; :func:`registry_keys` returns what it mapped (or explained) so the
dialect's own mapping leaves those keys alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

_FORMATS: Final = {"AVRO": "avro", "JSON_SR": "json_schema", "JSON": "string"}
_CONVERTERS: Final = {
    "io.confluent.connect.avro.AvroConverter": "avro",
    "io.confluent.connect.json.JsonSchemaConverter": "json_schema",
    "io.apicurio.registry.utils.converter.AvroConverter": "avro",
    "io.apicurio.registry.utils.converter.ExtJsonConverter": "json_schema",
}
_PREFIXES: Final = ("value.converter.", "")
_URL: Final = "schema.registry.url"
_USER_INFO: Final = ("basic.auth.user.info", "schema.registry.basic.auth.user.info")
_SOURCE: Final = "basic.auth.credentials.source"


class Builder(Protocol):
    """What of ``connector_import``'s builder this mapping uses."""

    def put(self, path: list[str], value: Any) -> None: ...
    def skip(self, key: str, reason: str) -> None: ...
    def convert(
        self, key: str, raw: Any, convert: Callable[[Any], Any], path: list[str]
    ) -> None: ...


def _text(value: Any) -> str:
    return str(value).strip()


def _value_format(config: Mapping[str, Any], builder: Builder) -> set[str]:
    handled: set[str] = set()
    data_format = config.get("output.data.format")
    if data_format is not None:
        handled.add("output.data.format")
        wanted = _FORMATS.get(_text(data_format).upper())
        if wanted is None:
            builder.skip("output.data.format", "only AVRO, JSON_SR and JSON have an equivalent")
        elif wanted != "string":
            builder.put(["value.format"], wanted)
    converter = config.get("value.converter")
    if converter is not None and _text(converter) in _CONVERTERS:
        handled.add("value.converter")
        builder.put(["value.format"], _CONVERTERS[_text(converter)])
    return handled


def registry_keys(config: Mapping[str, Any], builder: Builder) -> set[str]:
    """Map the value format and registry keys of ``config``; the keys it handled."""
    handled = _value_format(config, builder)
    for prefix in _PREFIXES:
        url = config.get(f"{prefix}{_URL}")
        if url is not None:
            handled.add(f"{prefix}{_URL}")
            first = _text(url).split(",")[0].strip()  # Confluent clients accept a list
            builder.convert(f"{prefix}{_URL}", first, _text, ["schema.registry", "url"])
        source = config.get(f"{prefix}{_SOURCE}")
        if source is not None:
            handled.add(f"{prefix}{_SOURCE}")
            if _text(source).upper() != "USER_INFO":
                builder.skip(f"{prefix}{_SOURCE}", "only USER_INFO (user:password) is mapped")
        for suffix in _USER_INFO:
            key = f"{prefix}{suffix}"
            info = config.get(key)
            if info is None:
                continue
            handled.add(key)
            user, sep, password = _text(info).partition(":")
            if not sep:
                builder.skip(key, "expected user:password")
                continue
            builder.put(["schema.registry", "auth.type"], "basic")
            builder.put(["schema.registry", "username"], user)
            builder.convert(key, password, _text, ["schema.registry", "password"])
    return handled
