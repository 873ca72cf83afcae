"""Time as a dependency, so timing logic (lease renewal, backoff, polling) is tested with a
fake clock instead of real sleeps.

``Clock`` is what production code takes; ``SystemClock`` is the real one; ``FakeClock``
(for tests) advances only when told and wakes sleepers whose deadline has passed.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def now(self) -> _dt.datetime:
        """Wall-clock time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> _dt.datetime:
        return _dt.datetime.now(_dt.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that moves only on ``advance``; ``sleep`` blocks until then."""

    def __init__(self, start: _dt.datetime | None = None) -> None:
        self._mono = 0.0
        self._wall = start or _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> _dt.datetime:
        return self._wall + _dt.timedelta(seconds=self._mono)

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + max(0.0, seconds), next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking sleepers in deadline order and letting them run."""
        target = self._mono + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            when, _, fut = heapq.heappop(self._sleepers)
            self._mono = max(self._mono, when)
            if not fut.done():
                fut.set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
        self._mono = target
        for _ in range(5):
            await asyncio.sleep(0)
