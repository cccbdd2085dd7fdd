"""Reading records of ``value.format: avro | json_schema`` back as any Confluent client would."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime
from typing import Any, Self

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from snowsource.core.dictionary import columns, lineage
from snowsource.core.typed import convert_row
from snowsource.emulator.query_eval import FieldType
from snowsource.emulator.schema import Field
from tests.integration.conftest import Env
from tests.integration.engine import Record


class Reader:
    """Deserializes a topic's values with confluent-kafka's own deserializers."""

    def __init__(self, url: str, value_format: str) -> None:
        # confluent-kafka waits forever by default: a registry that hangs fails the test instead.
        self.client = SchemaRegistryClient({"url": url, "timeout": 30})
        if value_format == "avro":
            self._deserializer: Any = AvroDeserializer(self.client)
        else:
            self._deserializer = JSONDeserializer(None, schema_registry_client=self.client)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()  # its HTTP connections, or the test fails on an unclosed socket

    def value(self, topic: str, record: Record) -> dict[str, Any]:
        context = SerializationContext(topic, MessageField.VALUE)
        out = self._deserializer(record.value, context)
        assert isinstance(out, dict)
        return out


def dictionary(env: Env, table: str) -> dict[str, str]:
    """The table's columns as the emulator's dictionary has them."""
    return columns(lineage(table, env.emu.rows("sys_db_object")), env.emu.rows("sys_dictionary"))


def expected_avro(env: Env, table: str, key: bytes, carried: list[str]) -> dict[str, Any]:
    """The Avro record of a stored row, from the emulator's row and dictionary by the typed
    conversion (SPEC §13.7) and the type mapping of §15.1: field name -> value."""
    stored = env.emu.get(table, key.decode())
    assert stored is not None
    raw = {name: _stored(env, stored, name) for name in carried}
    cols = dictionary(env, table)
    typed = convert_row(raw, cols)
    out: dict[str, Any] = {}
    for name, value in typed.values.items():
        kind = cols.get(name)
        field = name.replace(".", "__")
        if name in typed.unparsed:
            out[field] = None
        elif value is not None and kind == "glide_date_time":
            out[field] = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
        elif value is not None and kind == "glide_date":
            out[field] = date.fromisoformat(value)
        else:
            out[field] = value
    out["__unparsed"] = {name: raw[name] for name in typed.unparsed}
    return out


def _stored(env: Env, row: dict[str, Any], name: str) -> str:
    if "." not in name:
        return str(row.get(name, ""))
    first, rest = name.split(".", 1)
    target = env.emu.get("sys_user", str(row.get(first, ""))) if first == "caller_id" else None
    return "" if target is None else str(target.get(rest, ""))


def add_column(env: Env, table: str, column: str, internal_type: FieldType) -> None:
    """An administrator adds a column: rows and dictionary have it from now on."""
    tdef = env.emu.tables[table]
    grown = dataclasses.replace(tdef, own_fields=(*tdef.own_fields, Field(column, internal_type)))
    env.emu.tables[table] = grown
    env.emu.store.add_table(grown)
    env.emu.insert(
        "sys_dictionary",
        {"name": table, "element": column, "internal_type": internal_type, "active": "true"},
    )
