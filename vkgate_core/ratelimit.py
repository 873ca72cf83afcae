"""The one token bucket: ``burst`` tokens, refilled at ``qps`` per second (qps <= 0: off).

Two kinds of caller share it: the kube client's request budgets (``kube.qps``/``kube.burst``
and the Events' own ``kube.event_qps``/``kube.event_burst``, docs/design/kube-client.md,
"Default limits") wait for a token with ``acquire``; the pod work queue's retry limit
(gateway/pods/queue.py) only asks how long a retry must wait, ``reserve``, and folds that into
the key's due time.  A token is taken at once, the balance possibly going negative, so
concurrent callers queue in arrival order and each waits for its own token.

Time comes from the caller's clock (``vkgate_core.clock.Clock`` satisfies ``Ticker``), so
tests run it on fake time.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Ticker", "TokenBucket"]


class Ticker(Protocol):
    """The part of a clock a bucket reads."""

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class TokenBucket:
    """Client-side rate limit: ``burst`` tokens, refilled at ``qps`` per second; qps <= 0 = off."""

    def __init__(self, qps: float, burst: int, *, clock: Ticker) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock.monotonic()

    def reserve(self) -> float:
        """Take a token now; the seconds until it is really there (0.0: at once)."""
        if self.qps <= 0:
            return 0.0
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        """Take a token, waiting until it is there."""
        wait = self.reserve()
        if wait > 0:
            await self._clock.sleep(wait)
