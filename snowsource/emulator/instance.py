"""What decides a real instance's concurrency: sessions, nodes, semaphores (API notes §3.4b).

- **Sessions.** A request without a known ``JSESSIONID`` opens a session; the answer sets
  ``JSESSIONID``, the load balancer's ``BIGipServerpool…`` cookie (the session's node) and
  ``glide_user_route``. One session runs ``per_session`` transactions at a time (1; 2 since
  Yokohama); the next ones wait their turn, and a request arriving while ``max_waiting`` already
  wait on its session is dropped with **202 and an empty body**.
- **Nodes.** ``nodes`` application nodes behind a sticky load balancer: the pool cookie pins a
  session to its node, a new session goes to the next node in turn. Each node runs API
  transactions in a semaphore of ``node_threads`` threads with a queue of ``node_queue``; a
  request finding every thread busy and the queue full gets **429 without ``Retry-After``**.
- **Session timeout.** A session unused for ``session_timeout`` (30 minutes, the instance's
  default) is gone; until then it counts as live (it holds memory on its node).
- **Statistics** for tests and benchmarks (:meth:`InstanceModel.statistics`): sessions opened
  and live, in flight per node and their peaks, 202/429 counts, and the time requests were
  served (holding a node thread), whose ratio to the wall time is the effective concurrency.

Off by default in the Python API (``enabled`` False: every request is served at once, as
before); the CLI, the demo and the benchmark turn it on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import secrets
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Final, Literal

__all__ = ["POOL_COOKIE", "ROUTE_COOKIE", "SESSION_COOKIE", "Admission", "InstanceModel"]

SESSION_COOKIE: Final = "JSESSIONID"
#: An instance's default session timeout: an idle session holds its node's memory this long.
SESSION_TIMEOUT_SECONDS: Final = 1800.0
# Idle sessions are swept once per this many new sessions (not on every request).
_SWEEP_EVERY: Final = 256
POOL_COOKIE: Final = "BIGipServerpool_snowsource_emulator"
ROUTE_COOKIE: Final = "glide_user_route"

Verdict = Literal["served", "queued_out", "saturated"]


@dataclasses.dataclass
class _Session:
    id: str
    node: int
    last_used: float = dataclasses.field(default_factory=time.monotonic)
    running: int = 0
    waiters: int = 0
    turn: asyncio.Condition = dataclasses.field(default_factory=asyncio.Condition)


@dataclasses.dataclass
class _Node:
    index: int
    threads: asyncio.Semaphore
    busy: int = 0
    queued: int = 0
    peak_busy: int = 0
    served: int = 0

    @property
    def cookie(self) -> str:
        # F5 encodes the member's address and port; any opaque stable value serves the model.
        return f"{1000000 + self.index}.20480.0000"


@dataclasses.dataclass
class Admission:
    """What the model decided for one request, and the cookies its answer sets."""

    verdict: Verdict
    cookies: dict[str, str]
    node: int


class InstanceModel:
    """Sessions and node semaphores of one emulated instance (see the module docstring)."""

    def __init__(self) -> None:
        self.enabled = False
        self.session_sync = True
        self.per_session = 1
        self.max_waiting = 10
        self.node_threads = 4
        self.node_queue = 50
        self._nodes: list[_Node] = []
        self._sessions: dict[str, _Session] = {}
        self._next_node = itertools.count()
        self.session_timeout = SESSION_TIMEOUT_SECONDS
        self.configure(enabled=False)

    def configure(
        self,
        *,
        enabled: bool = True,
        session_sync: bool = True,
        per_session: int = 1,
        max_waiting: int = 10,
        nodes: int = 2,
        node_threads: int = 4,
        node_queue: int = 50,
        session_timeout: float = SESSION_TIMEOUT_SECONDS,
    ) -> None:
        """Set the model up (and forget every session and statistic). A session unused for
        ``session_timeout`` seconds is gone: its cookie opens a new one."""
        if per_session < 1 or nodes < 1 or node_threads < 1 or node_queue < 0 or max_waiting < 0:
            raise ValueError(
                "per_session, nodes and node_threads must be >= 1; node_queue and max_waiting >= 0"
            )
        self.enabled = enabled
        self.session_sync = session_sync
        self.per_session = per_session
        self.max_waiting = max_waiting
        self.node_threads = node_threads
        self.node_queue = node_queue
        self.session_timeout = session_timeout
        self._nodes = [_Node(i, asyncio.Semaphore(node_threads)) for i in range(nodes)]
        self._sessions.clear()
        self._next_node = itertools.count()
        self.in_flight = 0  # configure before serving: nothing is in flight
        self.reset_statistics()

    def reset_statistics(self) -> None:
        """Start counting afresh (sessions stay open). A request being served counts only its
        time after the reset, so a reset in the middle of a run measures the rest exactly."""
        self.sessions_opened = 0
        self.rejected_202 = 0
        self.rejected_429 = 0
        self.served = 0
        self.served_seconds = 0.0
        self.max_served_seconds = 0.0
        self.peak_in_flight = self.in_flight  # in_flight is state, not a counter
        self._since = time.monotonic()
        self.first_at: float | None = self._since if self.in_flight else None
        self.last_at: float | None = None
        for node in self._nodes:
            node.peak_busy = node.busy
            node.served = 0

    def expire_sessions(self) -> int:
        """Drop every session (the session timeout passed); the next request opens a new one."""
        count = len(self._sessions)
        self._sessions.clear()
        return count

    # ---- admission -------------------------------------------------------------------------

    def _session_for(self, cookies: Mapping[str, str]) -> tuple[_Session, dict[str, str]]:
        """The request's session, opening one when it has none (or one this node forgot)."""
        node = self._node_from_cookie(cookies.get(POOL_COOKIE))
        now = time.monotonic()
        known = self._sessions.get(cookies.get(SESSION_COOKIE, ""))
        if known is not None and now - known.last_used > self.session_timeout:
            del self._sessions[known.id]  # timed out: the cookie names a session long gone
            known = None
        if known is not None and (node is None or known.node == node):
            known.last_used = now
            return known, {}
        if node is None:
            node = next(self._next_node) % len(self._nodes)
        session = _Session(id=secrets.token_hex(16).upper(), node=node)
        self._sessions[session.id] = session
        self.sessions_opened += 1
        if self.sessions_opened % _SWEEP_EVERY == 0:
            self._sweep(now)
        return session, {
            SESSION_COOKIE: session.id,
            POOL_COOKIE: self._nodes[node].cookie,
            ROUTE_COOKIE: f"glide.{secrets.token_hex(16)}",
        }

    def _sweep(self, now: float) -> None:
        """Forget sessions idle past the timeout (those running a request are not idle)."""
        for sid, session in list(self._sessions.items()):
            idle = session.running == 0 and session.waiters == 0
            if idle and now - session.last_used > self.session_timeout:
                del self._sessions[sid]

    def _node_from_cookie(self, value: str | None) -> int | None:
        return next((n.index for n in self._nodes if n.cookie == value), None)

    @contextlib.asynccontextmanager
    async def admit(self, cookies: Mapping[str, str]) -> AsyncIterator[Admission]:
        """Hold the request's session turn and a node thread while the block serves it.

        Yields ``verdict="served"`` inside both, or a rejection (``queued_out``: 202,
        ``saturated``: 429) at once, holding nothing.
        """
        session, set_cookies = self._session_for(cookies)
        node = self._nodes[session.node]
        async with self._session_turn(session) as got_turn:
            if not got_turn:
                self.rejected_202 += 1
                yield Admission("queued_out", set_cookies, node.index)
                return
            if node.busy >= self.node_threads and node.queued >= self.node_queue:
                self.rejected_429 += 1
                yield Admission("saturated", set_cookies, node.index)
                return
            node.queued += 1
            try:
                await node.threads.acquire()
            finally:
                node.queued -= 1
            try:
                with self._serving(node):
                    yield Admission("served", set_cookies, node.index)
            finally:
                node.threads.release()

    @contextlib.asynccontextmanager
    async def _session_turn(self, session: _Session) -> AsyncIterator[bool]:
        """The session synchronizer: True once it is this request's turn, False when dropped."""
        if not self.session_sync:
            yield True
            return
        async with session.turn:
            if session.running >= self.per_session and session.waiters >= self.max_waiting:
                got = False
            else:
                session.waiters += 1
                try:
                    await session.turn.wait_for(lambda: session.running < self.per_session)
                finally:
                    session.waiters -= 1
                session.running += 1
                got = True
        try:
            yield got
        finally:
            if got:
                async with session.turn:
                    session.running -= 1
                    session.turn.notify()

    @contextlib.contextmanager
    def _serving(self, node: _Node) -> Iterator[None]:
        started = time.monotonic()
        self.first_at = started if self.first_at is None else self.first_at
        node.busy += 1
        node.peak_busy = max(node.peak_busy, node.busy)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield
        finally:
            ended = time.monotonic()
            node.busy -= 1
            node.served += 1
            self.in_flight -= 1
            self.served += 1
            counted = ended - max(started, self._since)
            self.served_seconds += counted
            self.max_served_seconds = max(self.max_served_seconds, counted)
            self.last_at = ended

    # ---- statistics ------------------------------------------------------------------------

    def statistics(self) -> dict[str, object]:
        """Counters since the last reset, JSON-ready (``GET /emulator/statistics``)."""
        window = (
            self.last_at - self.first_at
            if self.first_at is not None and self.last_at is not None
            else 0.0
        )
        return {
            "enabled": self.enabled,
            "session_sync": self.session_sync,
            "requests_per_session": self.per_session,
            "sessions_opened": self.sessions_opened,
            "sessions_live": len(self._sessions),
            "responses_202": self.rejected_202,
            "responses_429": self.rejected_429,
            "served": self.served,
            "served_seconds": round(self.served_seconds, 6),
            "max_served_seconds": round(self.max_served_seconds, 6),
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "window_seconds": round(window, 6),
            "nodes": [
                {
                    "node": node.index,
                    "threads": self.node_threads,
                    "queue": self.node_queue,
                    "in_flight": node.busy,
                    "peak_in_flight": node.peak_busy,
                    "queued": node.queued,
                    "served": node.served,
                    "sessions_live": sum(
                        1 for s in self._sessions.values() if s.node == node.index
                    ),
                }
                for node in self._nodes
            ],
        }
