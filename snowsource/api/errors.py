"""Error answers in Kafka Connect's shape, and Connect's own texts that scripts compare.

Every error the API returns is ``{"error_code": status, "message": message}``; a handler raises
``RestError`` and the errors middleware (``api.middleware``) turns it into that answer, with the
message redacted.
"""

from __future__ import annotations

from typing import Final

import orjson
from aiohttp import web

__all__ = [
    "ALTERED_MESSAGE",
    "MUST_BE_STOPPED_MESSAGE",
    "NEED_OFFSETS_MESSAGE",
    "NOT_FOUND_MESSAGE",
    "NO_STATUS_MESSAGE",
    "RESET_MESSAGE",
    "SHUTTING_DOWN",
    "UNKNOWN_MESSAGE",
    "UNKNOWN_RESTART_MESSAGE",
    "UNSUPPORTED_MEDIA_MESSAGE",
    "RestError",
    "error_response",
    "json_response",
]

# Connect's own texts (ConnectorsResource, AbstractHerder, Worker): scripts compare them.
MUST_BE_STOPPED_MESSAGE: Final = (
    "Connectors must be in the STOPPED state before their offsets can be modified. This can be "
    "done for the specified connector by issuing a 'PUT' request to the "
    "'/connectors/{name}/stop' endpoint"
)
NEED_OFFSETS_MESSAGE: Final = (
    "Partitions / offsets need to be provided for an alter offsets request"
)
# A Connect worker words "no such connector" differently per call; scripts match on the text.
NOT_FOUND_MESSAGE: Final = "Connector {} not found"
NO_STATUS_MESSAGE: Final = "No status found for connector {}"
UNKNOWN_MESSAGE: Final = "Unknown connector {}"  # stop, pause, resume
UNKNOWN_RESTART_MESSAGE: Final = "Unknown connector: {}"  # restart
# Jersey refuses a body that is not application/json before any resource code runs.
UNSUPPORTED_MEDIA_MESSAGE: Final = "HTTP 415 Unsupported Media Type"
# snowsource validates submitted offsets itself (Connect's alterOffsets hook returning true).
ALTERED_MESSAGE: Final = "The offsets for this connector have been altered successfully"
RESET_MESSAGE: Final = "The offsets for this connector have been reset successfully"

SHUTTING_DOWN: Final = "snowsource is shutting down"


class RestError(Exception):
    """An error answer in Connect's shape ``{"error_code": status, "message": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_response(body: object, status: int = 200) -> web.Response:
    """``body`` as JSON."""
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def error_response(code: int, message: str, **extra: object) -> web.Response:
    """Connect's error shape, with ``extra`` keys beside ``error_code`` and ``message``."""
    return json_response({"error_code": code, "message": message, **extra}, code)
