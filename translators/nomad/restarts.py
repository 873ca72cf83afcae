"""Nomad 1.6.3's restart tracker as arithmetic, and the restart block vkgate derives from the
kubelet's backoff (docs/design/probes.md, "Restart backoff").

Nomad restarts a task inside its allocation (same client, same address, same local data — as a
kubelet restarts a container), but its ``restart`` block has no exponential delay: each of the
first ``Attempts`` exits of an ``Interval`` waits ``Delay`` plus up to 25 % jitter; the next one
(``Mode: delay``) waits until the interval ends, and the first exit after that starts a new
interval (``client/allocrunner/taskrunner/restarts/restarts.go``).  A running allocation keeps
the tracker it started with (nothing in the 1.6.3 client calls ``SetPolicy``), and a task that
is waiting cannot be restarted early (``Restart`` refuses a pending task), so vkgate cannot
steer the delays of a crash loop from outside: it shapes the block once, at submit.

The block: ``Delay`` = the kubelet's first back-off (10 s), ``Interval`` = ``Attempts`` x
``Delay`` + the kubelet's cap (5 min), so no wait is longer than a kubelet's longest; the
defaults (``restart_attempts`` 2) give a container that crashes at once 5 restarts in its first
10 minutes (the kubelet: 6) and 3 per 320 s after that (the kubelet: 1 per 5 min).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vkgate_core.backoff import RESTART_BACKOFF, Backoff, RestartBackoff

#: Nomad's jitter on ``Delay`` (``restarts.go``: ``jitter = 0.25``, added, never subtracted).
JITTER = 0.25


def interval_for(attempts: int, delay: float, backoff: Backoff = RESTART_BACKOFF) -> float:
    """The ``Interval`` that makes the stall after ``attempts`` quick restarts the kubelet's cap."""
    return attempts * delay + backoff.cap


@dataclass
class NomadRestarts:
    """One task's restart tracker (``RestartTracker.GetState`` for a failed exit, Mode delay),
    on seconds of one clock; ``start`` is when the task runner was created."""

    attempts: int
    interval: float
    delay: float
    start: float = 0.0
    count: int = 0

    def after_exit(self, now: float, jitter: float = 0.0) -> float:
        """The wait Nomad applies to an exit at ``now`` (``jitter`` in [0, 1) of its 25 %)."""
        if now >= self.start + self.interval:  # Nomad: now.After(end); a run takes > 0 s
            self.count, self.start = 0, now
        self.count += 1
        if self.count > self.attempts:
            return self.start + self.interval - now
        return self.delay * (1.0 + JITTER * jitter)


def restart_times(
    wait: Callable[[float], float], *, runs: int, run_for: float = 0.0
) -> list[float]:
    """When each of ``runs`` restarts begins for a container that exits ``run_for`` seconds
    after every start (the first start at 0); ``wait(exited)`` is the schedule's delay."""
    out: list[float] = []
    started = 0.0
    for _ in range(runs):
        exited = started + run_for
        started = exited + wait(exited)
        out.append(started)
    return out


def nomad_waits(attempts: int, interval: float, delay: float) -> Callable[[float], float]:
    """Nomad's restart delays (no jitter) for one task, as ``restart_times`` takes them."""
    return NomadRestarts(attempts, interval, delay).after_exit


def kubelet_waits(backoff: Backoff = RESTART_BACKOFF) -> Callable[[float], float]:
    """The kubelet's restart delays for one container (``RestartBackoff``), likewise."""
    tracker = RestartBackoff(backoff)

    def wait(exited: float) -> float:
        left = tracker.wait("c", exited, exited)
        if left > 0:
            tracker.wait("c", exited, exited + left)  # the restart it then makes
        return left

    return wait
