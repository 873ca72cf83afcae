"""Jittered exponential backoff as data, for loops that retry until cancelled.

``Backoff.delay(n)`` is the wait after the n-th consecutive failure (n >= 1):
``min(cap, base * factor**(n-1))`` scaled by a random factor in ``[1 - jitter, 1]``.  The
jitter only shortens a delay, so ``cap`` is a hard upper bound and many agents that failed at
the same moment (API server restart) spread their retries instead of stampeding.  With
``jitter_up`` the factor is in ``[1, 1 + jitter]`` (still never above ``cap``): then ``base`` is
a floor, for the pod work queue and the translation backstop ("never two renders in a minute",
gateway/pods/translation.py).  ``jitter=0`` gives the plain doubling (the kubelet's serving
certificate requests, gateway/kubelet/csr.py).

The one backoff calculator of vkgate's reconnect and resync loops (the Reflector, the node
Lease and start-up, the pod work queue, the backstop, CSR retries); the HTTP retry layer's
waits are steps, ``vkgate_core.retry.RetryPolicy`` (docs/design/retry.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.2
    jitter_up: bool = False

    def raw(self, failures: int) -> float:
        """The un-jittered delay after ``failures`` consecutive failures."""
        exp = min(max(failures, 1) - 1, 64)
        return float(min(self.cap, self.base * self.factor**exp))

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        raw = self.raw(failures)
        if self.jitter_up:
            return min(self.cap, raw * (1.0 + self.jitter * (rng or random).random()))
        return raw * (rng or random).uniform(1.0 - self.jitter, 1.0)
