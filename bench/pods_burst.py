"""A burst of pods on a real API server: vkgate against an ideal kubelet, same run, same server.

Run: ``python -m bench.pods_burst [--pods 200] [--rounds 1] [--write-docs]``.

One etcd + kube-apiserver (``devstack.controlplane``, loopback only) serves every agent
in turn.  For each agent (``bench.agents``): start it for a fresh node name, let it settle,
then the harness

1. opens a watch on a fresh namespace, creates N pods bound to the node (``spec.nodeName``,
   ``--concurrency`` creates in flight) and waits until every pod is Running;
2. deletes them all (default grace period) and waits until the watch has seen every DELETED.

Per pod, *create→Running* runs from the moment the harness sends that pod's create request to
the first watch event with ``status.phase=Running``, and *delete→gone* from its DELETE request
to the DELETED event: what a user waits for, on one monotonic clock.  Not used: the pod's
``creationTimestamp`` and condition times (one-second resolution, too coarse), and the watch's
ADDED event as the start (the harness's loop, busy sending creates, can read ADDED and a fast
agent's Running update in one batch, which made the baseline look instantaneous).  Wall times
run from the first request sent to the last event seen.

Also recorded: the agent's API writes (its own ``vkgate_api_writes_total`` counters, and the
API server's ``apiserver_request_total`` minus the harness's own writes as a cross-check), the
agent's RSS (``VmRSS`` idle, after the burst, ``VmHWM`` peak) and CPU seconds
(``utime+stime``), and the CPU the API server and etcd spent on each agent's burst.

The baseline is ``bench.ideal_kubelet`` with the same client and rate limit: every vkgate
number is reported as a ratio to it.  ``--rounds`` repeats both agents, alternating their
order, and reports medians.  Every wait is bounded (``--timeout`` per phase); everything runs
on 127.0.0.1 and every process is stopped at the end, also on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import procstat, report
from bench import profile as bench_profile
from bench.agents import Agent, IdealKubeletAgent, VkgateAgent, Writes
from bench.go_agents import GO_BURST, GO_QPS, GoFloorAgent, GoVkBinaryAgent, GoVkLibAgent
from devstack.controlplane import ControlPlane
from gateway.kube.client import KubeClient
from gateway.kube.errors import ApiError, Gone, NotFound

MAX_PODS = 10_000
#: Longest wait for trailing Events after the last pod is gone (seconds).
TRAILING_MAX = 120.0
#: ``--agents`` choices (bench/README.md has what each is; the Go ones: ``bench.go_agents``).
AGENT_NAMES = ("vkgate", "ideal-kubelet", "go-vk-lib", "go-floor", "go-vk-binary")
#: Resources whose writes are charged to the pods (the rest — nodes, leases — is background).
POD_RESOURCES = ("pods", "pods/status", "events")
_APISERVER_LINE = "apiserver_request_total{"
_WRITE_VERBS = {
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "APPLY": "patch",
    "DELETE": "delete",
}


# --------------------------------------------------------------------------- per-run data


@dataclass
class PodTimes:
    sent: float | None = None  # harness: create request about to be sent
    running: float | None = None  # watch: first phase=Running
    delete_sent: float | None = None  # harness: DELETE request about to be sent
    deleted: float | None = None  # watch: DELETED
    phase: str = ""


@dataclass
class RunResult:
    agent: str
    round: int
    pods: int
    running_wall: float = float("nan")
    gone_wall: float = float("nan")
    to_running: list[float] = field(default_factory=list)
    to_gone: list[float] = field(default_factory=list)
    not_running: int = 0
    not_gone: int = 0
    agent_writes: Writes | None = None
    #: the agent's own writes from the first create to all Running (the rest: delete phase)
    writes_create: Writes | None = None
    #: the agent's client rate limit (qps, burst) when it has one
    rate_limit: tuple[float, int] | None = None
    #: seconds from the first create sent to the first delete sent
    delete_offset: float = 0.0
    server_writes: Writes = field(default_factory=Counter)
    #: pod/event writes the API server answered with 4xx/5xx (404/409: a redundant write)
    server_refused: Writes = field(default_factory=Counter)
    #: the agent's own Event outcomes during the round (posted, aggregated, failed, dropped)
    event_outcomes: Counter[str] | None = None
    #: Events in the run's namespace at the end, by reason (occurrences, ``count`` included)
    event_reasons: Counter[str] = field(default_factory=Counter)
    rss_idle: int | None = None
    rss_running: int | None = None
    rss_after: int | None = None
    rss_peak: int | None = None
    cpu_create: float | None = None
    cpu_delete: float | None = None
    apiserver_cpu: float | None = None
    etcd_cpu: float | None = None
    #: seconds after all pods were gone until the agent's Event writes stopped (trailing work)
    trailing: float | None = None
    #: agent CPU from the end of the delete phase to the end of the trailing work
    cpu_trailing: float | None = None
    #: Event writes the agent made after all pods were gone (API server's counters)
    events_trailing: int = 0
    #: agent CPU per second with every pod Running and nothing happening (``--idle``)
    idle_core_share: float | None = None
    #: the harness's own CPU over the round (its creates, deletes, watch, scraping)
    harness_cpu: float | None = None
    #: 1-minute load average when the round started and when it ended
    load: tuple[float, float] | None = None
    description: str = ""
    error: str = ""

    @property
    def cpu_all(self) -> float | None:
        """Agent CPU over the whole burst: create, delete and the trailing Events."""
        if self.cpu_create is None:
            return None
        return self.cpu_create + (self.cpu_delete or 0) + (self.cpu_trailing or 0)

    def floor(self, phase: str) -> float | None:
        """Seconds of ``phase`` ("create" or "delete") the agent's own token bucket alone
        imposes: the bucket is full when the burst starts (the agent idled), so the last write
        of the create phase cannot leave before (create writes - burst) / qps, and the last of
        the delete phase not before (all writes - burst) / qps after the start.  Events are
        left out: they have their own bucket (``kube.event_qps``/``event_burst``)."""
        if self.rate_limit is None or self.agent_writes is None or self.writes_create is None:
            return None
        qps, burst = self.rate_limit
        if qps <= 0:
            return None
        create = sum(n for (_, res), n in self.writes_create.items() if res != "events")
        if phase == "create":
            return max(0.0, create - burst) / qps
        total = sum(n for (_, res), n in self.agent_writes.items() if res != "events")
        return max(0.0, (total - burst) / qps - self.delete_offset, (total - create - burst) / qps)

    def pod_writes(self, counts: Writes | None) -> float | None:
        if counts is None or not self.pods:
            return None
        return sum(n for (_, res), n in counts.items() if res in POD_RESOURCES) / self.pods


# --------------------------------------------------------------------------- helpers


def pod_manifest(name: str, ns: str, node: str, run_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"bench-run": run_id}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "nginx:1.27"}],
        },
    }


def apiserver_requests(cp: ControlPlane) -> Counter[tuple[str, str, str]]:
    """Write requests the API server has answered, by (verb, resource[/sub], status code)."""
    req = urllib.request.Request(cp.url + "/metrics", headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, context=cp.ssl_context(), timeout=30) as resp:
        return parse_apiserver_requests(resp.read().decode())


def parse_apiserver_requests(text: str) -> Counter[tuple[str, str, str]]:
    """``apiserver_request_total`` write verbs from a Prometheus text exposition."""
    out: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith(_APISERVER_LINE):
            continue
        labels_part, _, value = line.rpartition("} ")
        pairs = (kv.split("=", 1) for kv in labels_part[len(_APISERVER_LINE) :].split(","))
        labels = {k: v.strip('"') for k, v in pairs}
        verb = _WRITE_VERBS.get(labels.get("verb", ""))
        if verb is None:
            continue
        res = labels.get("resource", "")
        if labels.get("subresource"):
            res += "/" + labels["subresource"]
        out[(verb, res, labels.get("code", ""))] += int(float(value))
    return out


def by_resource(requests: Counter[tuple[str, str, str]], *, refused: bool = False) -> Writes:
    """Sum over status codes (``refused``: only 4xx/5xx answers)."""
    out: Writes = Counter()
    for (verb, res, code), n in requests.items():
        if not refused or code[:1] in ("4", "5"):
            out[(verb, res)] += n
    return +out


def diff(after: Writes | None, before: Writes | None) -> Writes | None:
    if after is None:
        return None
    out: Writes = Counter()
    for k, v in after.items():
        d = v - (before or Counter()).get(k, 0)
        if d:
            out[k] = d
    return out


def cpu_delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


class Tracker:
    """Watches the benchmark namespace and timestamps every pod's transitions."""

    def __init__(self, client: KubeClient, ns: str, n: int) -> None:
        self.client = client
        self.ns = ns
        self.n = n
        self.pods: dict[str, PodTimes] = {}
        self.all_running = asyncio.Event()
        self.all_gone = asyncio.Event()
        self.ready = asyncio.Event()
        self.relists = 0

    def _times(self, name: str) -> PodTimes:
        return self.pods.setdefault(name, PodTimes())

    def _observe(self, kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        t = self._times(name)
        t.phase = (obj.get("status") or {}).get("phase", "")
        if t.phase == "Running" and t.running is None:
            t.running = now
        if kind == "DELETED" and t.deleted is None:
            t.deleted = now
        self._check()

    def _check(self) -> None:
        if len(self.pods) >= self.n:
            if sum(t.running is not None for t in self.pods.values()) >= self.n:
                self.all_running.set()
            if sum(t.deleted is not None for t in self.pods.values()) >= self.n:
                self.all_gone.set()

    async def run(self) -> None:
        path = f"/api/v1/namespaces/{self.ns}/pods"
        while True:
            listing = await self.client.list(path)
            now = time.monotonic()
            listed = {p["metadata"]["name"] for p in listing["items"]}
            if self.ready.is_set():  # a relist after 410: time what we missed as "now"
                self.relists += 1
                for name, t in self.pods.items():
                    if name not in listed and t.deleted is None:
                        t.deleted = now
            for p in listing["items"]:
                self._observe("ADDED", p, now)
            rv = listing["metadata"]["resourceVersion"]
            self.ready.set()
            try:
                while True:
                    params = {
                        "resourceVersion": rv,
                        "allowWatchBookmarks": True,
                        "timeoutSeconds": 600,
                    }
                    async for ev in self.client.watch(path, params=params):
                        now = time.monotonic()
                        obj = ev["object"]
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            self._observe(ev["type"], obj, now)
            except Gone:
                continue


async def bounded(n: int, concurrency: int, fn: Callable[[int], Any]) -> list[BaseException]:
    """Run ``fn(0..n-1)`` with at most ``concurrency`` in flight; return the errors."""
    sem = asyncio.Semaphore(concurrency)
    errors: list[BaseException] = []

    async def one(i: int) -> None:
        async with sem:
            try:
                await fn(i)
            except ApiError as exc:
                errors.append(exc)

    await asyncio.gather(*(one(i) for i in range(n)))
    return errors


# --------------------------------------------------------------------------- one agent, one burst


async def run_burst(
    cp: ControlPlane,
    client: KubeClient,
    agent: Agent,
    *,
    n: int,
    round_no: int,
    concurrency: int,
    phase_timeout: float,
    settle: float,
    trailing_quiet: float = 3.0,
    profile: Path | None = None,
    idle_window: float = 0.0,
) -> RunResult:
    run_id = uuid.uuid4().hex[:6]
    node = f"bench-{agent.name}-{run_id}"
    ns = f"bench-{run_id}"
    res = RunResult(agent.name, round_no, n)
    recorder: bench_profile.Recorder | None = None
    harness_cpu0 = time.process_time()
    load0 = os.getloadavg()[0]
    await client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        agent.start(node)  # from the main thread: children die with it (PR_SET_PDEATHSIG)
        res.description = agent.describe()
        res.rate_limit = getattr(agent, "rate_limit", None)
        await asyncio.sleep(settle)
        idle = procstat.sample(agent.pid)
        res.rss_idle = idle.rss_bytes
        api_before = await asyncio.to_thread(apiserver_requests, cp)
        agent_before = await asyncio.to_thread(agent.api_writes)
        outcomes = getattr(agent, "event_outcomes", None)
        events_before = await asyncio.to_thread(outcomes) if outcomes is not None else None
        harness_before = Counter(client.stats)
        srv0, etcd0 = procstat.cpu_seconds(cp.apiserver.pid), procstat.cpu_seconds(cp.etcd.pid)

        tracker = Tracker(client, ns, n)
        watch = asyncio.create_task(tracker.run())
        try:
            await asyncio.wait_for(tracker.ready.wait(), 30)
            names = [f"p{i:04d}" for i in range(n)]

            async def create(i: int) -> None:
                tracker._times(names[i]).sent = time.monotonic()
                await client.create(
                    f"/api/v1/namespaces/{ns}/pods", pod_manifest(names[i], ns, node, run_id)
                )

            if profile is not None and agent.pid is not None:
                recorder = bench_profile.Recorder(agent.pid, profile)
            t0 = time.monotonic()
            errors = await bounded(n, concurrency, create)
            if errors:
                raise RuntimeError(f"{len(errors)} creates failed, first: {errors[0]}")
            try:
                await asyncio.wait_for(tracker.all_running.wait(), phase_timeout)
            except TimeoutError:
                res.error = f"not all Running after {phase_timeout:.0f}s"
            t_running = max((t.running for t in tracker.pods.values() if t.running), default=t0)
            res.running_wall = t_running - t0
            res.not_running = sum(t.running is None for t in tracker.pods.values())
            res.to_running = [
                t.running - t.sent
                for t in tracker.pods.values()
                if t.running is not None and t.sent is not None
            ]
            mid = procstat.sample(agent.pid)
            res.writes_create = diff(await asyncio.to_thread(agent.api_writes), agent_before)
            res.rss_running = mid.rss_bytes
            res.cpu_create = cpu_delta(mid.cpu_seconds, idle.cpu_seconds)
            if idle_window > 0:
                # Steady state with every pod Running: first let the create phase's Events
                # finish (their CPU counts as create work), then measure a quiet window.
                await wait_events_quiet(cp, trailing_quiet, min(phase_timeout, TRAILING_MAX))
                settled = procstat.sample(agent.pid)
                res.cpu_create = cpu_delta(settled.cpu_seconds, idle.cpu_seconds)
                await asyncio.sleep(idle_window)
                mid = procstat.sample(agent.pid)
                spent = cpu_delta(mid.cpu_seconds, settled.cpu_seconds)
                res.idle_core_share = None if spent is None else spent / idle_window

            async def delete(i: int) -> None:
                tracker._times(names[i]).delete_sent = time.monotonic()
                with contextlib.suppress(NotFound):
                    await client.delete(f"/api/v1/namespaces/{ns}/pods/{names[i]}")

            t1 = time.monotonic()
            res.delete_offset = t1 - t0
            errors = await bounded(n, concurrency, delete)
            if errors:
                raise RuntimeError(f"{len(errors)} deletes failed, first: {errors[0]}")
            try:
                await asyncio.wait_for(tracker.all_gone.wait(), phase_timeout)
            except TimeoutError:
                res.error = (
                    res.error + "; " if res.error else ""
                ) + f"not all gone after {phase_timeout:.0f}s"
            t_gone = max((t.deleted for t in tracker.pods.values() if t.deleted), default=t1)
            res.gone_wall = t_gone - t1
            res.not_gone = sum(t.deleted is None for t in tracker.pods.values())
            res.to_gone = [
                t.deleted - t.delete_sent
                for t in tracker.pods.values()
                if t.deleted is not None and t.delete_sent is not None
            ]
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)

        end = procstat.sample(agent.pid)
        res.rss_after, res.rss_peak = end.rss_bytes, end.hwm_bytes
        res.cpu_delete = cpu_delta(end.cpu_seconds, mid.cpu_seconds)
        # Trailing work: Events the agent still writes after the last pod is gone.  Wait until
        # the API server has seen no Event write from anyone for ``quiet`` seconds (bounded).
        res.trailing, res.events_trailing = await wait_events_quiet(
            cp, trailing_quiet, min(phase_timeout, TRAILING_MAX)
        )
        trail = procstat.sample(agent.pid)
        res.cpu_trailing = cpu_delta(trail.cpu_seconds, end.cpu_seconds)
        if recorder is not None:
            recorder.stop()
            recorder = None
        res.apiserver_cpu = cpu_delta(procstat.cpu_seconds(cp.apiserver.pid), srv0)
        res.etcd_cpu = cpu_delta(procstat.cpu_seconds(cp.etcd.pid), etcd0)
        res.agent_writes = diff(await asyncio.to_thread(agent.api_writes), agent_before)
        if outcomes is not None and events_before is not None:
            after = await asyncio.to_thread(outcomes)
            res.event_outcomes = Counter({k: after[k] - events_before[k] for k in after})
        events = await client.list(f"/api/v1/namespaces/{ns}/events")
        for ev in events["items"]:
            res.event_reasons[str(ev.get("reason", ""))] += int(ev.get("count") or 1)
        requests = await asyncio.to_thread(apiserver_requests, cp)
        requests.subtract(api_before)
        server = by_resource(+requests)
        res.server_refused = Counter(
            {k: v for k, v in by_resource(+requests, refused=True).items() if k[1] in POD_RESOURCES}
        )
        harness = diff(Counter(client.stats), harness_before) or Counter()
        # the API server saw the harness's own creates/deletes too: charge only the agent
        res.server_writes = Counter(
            {k: v - harness.get(k, 0) for k, v in server.items() if v - harness.get(k, 0) > 0}
        )
    finally:
        if recorder is not None:
            recorder.stop()
        agent.stop()
    res.harness_cpu = time.process_time() - harness_cpu0
    res.load = (load0, os.getloadavg()[0])
    return res


async def wait_events_quiet(cp: ControlPlane, quiet: float, bound: float) -> tuple[float, int]:
    """Wait until the API server has seen no Event write for ``quiet`` seconds (at most
    ``bound``); returns (seconds until the last Event write, Event writes meanwhile)."""
    t0 = time.monotonic()
    first = await asyncio.to_thread(event_writes, cp)
    last, last_change = first, t0
    while time.monotonic() - last_change < quiet and time.monotonic() - t0 < bound:
        await asyncio.sleep(0.5)
        now_events = await asyncio.to_thread(event_writes, cp)
        if now_events != last:
            last, last_change = now_events, time.monotonic()
    return last_change - t0, last - first


def event_writes(cp: ControlPlane) -> int:
    """Event writes (create/patch/update) the API server has answered so far, by anyone."""
    return sum(
        n
        for (verb, res, _), n in apiserver_requests(cp).items()
        if res == "events" and verb in ("create", "patch", "update")
    )


# --------------------------------------------------------------------------- report


def _med(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v == v]
    return statistics.median(vals) if vals else None


def _fmt(v: float | None, unit: str = "s", digits: int = 2) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}{unit}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:,.2f}x"


def summarize(results: Sequence[RunResult], agent: str) -> dict[str, float | None]:
    rs = [r for r in results if r.agent == agent]

    def pct(attr: str, q: float) -> float | None:
        return _med([report.percentile(getattr(r, attr), q) for r in rs])

    return {
        "running_wall": _med([r.running_wall for r in rs]),
        "run_p50": pct("to_running", 50),
        "run_p90": pct("to_running", 90),
        "run_p99": pct("to_running", 99),
        "gone_wall": _med([r.gone_wall for r in rs]),
        "floor_create": _med([r.floor("create") for r in rs]),
        "floor_delete": _med([r.floor("delete") for r in rs]),
        "gone_p50": pct("to_gone", 50),
        "gone_p90": pct("to_gone", 90),
        "gone_p99": pct("to_gone", 99),
        "writes_agent": _med([r.pod_writes(r.agent_writes) for r in rs]),
        "writes_server": _med([r.pod_writes(r.server_writes) for r in rs]),
        "cpu_total": _med([r.cpu_all for r in rs]),
        "cpu_per_pod_ms": _med(
            [r.cpu_all / r.pods * 1000 if r.cpu_all is not None else None for r in rs]
        ),
        "cpu_trailing": _med([r.cpu_trailing for r in rs]),
        "trailing": _med([r.trailing for r in rs]),
        "events_trailing": _med([float(r.events_trailing) / r.pods for r in rs]),
        "harness_cpu": _med([r.harness_cpu for r in rs]),
        "idle_pct": _med(
            [r.idle_core_share * 100 if r.idle_core_share is not None else None for r in rs]
        ),
        "rss_idle": _med([r.rss_idle for r in rs]),
        "rss_running": _med([r.rss_running for r in rs]),
        "rss_peak": _med([r.rss_peak for r in rs]),
        "apiserver_cpu": _med([r.apiserver_cpu for r in rs]),
        "etcd_cpu": _med([r.etcd_cpu for r in rs]),
    }


def _writes_breakdown(counts: Writes | None, pods: int) -> str:
    if not counts:
        return "n/a"
    parts = [
        f"{verb} {res} {n / pods:.2f}"
        for (verb, res), n in sorted(counts.items())
        if res in POD_RESOURCES
    ]
    bg = sum(n for (_, res), n in counts.items() if res not in POD_RESOURCES)
    return "; ".join(parts) + (f" (+ {bg} node/lease/other writes in total)" if bg else "")


#: Baselines in order of preference: the client-go floor, else the Python one.
BASELINES = ("go-floor", "ideal-kubelet")


def baseline(agents: Sequence[str]) -> str:
    return next((b for b in BASELINES if b in agents), agents[0] if agents else "")


def markdown(results: Sequence[RunResult], *, args: argparse.Namespace, machine: list[str]) -> str:
    agents = list(dict.fromkeys(r.agent for r in results))
    base = baseline(agents)
    others = [a for a in agents if a != base] if base in agents else []
    sums = {a: summarize(results, a) for a in agents}
    desc = {r.agent: r.description for r in results}
    out = [
        f"## Pod burst on a real API server (`{args.command}`)",
        "",
    ]
    out += machine
    out += ["", "Agents (each on its own fresh node and namespace, same API server):", ""]
    out += [f"- **{a}**: {desc.get(a, '')}" for a in agents]
    rows: list[list[str]] = []

    def row(label: str, key: str, fmt: Callable[[float | None], str], better: str = "") -> None:
        cells = [label] + [fmt(sums[a][key]) for a in agents]
        cells += [_ratio(sums[a][key], sums[base][key]) for a in others]
        rows.append(cells)

    s = lambda v: _fmt(v, " s")  # noqa: E731
    row(f"create→all {args.pods} Running (wall)", "running_wall", s)
    row("  of which the client rate limit alone needs", "floor_create", s)
    row("create→Running p50 per pod", "run_p50", s)
    row("create→Running p90 per pod", "run_p90", s)
    row("create→Running p99 per pod", "run_p99", s)
    row("delete→all gone (wall)", "gone_wall", s)
    row("  of which the client rate limit alone needs", "floor_delete", s)
    row("delete→gone p50 per pod", "gone_p50", s)
    row("delete→gone p90 per pod", "gone_p90", s)
    row("delete→gone p99 per pod", "gone_p99", s)
    row("API writes per pod (agent's own counters)", "writes_agent", lambda v: _fmt(v, "", 2))
    row("API writes per pod (API server's counters)", "writes_server", lambda v: _fmt(v, "", 2))
    row(
        "Event writes per pod after all were gone (trailing)",
        "events_trailing",
        lambda v: _fmt(v, "", 2),
    )
    row("  trailing time until the API server saw no more Event writes", "trailing", s)
    row("agent CPU for the burst (create + delete + trailing)", "cpu_total", s)
    row("  of which trailing", "cpu_trailing", s)
    row(
        "agent CPU per pod (whole burst, Events included)",
        "cpu_per_pod_ms",
        lambda v: _fmt(v, " ms", 2),
    )
    row("agent RSS idle (MiB)", "rss_idle", lambda v: procstat.mib(None if v is None else int(v)))
    row(
        f"agent RSS with {args.pods} pods Running (MiB)",
        "rss_running",
        lambda v: procstat.mib(None if v is None else int(v)),
    )
    row(
        "agent RSS peak, VmHWM (MiB)",
        "rss_peak",
        lambda v: procstat.mib(None if v is None else int(v)),
    )
    if any(r.idle_core_share is not None for r in results):
        row(
            f"agent CPU at rest with {args.pods} pods Running (% of a core)",
            "idle_pct",
            lambda v: _fmt(v, " %", 2),
        )
    row("kube-apiserver CPU during the burst", "apiserver_cpu", s)
    row("etcd CPU during the burst", "etcd_cpu", s)
    row("harness CPU during the round (creates, deletes, watch, scrapes)", "harness_cpu", s)
    header = ["", *agents, *[f"{a} / {base}" for a in others]]
    med = " (median of the rounds)" if args.rounds > 1 else ""
    out += ["", f"### Results{med}", "", report.table(header, rows), ""]
    out += ["Writes per pod by verb and resource (agent's own counters, median round):", ""]
    for a in agents:
        rs = [r for r in results if r.agent == a]
        pick = sorted(rs, key=lambda r: r.pod_writes(r.agent_writes) or 0)[len(rs) // 2]
        refused = ", ".join(f"{v} {r} x{n}" for (v, r), n in sorted(pick.server_refused.items()))
        out.append(
            f"- {a}: {_writes_breakdown(pick.agent_writes, pick.pods)}"
            + (f"; refused by the API server (4xx): {refused}" if refused else "")
        )
        if pick.event_reasons:
            reasons = ", ".join(
                f"{r} {n / pick.pods:.2f}" for r, n in sorted(pick.event_reasons.items())
            )
            out.append(f"  - Events per pod by reason: {reasons}")
        if pick.event_outcomes is not None:
            outcomes = ", ".join(
                f"{o} {pick.event_outcomes[o]}"
                for o in ("posted", "aggregated", "failed", "dropped")
            )
            out.append(
                f"  - Events by the agent's own counter (vkgate_events_total) when the round "
                f"ended: {outcomes}; the rest were still queued"
            )
    if others:
        out += ["", f"Paired ratios, round by round (each agent / {base} in the same round):", ""]
        paired: list[list[str]] = []
        for rnd in sorted({r.round for r in results}):
            ref = next((r for r in results if r.round == rnd and r.agent == base), None)
            if ref is None:
                continue
            for a in others:
                r = next((x for x in results if x.round == rnd and x.agent == a), None)
                if r is None:
                    continue
                paired.append(
                    [
                        str(rnd),
                        a,
                        _ratio(r.running_wall, ref.running_wall),
                        _ratio(r.gone_wall, ref.gone_wall),
                        _ratio(r.cpu_all, ref.cpu_all),
                        f"{r.load[0]:.1f} → {r.load[1]:.1f}" if r.load else "n/a",
                    ]
                )
        out.append(
            report.table(
                ["round", "agent", "all Running", "all gone", "agent CPU", "load (1 min) during"],
                paired,
            )
        )
    problems = [r for r in results if r.error or r.not_running or r.not_gone]
    if problems:
        out += ["", "Problems seen:", ""]
        out += [
            f"- round {r.round} {r.agent}: {r.error or ''} (not Running: {r.not_running}, not gone: {r.not_gone})"
            for r in problems
        ]
    if args.rounds > 1:
        out += ["", "<details><summary>Every round</summary>", ""]
        out.append(
            report.table(
                [
                    "round",
                    "agent",
                    "all Running",
                    "p50",
                    "p99",
                    "all gone",
                    "writes/pod",
                    "agent CPU",
                    "RSS peak MiB",
                ],
                [
                    [
                        r.round,
                        r.agent,
                        _fmt(r.running_wall, " s"),
                        _fmt(report.percentile(r.to_running, 50), " s"),
                        _fmt(report.percentile(r.to_running, 99), " s"),
                        _fmt(r.gone_wall, " s"),
                        _fmt(r.pod_writes(r.agent_writes), "", 2),
                        _fmt(r.cpu_all, " s"),
                        procstat.mib(r.rss_peak),
                    ]
                    for r in results
                ],
            )
        )
        out += ["", "</details>"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- main


def vkgate_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "log": {"level": "info"},
        "backend": {
            "kind": "simulated",
            "simulated": {
                "start_delay": args.start_delay,
                "notify_interval": args.notify_interval,
                "state_file": "",
                "pods": max(500, args.pods + 10),
            },
        },
    }
    return report.apply_sets(settings, args.set)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.pods_burst", description=__doc__.split("\n")[0]
    )
    p.add_argument("--pods", type=int, default=200, help=f"pods per burst (1..{MAX_PODS})")
    p.add_argument("--rounds", type=int, default=1, help="repeat both agents, alternating (1..5)")
    p.add_argument(
        "--agents", default="ideal-kubelet,vkgate", help="comma-separated, first runs first"
    )
    p.add_argument("--concurrency", type=int, default=50, help="creates/deletes in flight (1..200)")
    p.add_argument("--start-delay", type=float, default=0.05, help="simulated Pending→Running (s)")
    p.add_argument("--notify-interval", type=float, default=0.1, help="simulated change poll (s)")
    p.add_argument("--settle", type=float, default=3.0, help="idle seconds after the agent starts")
    p.add_argument("--timeout", type=float, default=300.0, help="bound of each wait (s, ≤ 1800)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="vkgate setting, e.g. kube.qps=100 (JSON value); kube.qps/burst and "
        "pods.workers apply to the ideal kubelet too",
    )
    p.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    p.add_argument(
        "--json", type=Path, default=None, help="also write every round as JSON (for bench.plots)"
    )
    p.add_argument(
        "--idle",
        type=float,
        default=0.0,
        help="seconds of steady state to measure with every pod Running (0: none)",
    )
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory: py-spy the vkgate agent over round 1 (raw stacks + a summary)",
    )
    p.add_argument(
        "--label",
        default="",
        help="name for this configuration in the JSON (e.g. 'lifted', 'defaults')",
    )
    p.add_argument(
        "--section",
        default="pods_burst",
        help="docs section to (re)write, so several configurations can stand side by side",
    )
    p.add_argument("--doc", type=Path, default=report.DOC, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.command = " ".join(
        ["python -m bench.pods_burst", f"--pods {args.pods}", f"--rounds {args.rounds}"]
        + [f"--set {item}" for item in args.set]
    )
    if not re.fullmatch(r"[a-z0-9_-]+", args.section):
        p.error("--section: lowercase letters, digits, - and _")
    if not 1 <= args.pods <= MAX_PODS:
        p.error(f"--pods must be 1..{MAX_PODS}")
    if not 1 <= args.rounds <= 5 or not 1 <= args.concurrency <= 200:
        p.error("--rounds 1..5, --concurrency 1..200")
    if not 0 < args.timeout <= 1800:
        p.error("--timeout must be in (0, 1800]")
    args.agent_names = [a.strip() for a in args.agents.split(",") if a.strip()]
    unknown = set(args.agent_names) - set(AGENT_NAMES)
    if unknown or not args.agent_names:
        p.error(f"unknown agents {sorted(unknown)}; known: {', '.join(AGENT_NAMES)}")
    return args


async def run_all(cp: ControlPlane, args: argparse.Namespace, workdir: Path) -> list[RunResult]:
    settings = vkgate_settings(args)
    kube = settings.get("kube", {})
    qps, burst = float(kube.get("qps", 50.0)), int(kube.get("burst", 100))
    workers = int(settings.get("pods", {}).get("workers", 10))

    def make(name: str) -> Agent:
        if name == "vkgate":
            return VkgateAgent(cp, workdir, settings)
        if name == "go-vk-lib":
            return GoVkLibAgent(cp, workdir, workers=workers, start_delay=args.start_delay)
        if name == "go-floor":
            return GoFloorAgent(cp, workdir, qps=GO_QPS, burst=GO_BURST, workers=workers)
        if name == "go-vk-binary":
            return GoVkBinaryAgent(cp, workdir)
        return IdealKubeletAgent(cp, workdir, qps=qps, burst=burst, workers=workers)

    results: list[RunResult] = []
    # The harness must never be the bottleneck: no client-side rate limit worth the name.
    async with KubeClient.from_kubeconfig(cp.kubeconfig, qps=10_000, burst=10_000) as client:
        warm = min(20, args.pods)
        print(f"warm-up: {warm} pods with the ideal kubelet (not reported)", file=sys.stderr)
        await run_burst(
            cp,
            client,
            make("ideal-kubelet"),
            n=warm,
            round_no=0,
            concurrency=args.concurrency,
            phase_timeout=min(60.0, args.timeout),
            settle=0.5,
        )
        for rnd in range(1, args.rounds + 1):
            order = args.agent_names if rnd % 2 else list(reversed(args.agent_names))
            for name in order:
                print(f"round {rnd}: {name}, {args.pods} pods ...", file=sys.stderr)
                r = await run_burst(
                    cp,
                    client,
                    make(name),
                    n=args.pods,
                    round_no=rnd,
                    concurrency=args.concurrency,
                    phase_timeout=args.timeout,
                    settle=args.settle,
                    idle_window=args.idle,
                    profile=(
                        args.profile / f"{name}-{args.pods}.raw"
                        if args.profile is not None and name == "vkgate" and rnd == 1
                        else None
                    ),
                )
                print(
                    f"  all Running {r.running_wall:.2f}s, all gone {r.gone_wall:.2f}s, "
                    f"writes/pod {r.pod_writes(r.agent_writes)}; {r.error or 'ok'}",
                    file=sys.stderr,
                )
                results.append(r)
    return results


def write_json(path: Path, results: Sequence[RunResult], args: argparse.Namespace) -> None:
    """Every round's numbers (not the per-pod lists: their percentiles) for ``bench.plots``."""
    rows = []
    for r in results:
        rows.append(
            {
                "label": args.label,
                "agent": r.agent,
                "round": r.round,
                "pods": r.pods,
                "running_wall": r.running_wall,
                "gone_wall": r.gone_wall,
                "run_p50": report.percentile(r.to_running, 50),
                "run_p99": report.percentile(r.to_running, 99),
                "cpu_all": r.cpu_all,
                "cpu_per_pod_ms": r.cpu_all / r.pods * 1000 if r.cpu_all is not None else None,
                "rss_idle": r.rss_idle,
                "rss_running": r.rss_running,
                "rss_peak": r.rss_peak,
                "writes_per_pod": r.pod_writes(r.server_writes),
                "events_trailing": r.events_trailing,
                "trailing": r.trailing,
                "event_outcomes": dict(r.event_outcomes) if r.event_outcomes is not None else None,
                "harness_cpu": r.harness_cpu,
                "idle_core_share": r.idle_core_share,
                "apiserver_cpu": r.apiserver_cpu,
                "load": r.load,
                "description": r.description,
                "error": r.error,
            }
        )
    path.write_text(json.dumps(rows, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = report.loadavg()
    started = time.monotonic()
    with report.control_plane_session() as (cp, workdir):
        results = asyncio.run(run_all(cp, args, workdir))
    machine = report.machine_lines(
        load_before=load_before,
        load_after=report.loadavg(),
        extra=[
            f"binaries: {report.binary_versions('kube-apiserver', 'etcd')} (both on 127.0.0.1, "
            "etcd with --unsafe-no-fsync); harness, agents and servers share the same CPUs",
            f"burst: {args.pods} pods, {args.concurrency} creates/deletes in flight, "
            f"{args.rounds} round(s) after a {min(20, args.pods)}-pod warm-up; "
            f"the whole run took {time.monotonic() - started:.0f} s",
        ],
    )
    text = markdown(results, args=args, machine=machine)
    if args.profile is not None:
        raw = args.profile / f"vkgate-{args.pods}.raw"
        if raw.exists():
            text += (
                f"\n### Where vkgate's CPU goes (py-spy over round 1, {raw.name})\n\n"
                + bench_profile.summarize(raw)
            )
    sys.stdout.write(text)
    if args.json:
        write_json(args.json, results, args)
    if args.write_docs:
        path = report.write_section(args.section, text, doc=args.doc)
        print(f"\nwrote {path}", file=sys.stderr)
    return 0 if all(not r.error for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
