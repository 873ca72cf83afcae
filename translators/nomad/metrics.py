"""Nomad allocation stats → ``NodeUsage`` (the ``MetricsSource`` capability of the Nomad backend).

Source: ``GET /v1/client/allocation/<id>/stats`` for the newest *running* allocation of every
job vkgate owns (the client agent answers; the server forwards).  One call per allocation,
at most ``stats_concurrency`` at a time, with the client's timeouts and **no retries**: a scrape
is periodic, so a failing allocation (404 because it just stopped, a 500, a timeout) is left out
of this scrape and logged at debug level — it never fails the others.

What Nomad reports (``Tasks.<task>.ResourceUsage``), checked against its source (v1.11.3) and a
real ``nomad agent -dev``:

* ``CpuStats.Percent`` — CPU time over wall time * 100, **per core**: a task that keeps one core
  busy reports ~100 (measured: a ``while :; do :; done`` raw_exec task read 94 to 99.7 on a 2-core
  node; docker's formula scales by the core count the same way), several busy cores read > 100.
  So ``usageNanoCores = Percent / 100 * 1e9``.
* ``CpuStats.TotalTicks`` is *not* a cumulative counter despite its name: it is
  ``Percent / 100 * (node MHz / cores)`` — the current rate in MHz.  Nomad has no cumulative CPU
  time in this API, so ``container_cpu_usage_seconds_total`` is **integrated** here: per task we
  keep the last sample time and a running core-seconds estimate and add
  ``Percent / 100 * Δt`` at every scrape.  The first sample of a task seeds the estimate with
  ``Percent / 100 * (now - StartedAt)`` so that metrics-server's rule for fresh containers
  (cumulative / (time - start)) yields the measured rate.  A task restart (new ``StartedAt``)
  starts a new counter; a task that is not running any more drops its state.  The counter is
  an estimate (Nomad's Percent is an average over its own sampling window), but it never goes
  backwards, and it exists from the first read: it starts at ``START_CORE_SECONDS`` (the CPU a
  process spends to start at all) and holds while Nomad's figure is unknown, like a kubelet's
  cgroup counter, which is never absent and never exactly 0 for a running container.
* Nomad's process-based stats (raw_exec/exec without cgroup stats) prime their CPU tracker on
  the first read and refresh at most every 5 s; a task that started with zero CPU time primes
  twice.  Measured: ``Percent`` stays exactly 0 for ~10 s after ``StartedAt`` even for a task
  burning a full core.  A 0 within ``PRIMING_SECONDS`` of the task start is therefore "not
  measured yet" (None), not an idle container; a 0 later is a real idle reading.
* Memory working set: ``Usage - Cache`` when ``Usage`` is measured (cgroup-based stats: docker,
  exec, cgroup v1/v2), else ``RSS`` (process-based stats measure only ``RSS`` and ``Swap``).
  The kubelet's working set is ``usage - inactive_file``; Nomad reports the whole page cache
  (``cache``/``file``), not only its inactive part, so ``Usage - Cache`` is a slightly lower
  figure — it is the closest one Nomad offers, and both exclude reclaimable cache, which is what
  eviction and ``kubectl top`` care about.  ``rssBytes`` = ``RSS``.
* A field counts as measured only when its name is in the stats' ``Measured`` list (Nomad
  zero-fills the rest); a zero memory figure for a running task is never real either.  Unknown
  stays None — never a fake zero (docs/design/kubelet-contract.md, "Resource metrics").
* Nomad clients before 1.7 count their own executor in a raw_exec task's process-based stats:
  the executor enters the task's cgroup before it starts the task (without cgroups it scans
  the process tree from itself; ``drivers/shared/executor`` in 1.6), so the task's ``Pids``
  hold it too, ~85 MB of RSS that is not the container's
  (observed on 1.6.3, docs/design/nomad.md "Nomad versions: 1.6.3 and 1.11.3").  For a client
  whose ``Version`` (from the node list) is below 1.7, a task with process-based memory and at
  least two pids has the lowest pid's figures — the executor, which started the task —
  subtracted from its RSS and CPU ``Percent``.

Node totals: a virtual node *is* its pods (a Nomad client also runs other work, so the client's
own figures would be wrong).  Memory and the CPU rate stay None here and the kubelet server sums
the pods when every pod's value is known.  The node's cumulative CPU is reported here instead,
because a plain sum over the current pods goes *down* whenever a pod ends or one allocation's
stats call fails, and metrics-server rejects a decreasing counter: it is the sum of every
task's counter since the gateway started, ended and restarted tasks included (a gateway restart
resets it, like a machine reboot resets a kubelet's).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from translators.base import BackendError, ContainerUsage, NodeUsage, PodRef, PodUsage
from translators.nomad.client import NomadClient
from translators.nomad.status import JobView, parse_time
from vkgate_core.clock import Clock
from vkgate_core.retry import NO_RETRY

log = logging.getLogger(__name__)

#: A Percent of exactly 0 this soon after the task started is Nomad's unprimed tracker.
PRIMING_SECONDS = 15.0
TaskKey = tuple[str, str]  # (allocation id, task name)


# --------------------------------------------------------------------------- pure mapping


def _measured(stats: Mapping[str, Any], field: str, name: str) -> float | None:
    """``stats[field]`` when Nomad says it measured it (``Measured`` lists ``name``).  Without a
    ``Measured`` list (very old agents) a non-zero value is taken as measured."""
    value = stats.get(field)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return None
    listed = stats.get("Measured")
    if isinstance(listed, list):
        return float(value) if name in listed else None
    return float(value) if value else None


def memory_usage(memory: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(working set, RSS) in bytes from a Nomad ``MemoryStats``; None = not measured."""
    rss = _measured(memory, "RSS", "RSS")
    rss_bytes = int(rss) if rss else None
    usage = _measured(memory, "Usage", "Usage")
    if usage:
        cache = _measured(memory, "Cache", "Cache") or 0.0
        return max(0, int(usage - cache)) or None, rss_bytes
    return rss_bytes, rss_bytes


_VERSION = re.compile(r"(\d+)\.(\d+)")


def executor_in_task(version: str) -> bool:
    """The client (its node ``Version``) counts its executor in a task's process stats (< 1.7)."""
    m = _VERSION.match(version or "")
    return m is not None and (int(m[1]), int(m[2])) < (1, 7)


def without_executor(usage: Mapping[str, Any], pids: Mapping[str, Any]) -> Mapping[str, Any]:
    """A task's ``ResourceUsage`` minus its executor's (the lowest of at least two ``Pids``),
    for clients where ``executor_in_task``; cgroup-based memory (``Usage`` measured) and a
    lone pid are left as they are."""
    memory: Mapping[str, Any] = usage.get("MemoryStats") or {}
    if "Usage" in (memory.get("Measured") or []) or len(pids) < 2:
        return usage
    try:
        executor: Mapping[str, Any] = pids[min(pids, key=int)] or {}
    except (TypeError, ValueError):
        return usage
    out = dict(usage)
    exe_memory: Mapping[str, Any] = executor.get("MemoryStats") or {}
    if isinstance(memory.get("RSS"), int | float) and isinstance(
        exe_memory.get("RSS"), int | float
    ):
        out["MemoryStats"] = {**memory, "RSS": max(0, memory["RSS"] - exe_memory["RSS"])}
    cpu: Mapping[str, Any] = usage.get("CpuStats") or {}
    exe_cpu: Mapping[str, Any] = executor.get("CpuStats") or {}
    if isinstance(cpu.get("Percent"), int | float) and isinstance(
        exe_cpu.get("Percent"), int | float
    ):
        out["CpuStats"] = {**cpu, "Percent": max(0.0, cpu["Percent"] - exe_cpu["Percent"])}
    return out


def cpu_percent(cpu: Mapping[str, Any], *, age: float | None) -> float | None:
    """Nomad's ``Percent`` (100 = one core), None when unmeasured or still priming (a 0 within
    ``PRIMING_SECONDS`` of the start, or with an unknown start)."""
    pct = _measured(cpu, "Percent", "Percent")
    if pct is None or pct < 0:
        return None
    if pct == 0 and (age is None or age < PRIMING_SECONDS):
        return None
    return pct


#: Core-seconds a container has used by the time it runs at all: exec and the runtime's set-up
#: cost about a millisecond of CPU.  Every counter starts here, so it exists (and is > 0) from the
#: first read, as a kubelet's cgroup counter does: metrics-server drops a pod whose CPU counter
#: reads exactly 0, and Nomad cannot tell CPU for the first ~10 s or ever for an idle task
#: (docs/design/nomad.md, "Resource usage").
START_CORE_SECONDS = 0.001


@dataclass
class _CpuState:
    started_at: _dt.datetime | None
    last: float
    core_seconds: float
    #: False while Nomad has not measured this task yet (only the start floor is counted)
    measured: bool


class CpuIntegrator:
    """Cumulative core-seconds per task from successive ``Percent`` samples (see module doc)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._state: dict[TaskKey, _CpuState] = {}
        #: Core-seconds of tasks that ended or restarted: keeps the node total monotonic.
        self.retired = 0.0
        self._seen = False

    def _retire(self, key: TaskKey) -> None:
        state = self._state.pop(key, None)
        if state is not None:
            self.retired += state.core_seconds

    def sample(
        self, key: TaskKey, percent: float | None, *, started_at: _dt.datetime | None
    ) -> float | None:
        """Add one sample; returns the running counter (None only for a task with neither a
        start time nor a measurement).

        The counter starts at ``START_CORE_SECONDS`` when the task is first seen.  An unknown
        ``percent`` holds the counter (the next known sample covers the gap); the first known
        one adds ``rate * (now - start)``, so metrics-server's rule for fresh containers
        (cumulative / (time - start)) yields the measured rate.
        """
        mono = self.clock.monotonic()
        state = self._state.get(key)
        if state is not None and state.started_at != started_at:
            self._retire(key)  # the task restarted: a new container, a new counter
            state = None
        if state is None:
            if percent is None and started_at is None:
                return None
            state = self._state[key] = _CpuState(started_at, mono, START_CORE_SECONDS, False)
            self._seen = True
        if percent is None:
            return state.core_seconds
        cores = percent / 100.0
        if not state.measured:
            age = (
                0.0
                if started_at is None
                else max(0.0, (self.clock.now() - started_at).total_seconds())
            )
            state.core_seconds = START_CORE_SECONDS + cores * age
            state.measured = True
        else:
            state.core_seconds += cores * max(0.0, mono - state.last)
        state.last = mono
        return state.core_seconds

    def keep(self, alive: Iterable[TaskKey]) -> None:
        """Forget tasks that are no longer running (their allocation ended or was replaced)."""
        wanted = set(alive)
        for key in [k for k in self._state if k not in wanted]:
            self._retire(key)

    def total(self) -> float | None:
        """Core-seconds of every task measured since this integrator started, ended ones
        included: the node's counter, which must never go backwards — not when a pod ends,
        restarts, or its stats call fails for one scrape.  None before any task was seen."""
        if not self._seen:
            return None
        return self.retired + sum(s.core_seconds for s in self._state.values())

    def __len__(self) -> int:
        return len(self._state)


@dataclass(frozen=True)
class StatsTarget:
    """One running allocation to scrape and the pod containers (tasks) it should report."""

    ref: PodRef
    alloc_id: str
    namespace: str
    region: str
    #: running task name → its StartedAt
    tasks: Mapping[str, _dt.datetime | None]
    started_at: _dt.datetime | None
    #: the Nomad client the allocation runs on
    node_id: str = ""

    def task_keys(self) -> list[TaskKey]:
        return [(self.alloc_id, t) for t in self.tasks]


def targets(views: Iterable[JobView]) -> list[StatsTarget]:
    """The newest running allocation of every job, with its running container tasks."""
    out: list[StatsTarget] = []
    for view in views:
        running = [a for a in view.allocs.values() if a.get("ClientStatus") == "running"]
        if not running:
            continue
        alloc = max(running, key=lambda a: int(a.get("CreateIndex") or 0))
        names = set(view.containers) | set(view.init_containers)
        tasks: dict[str, _dt.datetime | None] = {}
        for name, ts in sorted((alloc.get("TaskStates") or {}).items()):
            if ts.get("State") == "running" and (not names or name in names):
                tasks[name] = parse_time(ts.get("StartedAt"))
        if not tasks:
            continue
        out.append(
            StatsTarget(
                ref=view.ref,
                alloc_id=str(alloc["ID"]),
                namespace=view.namespace,
                region=view.region,
                tasks=tasks,
                started_at=parse_time(alloc.get("CreateTime")),
                node_id=str(alloc.get("NodeID") or ""),
            )
        )
    return out


def pod_usage(
    target: StatsTarget,
    stats: Mapping[str, Any],
    cpu: CpuIntegrator,
    *,
    executor_counted: bool = False,
) -> PodUsage:
    """One allocation's stats reply → ``PodUsage`` (one container per running task).
    ``executor_counted``: the client counts its executor in the tasks (``executor_in_task``)."""
    tasks: Mapping[str, Any] = stats.get("Tasks") or {}
    now = cpu.clock.now()
    containers: list[ContainerUsage] = []
    for name, started in target.tasks.items():
        usage = (tasks.get(name) or {}).get("ResourceUsage") or {}
        if executor_counted:
            usage = without_executor(usage, (tasks.get(name) or {}).get("Pids") or {})
        age = None if started is None else (now - started).total_seconds()
        pct = cpu_percent(usage.get("CpuStats") or {}, age=age)
        working_set, rss = memory_usage(usage.get("MemoryStats") or {})
        containers.append(
            ContainerUsage(
                name=name,
                cpu_core_seconds=cpu.sample((target.alloc_id, name), pct, started_at=started),
                cpu_nano_cores=None if pct is None else round(pct / 100.0 * 1e9),
                memory_working_set_bytes=working_set,
                memory_rss_bytes=rss,
                started_at=started,
            )
        )
    return PodUsage(ref=target.ref, containers=tuple(containers), started_at=target.started_at)


def node_usage(
    found: Sequence[StatsTarget],
    replies: Sequence[Mapping[str, Any] | None],
    cpu: CpuIntegrator,
    *,
    node_versions: Mapping[str, str] | None = None,
) -> NodeUsage:
    """One scrape: the targets with their stats replies (None = that call failed: the pod is
    left out, but its CPU state is kept so the counter continues next time) → ``NodeUsage``.
    ``node_versions``: NodeID → the client's Nomad version (unknown: taken as 1.7 or later)."""
    versions = node_versions or {}
    pods = [
        pod_usage(t, r, cpu, executor_counted=executor_in_task(versions.get(t.node_id, "")))
        for t, r in zip(found, replies, strict=True)
        if r is not None
    ]
    cpu.keep(k for t in found for k in t.task_keys())
    return NodeUsage(time=cpu.clock.now(), pods=tuple(pods), cpu_core_seconds=cpu.total())


# --------------------------------------------------------------------------- I/O


class NomadMetrics:
    """Scrapes allocation stats for a set of job views; keeps the CPU integration state."""

    def __init__(self, client: NomadClient, *, clock: Clock, concurrency: int = 8) -> None:
        self.client = client
        self.cpu = CpuIntegrator(clock)
        self.concurrency = max(1, concurrency)
        #: NodeID → the client's Nomad version, kept current by the translator's node lists
        self.node_versions: dict[str, str] = {}

    async def _stats(
        self, target: StatsTarget, gate: asyncio.Semaphore
    ) -> Mapping[str, Any] | None:
        async with gate:
            try:
                reply = await self.client.call(
                    "GET",
                    f"/client/allocation/{target.alloc_id}/stats",
                    namespace=target.namespace,
                    region=target.region,
                    retry=NO_RETRY,  # not retried: the next scrape is the retry
                )
            except BackendError as exc:
                log.debug(
                    "nomad stats of allocation %s (pod %s) left out: %s",
                    target.alloc_id,
                    target.ref.key,
                    exc,
                )
                return None
        data = reply.data
        return data if isinstance(data, Mapping) else None

    async def usage(self, views: Sequence[JobView]) -> NodeUsage:
        found = targets(views)
        gate = asyncio.Semaphore(self.concurrency)
        replies = await asyncio.gather(*(self._stats(t, gate) for t in found))
        return node_usage(found, replies, self.cpu, node_versions=self.node_versions)
