"""The pool of sticky ServiceNow sessions every request of the process goes through (SPEC §14.1).

A real instance serves one transaction at a time per session (two since Yokohama), and the
session is the ``JSESSIONID`` cookie. So concurrency needs several sessions, and gentleness needs
few: the pool keeps at most ``ceil(K / requests_per_session)`` slots, each an
``aiohttp.ClientSession`` with its **own cookie jar** kept for the whole run (one session, pinned
to one node by the load balancer's pool cookie). All slots share one ``TCPConnector``: TCP
connections carry no session (cookies are per jar, sent per request), and sharing them saves
handshakes.

- At most ``limit`` (``core.grants.AimdLimit``, ceiling K) requests are in flight; waiting
  requests are granted round-robin across requester keys (``core.grants.FairQueue``).
- Slots open lazily, only when every open slot is busy, and are reused. A slot that has not yet
  answered carries one request, so its second request goes out with the cookies of the session
  the first one opened: no two sessions are opened for one slot.
- A 401 clears the slot's cookies (the instance dropped the session: the next request opens a
  new one); a response setting a different ``JSESSIONID`` is counted as a replaced session.
- Jars are ``unsafe=True``: aiohttp's default jar keeps no cookie for an IP-address host, which
  would silently turn ``http://10.0.0.5`` into one new session per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
import structlog

from snowsource.core.grants import AimdLimit, FairQueue, Priority
from snowsource.core.rate_budget import BudgetStatus, RateBudget
from snowsource.observability import metrics
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.resource import AsyncResource

__all__ = ["SESSION_COOKIE", "Lease", "PoolStatus", "SessionPool"]

#: The cookie that is the instance's session.
SESSION_COOKIE = "JSESSIONID"

SessionFactory = Callable[[aiohttp.abc.AbstractCookieJar], aiohttp.ClientSession]

_log = structlog.get_logger("snowsource.servicenow")


@dataclass(frozen=True)
class PoolStatus:
    """The pool at one moment, as ``/status`` and ``check`` show it."""

    limit: int
    max_concurrent_requests: int
    requests_per_session: int
    sessions_open: int
    sessions_opened: int
    sessions_replaced: int
    in_flight: int
    waiting: int

    def as_dict(self) -> dict[str, int]:
        """JSON-ready, with the configuration key names the operator knows."""
        return {
            "concurrency_limit": self.limit,
            "max_concurrent_requests": self.max_concurrent_requests,
            "requests_per_session": self.requests_per_session,
            "sessions_open": self.sessions_open,
            "sessions_opened": self.sessions_opened,
            "sessions_replaced": self.sessions_replaced,
            "requests_in_flight": self.in_flight,
            "requests_waiting": self.waiting,
        }


class _Slot:
    """One pool slot: a client session (its cookie jar) and what it carries now."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.session: aiohttp.ClientSession | None = None
        self.in_flight = 0
        self.answered = False  # True once a response came back in the current session
        self.session_id: str | None = None

    def capacity(self, per_session: int) -> int:
        return per_session if self.answered else 1


@dataclass(frozen=True, eq=False)
class Lease:
    """The right to send one request now, in ``session``."""

    slot: _Slot
    epoch: int  # the limit's epoch when granted (see ``AimdLimit.saturated``)

    @property
    def session(self) -> aiohttp.ClientSession:
        session = self.slot.session
        assert session is not None  # a granted slot is open until the pool closes
        return session


@dataclass(eq=False)
class _Waiter:
    key: str
    priority: Priority
    future: asyncio.Future[Lease]


class SessionPool(AsyncResource):
    """K requests in flight at most, over at most ``ceil(K / requests_per_session)`` sessions.

    ``make_session(jar)`` builds a slot's ``aiohttp.ClientSession`` around its own jar (the client
    passes the shared connector, timeouts and headers). ``close`` closes every slot session.
    """

    def __init__(
        self,
        make_session: SessionFactory,
        *,
        max_concurrent_requests: int,
        requests_per_session: int = 1,
        budget: RateBudget | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``budget`` paces grants to an hourly rate budget (SPEC §15.3); ``clock`` is the
        epoch clock it is measured on (``X-RateLimit-Reset`` is an epoch)."""
        if max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be >= 1")
        if requests_per_session < 1:
            raise ValueError("requests_per_session must be >= 1")
        self._make_session = make_session
        self._per_session = requests_per_session
        self._limit = AimdLimit(max_concurrent_requests)
        self._slots = [
            _Slot(i) for i in range(math.ceil(max_concurrent_requests / requests_per_session))
        ]
        self._queue: FairQueue[_Waiter] = FairQueue()
        self._budget = budget
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None  # wakes the dispatch when budget accrues
        self._held_since: float | None = None  # requests wait for the budget since then
        self._in_flight = 0
        self._opened = 0
        self._replaced = 0
        self._closed = False
        self._publish()

    # ---- granting -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lease(self, key: str, priority: Priority = Priority.STREAM) -> AsyncIterator[Lease]:
        """Wait for this request's turn and a session; the slot is free again on exit."""
        lease = await self._acquire(key, priority)
        try:
            yield lease
        finally:
            self._release(lease)

    async def _acquire(self, key: str, priority: Priority) -> Lease:
        if self._closed:
            raise RuntimeError("ServiceNowClient is closed")
        waiter = _Waiter(key, priority, asyncio.get_running_loop().create_future())
        self._queue.push(key, waiter, priority)
        self._dispatch()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(waiter.future.result())  # granted as the requester gave up
            else:
                self._queue.remove(key, waiter, priority)
            raise

    def _release(self, lease: Lease) -> None:
        lease.slot.in_flight -= 1
        self._in_flight -= 1
        self._dispatch()
        self._publish()

    def _dispatch(self) -> None:
        while not self._closed and self._in_flight < self._limit.value and len(self._queue):
            slot = self._free_slot()
            if slot is None or self._held_by_budget():
                break
            waiter = self._queue.pop()
            if waiter is None:
                break
            if waiter.future.done():  # cancelled while it waited
                continue
            self._spend()
            if slot.session is None:
                slot.session = self._make_session(aiohttp.CookieJar(unsafe=True))
            slot.in_flight += 1
            self._in_flight += 1
            waiter.future.set_result(Lease(slot, self._limit.epoch))
        self._publish()

    # ---- the rate budget ------------------------------------------------------------------

    def _held_by_budget(self) -> bool:
        """Whether the budget holds the next grant back (a wake-up is then scheduled)."""
        if self._budget is None:
            return False
        now = self._clock()
        wait = self._budget.delay(now)
        if wait <= 0:
            return False
        if self._held_since is None:
            self._held_since = now
        loop = asyncio.get_running_loop()
        if self._timer is None or self._timer.when() > loop.time() + wait:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_later(wait, self._wake)
        return True

    def _wake(self) -> None:
        self._timer = None
        self._dispatch()

    def _spend(self) -> None:
        if self._budget is None:
            return
        now = self._clock()
        if self._held_since is not None:
            waited, self._held_since = now - self._held_since, None
            self._budget.waited(waited)
            metrics.SNOW_BUDGET_WAIT_SECONDS.inc(max(0.0, waited))
        self._budget.spend(now)

    def rate_limit_seen(self, limit: int, window: float, ends: float) -> None:
        """An answer's ``X-RateLimit-Limit`` and ``-Reset`` (``window``, as sent) and when that
        window ends on this process's clock."""
        if self._budget is not None:
            self._budget.observe(limit, window, self._clock(), ends=ends)
            self._dispatch()

    def set_members(self, members: int) -> None:
        """How many processes share the rate budget (group members alive now)."""
        if self._budget is not None:
            self._budget.set_members(members)

    def budget_status(self) -> BudgetStatus | None:
        """The rate budget now (None: no budget configured or announced)."""
        if self._budget is None:
            return None
        status = self._budget.status(self._clock())
        return status if status.per_hour is not None else None

    def _free_slot(self) -> _Slot | None:
        """The least busy open slot with room; else a slot not yet open (opened lazily)."""
        best: _Slot | None = None
        for slot in self._slots:
            if slot.session is None or slot.in_flight >= slot.capacity(self._per_session):
                continue
            if best is None or slot.in_flight < best.in_flight:
                best = slot
        if best is not None:
            return best
        return next((slot for slot in self._slots if slot.session is None), None)

    # ---- what the instance answered -------------------------------------------------------

    def answered(
        self, lease: Lease, status: int, *, session_id: str | None, retry_after: bool
    ) -> None:
        """Record one answer given in ``lease``: its status, the ``JSESSIONID`` it set (if any),
        and whether it carried ``Retry-After``."""
        slot = lease.slot
        if session_id is not None and session_id != slot.session_id:
            self._opened += 1
            if slot.session_id is not None:
                # The instance expired or dropped the session and opened another for us.
                self._replaced += 1
                _log.info("ServiceNow replaced a pool session", slot=slot.index)
            slot.session_id = session_id
        slot.answered = True
        if status == 401:
            self._drop(slot)
        elif status == 200:
            self._limit.succeeded()
        elif status == 429 and not retry_after and self._limit.saturated(lease.epoch):
            metrics.SNOW_SATURATIONS.inc()
            _log.warning(
                "instance nodes saturated (HTTP 429 without Retry-After); concurrency limit halved",
                concurrency_limit=self._limit.value,
            )
        self._dispatch()

    def _drop(self, slot: _Slot) -> None:
        """The instance refused the session: forget its cookies, so the next request opens a
        new one (requests still in flight in it finish on their own)."""
        if slot.session is not None:
            slot.session.cookie_jar.clear()
        if slot.session_id is not None:
            _log.info("ServiceNow session refused (HTTP 401); opening a new one", slot=slot.index)
        slot.session_id = None
        slot.answered = False

    # ---- state ----------------------------------------------------------------------------

    def status(self) -> PoolStatus:
        """The pool now."""
        return PoolStatus(
            limit=self._limit.value,
            max_concurrent_requests=self._limit.ceiling,
            requests_per_session=self._per_session,
            sessions_open=sum(1 for slot in self._slots if slot.session is not None),
            sessions_opened=self._opened,
            sessions_replaced=self._replaced,
            in_flight=self._in_flight,
            waiting=len(self._queue),
        )

    def _publish(self) -> None:
        metrics.SNOW_CONCURRENCY_LIMIT.set(self._limit.value)
        metrics.SNOW_SESSIONS_OPEN.set(sum(1 for slot in self._slots if slot.session is not None))
        metrics.SNOW_REQUESTS_IN_FLIGHT.set(self._in_flight)
        budget = self.budget_status()
        metrics.SNOW_BUDGET_PER_HOUR.set(budget.per_hour or 0 if budget is not None else 0)
        metrics.SNOW_BUDGET_USED.set(budget.used_in_window if budget is not None else 0)

    async def close(self, deadline: Deadline | None = None) -> None:
        """Close every slot session; requests still waiting fail. Safe to call more than once."""
        del deadline  # closing sessions does not wait on the network
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while (waiter := self._queue.pop()) is not None:
            if not waiter.future.done():
                waiter.future.set_exception(RuntimeError("ServiceNowClient is closed"))
        for slot in self._slots:
            session, slot.session = slot.session, None
            if session is not None:
                await session.close()
        self._publish()
