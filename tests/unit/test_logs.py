"""Logging: one JSON object per line from every library, redacted, rate-limited, no key clashes.

Each scenario runs in a fresh interpreter: ``configure_logging`` owns the process-wide logging
set-up, which pytest's own capture must not share.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest

from snowsource.observability.logs import RepeatLimiter

SECRET = "Sup3r-Secret-Value"


def _run(body: str, *, fmt: str = "json", level: str = "DEBUG") -> list[str]:
    script = textwrap.dedent(
        f"""
        import logging, structlog
        from snowsource.observability.logs import configure_logging
        configure_logging({fmt!r}, {level!r}, secrets=[{SECRET!r}])
        log = structlog.get_logger("snowsource.test")
        """
    ) + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stderr == ""
    return done.stdout.splitlines()


def _json(lines: list[str]) -> list[dict[str, object]]:
    events = [json.loads(line) for line in lines]  # every line must be one JSON object
    assert all(isinstance(e, dict) for e in events)
    return events


def test_library_records_are_json_objects_and_redacted() -> None:
    lines = _run(
        f"""
        logging.getLogger("aiokafka").error("Unable connect to %s: %s", "b:9092", "x {SECRET}")
        logging.getLogger("aiohttp.client").warning("odd header %r", "Basic c3ZjOnB3ZA==")
        try:
            raise OSError("connect refused, password={SECRET}")
        except OSError:
            logging.getLogger("asyncio").exception("Task exception was never retrieved")
        """
    )
    events = _json(lines)
    assert [e["logger"] for e in events] == ["aiokafka", "aiohttp.client", "asyncio"]
    assert events[0]["level"] == "error"
    assert "OSError" in str(events[2]["exception"])
    text = "\n".join(lines)
    assert SECRET not in text
    assert "c3ZjOnB3ZA==" not in text


def test_aiokafka_request_dumps_are_never_emitted() -> None:
    lines = _run(
        """
        conn = logging.getLogger("aiokafka.conn")
        conn.debug("Request to %s:%d %d: %s", "b", 1, 7, "SaslAuthenticateRequest(b'u\\\\x00u')")
        conn.debug("Response from %s:%d %d: %s", "b", 1, 7, "SaslAuthenticateResponse(...)")
        conn.debug("Closing connection at %s:%s", "b", 1)
        """
    )
    events = _json(lines)
    assert [e["event"] for e in events] == ["Closing connection at b:1"]


@pytest.mark.parametrize(
    ("error", "level"),
    [
        ("GroupCoordinatorNotAvailableError()", "info"),
        ("CoordinatorLoadInProgressError()", "info"),
        ("NotCoordinatorForGroupError()", "info"),
        ("GroupAuthorizationFailedError()", "error"),
        # A coordinator that cannot be reached is a failover (one WARN per episode, below).
        ("KafkaConnectionError('gone')", "info"),
    ],
)
def test_only_coordinator_lookups_a_starting_broker_refuses_drop_to_info(
    error: str, level: str
) -> None:
    lines = _run(
        f"""
        from aiokafka import errors
        group = logging.getLogger("aiokafka.consumer.group_coordinator")
        group.error("Group Coordinator Request failed: %s", errors.{error})
        """,
        level="INFO",
    )
    [event] = [e for e in _json(lines) if e["logger"] == "aiokafka.consumer.group_coordinator"]
    assert event["level"] == level
    assert str(event["event"]).startswith("Group Coordinator Request failed: ")


def test_our_events_keep_a_cursor_timestamp_instead_of_losing_it() -> None:
    lines = _run(
        """
        log.info("resuming from stored offset", timestamp="2026-01-02 03:04:05", level="x")
        """
    )
    (event,) = _json(lines)
    assert event["arg_timestamp"] == "2026-01-02 03:04:05"
    assert event["arg_level"] == "x"
    assert event["level"] == "info"
    assert str(event["timestamp"]).endswith("Z")


def test_our_secret_named_keys_and_values_are_blanked() -> None:
    lines = _run(
        f"""
        log.warning("echo", password="pw", body="client_secret=abc&x=1", note="got {SECRET}")
        """
    )
    (event,) = _json(lines)
    assert event["password"] == "***"
    assert event["body"] == "client_secret=***&x=1"
    assert SECRET not in lines[0]


def test_repeated_library_lines_are_printed_once_per_window_in_a_real_process() -> None:
    lines = _run(
        """
        for i in range(500):
            logging.getLogger("aiokafka").error("Unable connect to node with id %s", i % 3)
        """
    )
    events = _json(lines)
    assert len([e for e in events if e["logger"] == "aiokafka"]) == 1
    # Each node's first failure also starts its episode (tests/unit/test_broker_absence.py).
    assert [e["broker"] for e in events if e["logger"] == "snowsource.kafka"] == [
        "node 0",
        "node 1",
        "node 2",
    ]


def test_info_level_hides_library_debug_but_shows_our_info() -> None:
    lines = _run(
        """
        logging.getLogger("aiohttp.client").info("library chatter")
        logging.getLogger("aiokafka").warning("library warning below ERROR")
        log.debug("our debug")
        log.info("our info")
        """,
        level="INFO",
    )
    assert [e["event"] for e in _json(lines)] == ["our info"]


def test_console_format_is_plain_text_and_redacted() -> None:
    lines = _run(f'logging.getLogger("aiokafka").error("x {SECRET}")\n', fmt="console")
    assert len(lines) == 1
    assert SECRET not in lines[0]
    assert not lines[0].startswith("{")


def _record(msg: str, name: str = "aiokafka") -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, None)


def test_repeat_limiter_counts_what_it_held_back() -> None:
    now = [0.0]
    limiter = RepeatLimiter(window=10.0, clock=lambda: now[0])
    assert limiter.filter(_record("Unable connect %s"))
    held = [limiter.filter(_record("Unable connect %s")) for _ in range(41)]
    assert not any(held)
    assert limiter.filter(_record("another message"))  # each message has its own window
    assert limiter.filter(_record("Unable connect %s", name="aiohttp"))  # and each logger
    now[0] = 10.0
    again = _record("Unable connect %s")
    assert limiter.filter(again)
    assert getattr(again, "repeated", None) == 41
    now[0] = 25.0
    quiet = _record("Unable connect %s")
    assert limiter.filter(quiet)
    assert not hasattr(quiet, "repeated")  # nothing was held back in the last window


def test_repeat_limiter_never_limits_our_own_events() -> None:
    limiter = RepeatLimiter(window=10.0, clock=lambda: 0.0)
    ours = logging.LogRecord("snowsource", logging.INFO, __file__, 1, {"event": "x"}, None, None)
    assert all(limiter.filter(ours) for _ in range(5))
