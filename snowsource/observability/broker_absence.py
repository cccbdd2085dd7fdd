"""aiokafka's messages about a broker it cannot reach: INFO, with one WARN per episode.

On a cluster a broker that is killed, restarted or stalled is routine: its partitions' leaders
move, a coordinator moves, and aiokafka's clients carry on with the other brokers. aiokafka
logs every failed connection and every coordinator it gives up on at ERROR, thousands of lines
an alert would fire on while nothing is wrong. So those messages are demoted to INFO and
snowsource says it once, at WARN, per *episode*: the first such message about a broker after
``EPISODE_QUIET_SECONDS`` without one starts an episode, named by the broker and the time it
began. Real trouble shows elsewhere: a table that cannot deliver counts its failures in its
status and metrics (engine/failures.py), whose episode WARN says so.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

import structlog
from aiokafka import errors

__all__ = ["EPISODE_QUIET_SECONDS", "LOGGERS", "BrokerAbsence"]

log = structlog.get_logger("snowsource.kafka")

#: A broker not complained about for this long is back: the next complaint starts an episode.
EPISODE_QUIET_SECONDS: float = 60.0

#: The aiokafka loggers whose routine failover messages are demoted.
LOGGERS: Final = (
    "aiokafka",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.consumer.fetcher",
    "aiokafka.producer.sender",
)

# Message (format string) prefix -> which argument names the broker (None: a coordinator).
_ROUTINE: Final[dict[str, int | None]] = {
    'Unable connect to "%s:%s"': 0,
    "Unable connect to node with id": 0,
    "Unable to update metadata from": 0,
    "Error sending %s to node %s": 1,
    "Failed fetch messages from": 0,
    "Failed fetch offsets from": 0,
    "Heartbeat send request failed": None,
    "Heartbeat session expired": None,
    "FindCoordinator Request failed": None,
}
# "Group Coordinator Request failed: %s" is routine for these errors only.
_COORDINATOR_MOVED: Final = (
    errors.KafkaConnectionError,
    errors.NodeNotReadyError,
    errors.RequestTimedOutError,
    errors.CoordinatorNotAvailableError,
    errors.NotCoordinatorForGroupError,
    errors.CoordinatorLoadInProgressError,
)
_ADDRESS = re.compile(r"\('([^']+)', (\d+)\)")


#: Node id -> address, learnt from the messages that quote both (bounded: one per broker).
_ADDRESSES: dict[str, str] = {}


def _broker(record: logging.LogRecord, index: int | None) -> tuple[str, str]:
    """The broker the message is about (its episode's key) and how to name it (with its
    address once a message quoted it)."""
    args = record.args if isinstance(record.args, tuple) else ()
    if record.msg.startswith('Unable connect to "%s:%s"') and len(args) >= 2:
        bootstrap = f"{args[0]}:{args[1]}"
        named = next((n for n, a in _ADDRESSES.items() if a == bootstrap), None)
        return (f"node {named}", f"node {named} ({bootstrap})") if named else (bootstrap,) * 2
    if index is None or index >= len(args):
        return ("coordinator",) * 2
    node = args[index]
    if isinstance(node, list):  # a metadata refresh every known broker refused
        return ("every broker",) * 2
    quoted = _ADDRESS.search(" ".join(str(a) for a in args))
    if quoted and len(_ADDRESSES) < 1000:
        _ADDRESSES[str(node)] = f"{quoted[1]}:{quoted[2]}"
    known = _ADDRESSES.get(str(node))
    # Keyed by the node, whether or not this message quotes its address; the bootstrap's
    # messages (an address only) join the node's episode once the address is known.
    return f"node {node}", f"node {node} ({known})" if known else f"node {node}"


def _routine(record: logging.LogRecord) -> tuple[str, str] | None:
    """The broker a routine failover message is about (key, name), or None for any other."""
    if not isinstance(record.msg, str) or record.levelno < logging.WARNING:
        return None
    for prefix, index in _ROUTINE.items():
        if record.msg.startswith(prefix):
            return _broker(record, index)
    args = record.args if isinstance(record.args, tuple) else ()
    if record.msg.startswith("Group Coordinator Request failed") and args:
        return ("coordinator",) * 2 if isinstance(args[0], _COORDINATOR_MOVED) else None
    return None


class BrokerAbsence(logging.Filter):
    """On aiokafka's loggers: routine failover messages become INFO; one WARN per episode.

    The episodes are shared by every instance (one per logger), guarded by a lock: aiokafka
    logs from the event loop, but a test or an embedding program may log from other threads.
    """

    _episodes: ClassVar[dict[str, tuple[datetime, float]]] = {}  # broker -> (since, last seen)
    _lock: ClassVar = threading.Lock()
    clock: ClassVar[Callable[[], float]] = time.monotonic

    def filter(self, record: logging.LogRecord) -> bool:
        routine = _routine(record)
        if routine is None:
            return True
        broker, name = routine
        record.levelno, record.levelname = logging.INFO, "INFO"
        now = type(self).clock()
        with self._lock:
            episode = self._episodes.get(broker)
            fresh = episode is None or now - episode[1] >= EPISODE_QUIET_SECONDS
            since = datetime.now(UTC) if fresh or episode is None else episode[0]
            self._episodes[broker] = (since, now)
        if fresh:
            _warn(name, since, record.getMessage())
        # Demoted below the level the operator asked for (snowsource's own): not shown.
        return logging.getLogger("snowsource").isEnabledFor(logging.INFO)

    @classmethod
    def forget(cls) -> None:
        """Start afresh (tests)."""
        with cls._lock:
            cls._episodes.clear()


def _warn(broker: str, since: datetime, detail: Any) -> None:
    log.warning(
        "kafka broker unreachable; clients carry on with the other brokers and retry it",
        broker=broker,
        since=since.isoformat(timespec="seconds"),
        detail=str(detail),
        quiet_after_seconds=EPISODE_QUIET_SECONDS,
    )
