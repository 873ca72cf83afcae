"""Backend health: ``translator.ping()`` on a timer, with a timeout, one in flight.

State machine (what Go virtual-kubelet lacks: it just stops heart-beating)::

    unknown ──ok──▶ healthy ──N failures in a row──▶ unhealthy ──ok──▶ healthy
       └────fail (the very first ping)──────────────▶ unhealthy

The first result decides at once, so a backend that is down at startup registers the Node
``Ready=False`` instead of aborting or claiming readiness.  ``message`` names the backend error
(it becomes the Ready condition's message) and ``reason`` its kind: ``BackendUnreachable``, or
``BackendForbidden`` when the backend refused vkgate's credentials (``BackendAuthError``, e.g. a
Nomad token without ``list-jobs``).  A refusal is not transient — retrying the same token gets
the same answer — so it turns the node unhealthy at once, without waiting for N failures.  A ping that outlives its timeout is cancelled; if
the translator ignores cancellation the next tick does not start a second ping but counts a
failure ("previous ping still running").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gateway.kube.errors import truncate
from gateway.node.conditions import REASON_BACKEND_FORBIDDEN, REASON_BACKEND_UNREACHABLE
from translators.base import BackendAuthError
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger("gateway.node.health")

T = TypeVar("T")


class Timeout(Exception):
    pass


async def with_timeout(awaitable: Awaitable[T], seconds: float, clock: Clock) -> T:
    """``asyncio.wait_for`` on the injectable clock (so fake-clock tests control it)."""
    task: asyncio.Future[T] = asyncio.ensure_future(awaitable)
    sleeper: asyncio.Future[None] = asyncio.ensure_future(clock.sleep(seconds))
    both: list[asyncio.Future[Any]] = [task, sleeper]
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait({task}, timeout=0.1)
    raise Timeout(f"timed out after {seconds:g}s")


class BackendHealth:
    def __init__(
        self,
        ping: Callable[[], Awaitable[Any]],
        *,
        kind: str,
        interval: float = 10.0,
        timeout: float = 5.0,
        failures_threshold: int = 3,
        clock: Clock | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._ping = ping
        self.kind = kind
        self.interval = interval
        self.timeout = timeout
        self.threshold = max(1, failures_threshold)
        self.clock: Clock = clock or SystemClock()
        self.on_change = on_change
        #: None until the first ping finished.
        self.healthy: bool | None = None
        self.consecutive_failures = 0
        self.last_error = ""
        #: The last failure was the backend refusing vkgate's credentials.
        self.refused = False
        self.pings = 0
        self._inflight: asyncio.Task[Any] | None = None

    @property
    def reason(self) -> str:
        return REASON_BACKEND_FORBIDDEN if self.refused else REASON_BACKEND_UNREACHABLE

    @property
    def message(self) -> str:
        if self.refused:
            return f"{self.kind} backend refuses vkgate's credentials: {self.last_error}"
        return f"{self.kind} backend unreachable: {self.last_error}"

    async def check_once(self) -> bool:
        """Ping once and update the state; returns whether the ping succeeded."""
        self.pings += 1
        error = ""
        refused = False
        if self._inflight is not None and not self._inflight.done():
            error = "previous ping still running"
        else:
            self._inflight = asyncio.ensure_future(self._ping())
            try:
                await with_timeout(self._inflight, self.timeout, self.clock)
            except Timeout as exc:
                error = f"ping {exc}"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = truncate(str(exc) or type(exc).__name__)
                refused = isinstance(exc, BackendAuthError)
        self._record(error, refused=refused)
        return not error

    def _record(self, error: str, *, refused: bool = False) -> None:
        before = (self.healthy, self.reason, self.last_error)
        if not error:
            self.consecutive_failures = 0
            self.healthy = True
        else:
            self.consecutive_failures += 1
            self.last_error = error
            self.refused = refused
            if self.healthy is None or refused or self.consecutive_failures >= self.threshold:
                self.healthy = False
        flipped = before[0] != self.healthy
        if flipped:
            if self.healthy:
                log.info("%s backend is reachable", self.kind)
            else:
                log.warning("%s", self.message)
        # a NotReady node whose reason or message changed (e.g. one grant fixed, another
        # still missing) is rewritten now, not at the next status interval
        changed = self.healthy is False and before != (False, self.reason, self.last_error)
        if (flipped or changed) and self.on_change is not None:
            self.on_change()

    async def run(self) -> None:
        while True:
            await self.clock.sleep(self.interval)
            await self.check_once()
