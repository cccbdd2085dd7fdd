"""From a Table API row to a Kafka record (SPEC §3). Pure.

The daemon asks for raw values (``sysparm_display_value=false``) or for both
(``all``). With ``display.value: true`` it still asks for ``all`` and keeps each field's display
value, except the cursor fields and ``sys_mod_count``: a display-formatted timestamp is in the
integration user's time zone and format and must never drive the cursor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

RAW_FIELDS_EXTRA = ("sys_mod_count",)


@dataclass(frozen=True)
class RecordShaper:
    """Shapes rows of one table for its ``display.value`` and ``exclude.reference.link``."""

    display_value: str  # "false" | "true" | "all"
    exclude_reference_link: bool
    timestamp_field: str
    id_field: str

    @property
    def request_display_value(self) -> str:
        """The ``sysparm_display_value`` to send: ``all`` whenever display values are wanted."""
        return "false" if self.display_value == "false" else "all"

    def raw(self, row: Mapping[str, Any], field: str) -> str | None:
        """The raw (stored) value of ``field``, whatever the response shape; None when absent."""
        value = row.get(field)
        if isinstance(value, dict):
            value = value.get("value")
        return value if isinstance(value, str) else None

    def shape(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The record value object for ``row``."""
        if self.display_value != "true":
            return dict(row)
        keep_raw = {self.timestamp_field, self.id_field, *RAW_FIELDS_EXTRA}
        shaped: dict[str, Any] = {}
        for name, value in row.items():
            if not isinstance(value, dict):
                shaped[name] = value
            elif name in keep_raw:
                shaped[name] = value.get("value", "")
            elif "link" in value:
                # A reference with links on: the "true" shape keeps display value and link.
                shaped[name] = {
                    "display_value": value.get("display_value", ""),
                    "link": value["link"],
                }
            else:
                shaped[name] = value.get("display_value", "")
        return shaped

    def value_bytes(self, row: Mapping[str, Any]) -> bytes:
        """Compact UTF-8 JSON of the shaped row."""
        if self.display_value != "true":
            return orjson.dumps(row)  # the value is the row itself: no copy per row
        return orjson.dumps(self.shape(row))
