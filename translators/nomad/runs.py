"""Where each run of a restarted task begins in its Nomad log files (docs/kubelet.md, "Logs").

Nomad restarts a task inside the same allocation and appends every run to the same log files
(``alloc/logs/<task>.stdout.N``).  ``kubectl logs`` must show the current run only and
``--previous`` the one before, so vkgate records the boundaries itself: whenever the status
reconciler sees a task whose latest ``Terminated`` event is new *and* the task is not running
again yet (Nomad waits ``restart_delay`` before the next run), it asks Nomad for the current
sizes of the task's stdout and stderr — the byte offsets (``origin=start``, over all rotated
files) where that run ended.  ``Runs.window`` turns those ends into the byte range to read.

Limits, stated where the logs are served: boundaries live in memory (a vkgate restart forgets
them: the current log then starts at the oldest byte Nomad kept); a run that ended while vkgate
was not watching (or a restart faster than the event stream) merges with the next one.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from translators.nomad.status import parse_time

#: (stdout bytes, stderr bytes) at the end of one run.
Sizes = tuple[int, int]
KINDS = ("stdout", "stderr")


@dataclass(frozen=True)
class Window:
    """One run's log: ``start``/``end`` byte offsets per stream (``end`` None: still growing)
    and when the run started (None when Nomad's events no longer say)."""

    start: Mapping[str, int]
    end: Mapping[str, int | None]
    started_at: _dt.datetime | None

    @property
    def whole(self) -> bool:
        """Everything Nomad holds (one run so far): no range to apply."""
        return not any(self.start.values()) and all(e is None for e in self.end.values())


def last_terminated(ts: Mapping[str, Any]) -> int | None:
    """Time (unix ns) of the task's latest ``Terminated`` event."""
    for e in reversed(ts.get("Events") or []):
        if e.get("Type") == "Terminated":
            return int(e.get("Time") or 0)
    return None


def run_starts(ts: Mapping[str, Any]) -> list[_dt.datetime]:
    """Times of the ``Started`` events Nomad still lists (its last 10 events), oldest first."""
    return [
        t
        for e in ts.get("Events") or []
        if e.get("Type") == "Started" and (t := parse_time(e.get("Time"))) is not None
    ]


@dataclass
class Runs:
    """Recorded run ends per (allocation, task), keyed by the ``Terminated`` event's time."""

    ends: dict[tuple[str, str], dict[int, Sizes]] = field(default_factory=dict)
    #: Run ends whose sizes Nomad would not give (allocation collected, no ``read-fs``):
    #: not asked again.
    unknown: set[tuple[str, str, int]] = field(default_factory=set)

    def needs(self, alloc: Mapping[str, Any]) -> list[str]:
        """Tasks of ``alloc`` whose latest run just ended and whose end is not recorded."""
        out = []
        for task, ts in (alloc.get("TaskStates") or {}).items():
            term = last_terminated(ts or {})
            if term is None or (ts or {}).get("State") == "running":
                continue
            key = (str(alloc.get("ID")), task)
            if term not in self.ends.get(key, {}) and (*key, term) not in self.unknown:
                out.append(task)
        return out

    def record(self, alloc_id: str, task: str, terminated: int, sizes: Sizes) -> None:
        self.ends.setdefault((alloc_id, task), {})[terminated] = sizes

    def forget(self, alloc_ids: Sequence[str]) -> None:
        for key in [k for k in self.ends if k[0] in alloc_ids]:
            del self.ends[key]
        self.unknown = {u for u in self.unknown if u[0] not in alloc_ids}

    def window(
        self, alloc_id: str, task: str, ts: Mapping[str, Any], *, previous: bool
    ) -> Window | None:
        """The current (or previous) run's byte range; None for ``previous`` when vkgate knows
        of no earlier run in this allocation.

        ``started_at`` is a lower bound of every line's time in the window: the run's start
        when the recorded boundaries match Nomad's run count exactly, else None (the caller
        falls back to the allocation's creation)."""
        recorded = self.ends.get((alloc_id, task), {})
        ends = [s for _, s in sorted(recorded.items())]
        term = last_terminated(ts)
        # Not running and its last run's end recorded: that run is the current container (as
        # the kubelet shows the dead container during CrashLoopBackOff and after the end).
        ended_last = ts.get("State") != "running" and term is not None and term in recorded
        # bounds[i] = where run i starts
        bounds: list[Sizes] = [(0, 0), *ends]
        current = len(bounds) - (2 if ended_last else 1)
        run = current - 1 if previous else current
        if run < 0:
            return None
        # Nomad counts a restart at its Restarting event: runs ended = Restarts (+1 once dead)
        ended = int(ts.get("Restarts") or 0) + (1 if ts.get("State") == "dead" else 0)
        exact = len(ends) == ended
        starts = run_starts(ts)
        back = current - run
        started: _dt.datetime | None = None
        if exact and back == 0:
            started = parse_time(ts.get("StartedAt")) or (starts[-1] if starts else None)
        elif exact and len(starts) > back:
            started = starts[-1 - back]
        end = bounds[run + 1] if run + 1 < len(bounds) else None
        return Window(
            start=dict(zip(KINDS, bounds[run], strict=True)),
            end=dict(zip(KINDS, end if end is not None else (None, None), strict=True)),
            started_at=started,
        )
