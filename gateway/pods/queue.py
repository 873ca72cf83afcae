"""The pod work queue: one worker per key, delayed re-adds, per-key backoff, a retry rate limit.

Why a queue of *keys* (client-go's workqueue, kopf's one-worker-per-object): a handler always
reads the newest object from the cache, so ten watch events for one pod collapse into one sync,
and two workers can never act on the same pod at once.  Rules (docs/design/kubelet-contract.md,
"Pod watch and work queue"):

* **De-dup.**  A key is queued at most once; adding it again can only move its due time
  *earlier* (``add(key, delay=…)`` never postpones work that is already due).
* **Serialization.**  A key handed to a worker is *in flight* until ``done(key)``.  An ``add``
  meanwhile is remembered ("dirty") and the key is re-queued when the worker is done — never
  handed to a second worker.
* **Per-key backoff.**  ``retry(key)`` re-adds after ``min(cap, base·2^(n-1))`` (jittered,
  ``Retry-After`` honoured), n = consecutive failures of that key; ``forget(key)`` resets n.
* **Global rate limit** on *retries only* (``vkgate_core.ratelimit.TokenBucket``): a burst of
  failing pods cannot hammer the backend, while first attempts of new pods are never throttled
  (Go VK's mistake).

Keys are any hashable values (the queue is generic in its key type); the pod controller uses
``gateway.pods.keys``: ``PodKey`` (``ns/name``) for syncs and ``GoneKey`` for the cleanup of a
pod that is gone from the API.  All time goes through ``vkgate_core.clock.Clock``.

Internal to the pod sync (``gateway.pods``): its siblings and sub-packages import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
from collections.abc import Hashable
from typing import Generic, TypeVar

from vkgate_core.backoff import Backoff
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.ratelimit import TokenBucket


class ShutDown(Exception):
    """``get()`` on a queue that was shut down."""


K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        retry_qps: float = 20.0,
        retry_burst: int = 50,
        rng: random.Random | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.backoff = backoff or Backoff(base=0.5, cap=60.0, jitter=0.1, jitter_up=True)
        self.limiter = TokenBucket(retry_qps, retry_burst, clock=self.clock)
        self._rng = rng or random.Random()
        self._due: dict[K, float] = {}  # queued key -> due (monotonic)
        self._heap: list[tuple[float, int, K]] = []  # may hold stale entries
        self._seq = itertools.count()
        self._processing: set[K] = set()
        self._dirty: dict[K, float] = {}  # in-flight key re-added -> due
        self._failures: dict[K, int] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._shutdown = False

    # -- adding --------------------------------------------------------------------------

    def add(self, key: K, *, delay: float = 0.0) -> None:
        """Queue ``key`` to run after ``delay`` seconds (or sooner if already due sooner)."""
        if self._shutdown:
            return
        due = self.clock.monotonic() + max(0.0, delay)
        if key in self._processing:
            prev = self._dirty.get(key)
            self._dirty[key] = due if prev is None else min(prev, due)
            return
        prev = self._due.get(key)
        if prev is not None and prev <= due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        self._wake()

    def retry(self, key: K, *, retry_after: float | None = None) -> float:
        """Re-add after this key's backoff (and the global retry limit); returns the delay."""
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        delay = self.backoff.delay(n, self._rng)
        if retry_after is not None:
            delay = max(delay, retry_after)
        delay = max(delay, self.limiter.reserve())
        self.add(key, delay=delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff from the beginning."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    # -- taking --------------------------------------------------------------------------

    async def get(self) -> K:
        """Wait for a due key that no other worker holds; the caller must call ``done``."""
        while True:
            if self._shutdown:
                raise ShutDown
            now = self.clock.monotonic()
            wait: float | None = None
            while self._heap:
                due, _, key = self._heap[0]
                if self._due.get(key) != due:
                    heapq.heappop(self._heap)  # stale (moved earlier or taken)
                    continue
                if due <= now:
                    heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing.add(key)
                    return key
                wait = due - now
                break
            await self._wait(wait)

    def done(self, key: K) -> None:
        """Release an in-flight key; re-queue it if it was added meanwhile."""
        self._processing.discard(key)
        due = self._dirty.pop(key, None)
        if due is not None and not self._shutdown:
            delay = max(0.0, due - self.clock.monotonic())
            self.add(key, delay=delay)

    def shutdown(self) -> None:
        self._shutdown = True
        self._wake()

    # -- introspection -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._due)

    def busy(self) -> bool:
        """Work waiting now: a key being processed, or one that is due."""
        if self._processing:
            return True
        while self._heap:
            due, _, key = self._heap[0]
            if self._due.get(key) != due:
                heapq.heappop(self._heap)  # stale, as in ``get``
                continue
            return due <= self.clock.monotonic()
        return False

    def __contains__(self, key: object) -> bool:
        return key in self._due or key in self._dirty

    @property
    def in_flight(self) -> frozenset[K]:
        return frozenset(self._processing)

    def due_in(self, key: K) -> float | None:
        """Seconds until ``key`` is due (None if not queued)."""
        due = self._due.get(key, self._dirty.get(key))
        return None if due is None else due - self.clock.monotonic()

    # -- internals -----------------------------------------------------------------------

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _wait(self, seconds: float | None) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if seconds is None:
            await fut
            return
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        try:
            await asyncio.wait({fut, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            if not fut.done():
                fut.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
