"""Jittered exponential backoff as data, for loops that retry until cancelled.

``Backoff.delay(n)`` is the wait after the n-th consecutive failure (n >= 1):
``min(cap, base * factor**(n-1))`` scaled by a random factor in ``[1 - jitter, 1]``.  The
jitter only shortens a delay, so ``cap`` is a hard upper bound and many agents that failed at
the same moment (API server restart) spread their retries instead of stampeding.  With
``jitter_up`` the factor is in ``[1, 1 + jitter]`` (still never above ``cap``): then ``base`` is
a floor, for the pod work queue and the translation backstop ("never two renders in a minute",
gateway/pods/translation.py).  ``jitter=0`` gives the plain doubling (the kubelet's serving
certificate requests, gateway/kubelet/auth/csr.py).

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


# --------------------------------------------------------------------------- container restarts

#: The kubelet's container restart backoff: 10 s doubling to 5 min, no jitter
#: (``backOffPeriod`` and ``MaxContainerBackOff`` of ``pkg/kubelet``; docs/design/probes.md,
#: "Restart backoff").
RESTART_BACKOFF = Backoff(base=10.0, factor=2.0, cap=300.0, jitter=0.0)


def restart_reset(backoff: Backoff = RESTART_BACKOFF) -> float:
    """How long after its last back-off a container's delay starts over at ``base``: twice the
    cap (``flowcontrol.Backoff``'s ``hasExpired``), 10 minutes for the kubelet."""
    return 2.0 * backoff.cap


@dataclass
class _Entry:
    delay: float
    updated: float


class RestartBackoff:
    """The kubelet's per-container restart backoff (``doBackOff`` of ``kuberuntime`` over
    client-go's ``flowcontrol.Backoff``), on seconds of one clock.

    ``wait(key, finished, now)`` is the kubelet's decision when it would start the container
    again: the seconds still to wait (the container is in ``CrashLoopBackOff``, ``delay(key)``
    is the figure of its message), or ``0.0`` — start it now, and the next exit backs off
    longer.  The first exit restarts at once and arms ``base``; each restart while armed
    doubles it up to ``cap``; an entry untouched for ``restart_reset`` (a container that ran
    about 10 minutes) starts over.
    """

    def __init__(self, backoff: Backoff = RESTART_BACKOFF) -> None:
        self.backoff = backoff
        self._entries: dict[str, _Entry] = {}

    def _expired(self, entry: _Entry, at: float) -> bool:
        return at - entry.updated > restart_reset(self.backoff)

    def delay(self, key: str) -> float:
        """The current back-off of ``key`` (0 when it has none)."""
        entry = self._entries.get(key)
        return entry.delay if entry is not None else 0.0

    def in_backoff_since(self, key: str, finished: float, now: float) -> bool:
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, finished):
            return False
        return now - finished < entry.delay

    def next(self, key: str, now: float) -> None:
        """Record a restart at ``now``: arm ``base``, or double the armed delay (up to ``cap``)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, now):
            self._entries[key] = _Entry(self.backoff.base, now)
        else:
            entry.delay = min(self.backoff.cap, entry.delay * self.backoff.factor)
            entry.updated = now

    def wait(self, key: str, finished: float, now: float) -> float:
        """Seconds until the container that exited at ``finished`` may start (0: start now,
        recorded as a restart)."""
        if self.in_backoff_since(key, finished, now):
            return finished + self.delay(key) - now
        self.next(key, now)
        return 0.0

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def gc(self, now: float) -> None:
        """Drop entries that would start over anyway (the kubelet's housekeeping)."""
        for key in [k for k, e in self._entries.items() if self._expired(e, now)]:
            del self._entries[key]


def go_duration(seconds: float) -> str:
    """Whole seconds as Go's ``time.Duration.String`` writes them: ``10s``, ``1m20s``,
    ``5m0s``, ``1h0m0s`` (the figure in the kubelet's "back-off 5m0s restarting …")."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
