"""Thousands of pods through a real Nomad (mock_driver), side by side with a Nomad floor.

Run: ``python -m devstack.netns -- python -m bench.nomad_burst [--pods 1000] [--rounds 1]
[--rate 20] [--idle 30] [--write-docs]`` (docs/benchmarks.md, "Through a real Nomad").

One etcd + kube-apiserver (``devstack.controlplane``) and one Nomad 1.6.3 dev agent
(``devstack.nomad.launch_nomad(bench_allocs=N)``: a client declaring room for N small
allocations, log level WARN) serve every run, all on 127.0.0.1 — or, with ``--cluster``, the
e2e tier's Nomad topology (``devstack.nomad_cluster``: a server and two clients on their own
addresses in the bench's network namespace, ACLs on with vkgate on the shipped policy's token,
HTTP over mutual TLS; ``NomadTarget`` says which).  A counting proxy
(``bench.nomad_proxy``, a child process) sits in front of Nomad; vkgate and the floor both talk
to Nomad through it, so both are counted the same way.  Pods and jobs use the benchmark's
template ``bench/job_templates/nomad/mock_driver.j2``: every task on ``mock_driver`` running for
240 h, task logs disabled, 10 MB ephemeral disk (the pod's ``ephemeral-storage`` request).

Each round runs, in alternating order:

* **vkgate**: ``vkgate run`` (Nomad backend, every setting at its default except the template,
  ``mhz_per_core`` and the Node's pod capacity) for a fresh node; the harness creates N pods bound
  to it by ``spec.nodeName`` (``--concurrency`` in flight, or ``--rate`` pods per second), waits
  until all are Running, optionally measures ``--idle`` seconds of steady state, deletes them all
  and waits until every pod is gone *and* Nomad lists none of their jobs (purged).
* **floor**: a small asyncio client (``Floor``) registers the same N jobs (vkgate's own job
  JSON for the same pod, from ``vkgate render``, with its ID, name and ``k8s.name`` changed)
  straight at Nomad, follows their allocations on Nomad's event stream until every one runs,
  then deregisters them with ``purge=true`` and waits until every allocation is terminal.

Per run: create → all Running (wall) and per pod (harness clock: the create request sent → the
watch or the event stream sees Running; for vkgate also the API's own creationTimestamp →
Ready condition, one-second resolution), delete → all gone and → all jobs purged, Nomad
requests per pod by endpoint and phase (proxy), the most connections open to Nomad at once,
vkgate's and Nomad's CPU (``/proc``), the 1-minute load average before and after.  Every wait is
bounded (``--timeout``); every process is stopped at the end, also on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as _dt
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import procstat, report
from bench import profile as bench_profile
from bench.agents import VkgateAgent
from bench.pods_burst import Tracker, bounded
from devstack.certs import CertKey
from devstack.controlplane import ControlPlane
from devstack.nomad import launch_nomad
from devstack.nomad_cluster import NomadTLS, bench_clients, launch_nomad_cluster
from devstack.process import Proc, free_port, wait_for
from gateway.kube.client import KubeClient
from gateway.kube.errors import NotFound

MAX_PODS = 5_000
TEMPLATES_DIR = (
    report.REPO / "bench" / "job_templates"
)  # not "templates": a script run from bench/ would import it as the templates package
TEMPLATE = "nomad/mock_driver.j2"
#: The task driver of TEMPLATE: a node allows the drivers it lists (docs/design/nomad.md,
#: "Policy on the rendered job").
DRIVER = "mock_driver"
#: MHz per Kubernetes core: a fixed factor, so 10m → 10 MHz whatever the client declares.
MHZ_PER_CORE = 1000
#: Each pod's requests (and the floor's job, rendered from the same pod).
POD_REQUESTS = {"cpu": "10m", "memory": "10Mi", "ephemeral-storage": "10Mi"}
KINDS = ("floor", "vkgate")


# --------------------------------------------------------------------------- pure parts


def pod_manifest(name: str, ns: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1.27",
                    "resources": {"requests": dict(POD_REQUESTS), "limits": {"memory": "10Mi"}},
                }
            ],
        },
    }


def floor_job(template: dict[str, Any], job_id: str, name: str) -> dict[str, Any]:
    """The rendered job ``template`` (``{"Job": {...}}``) as job ``job_id`` for pod ``name``."""
    job = json.loads(json.dumps(template["Job"]))
    job["ID"] = job_id
    job["Name"] = job_id
    job.setdefault("Meta", {})["k8s.name"] = name
    return {"Job": job}


def per_pod(counts: Counter[str], n: int) -> dict[str, float]:
    """Requests per pod by endpoint, largest first; ``"total"`` is their sum."""
    if n <= 0:
        return {}
    out = {k: v / n for k, v in counts.most_common()}
    out["total"] = sum(counts.values()) / n
    return out


def counts_diff(after: dict[str, int], before: dict[str, int]) -> Counter[str]:
    return +Counter({k: v - before.get(k, 0) for k, v in after.items()})


def parse_time(text: str) -> float | None:
    """An RFC 3339 timestamp (the API's one-second resolution) as epoch seconds."""
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):
        return None


def api_startup(pod: dict[str, Any]) -> float | None:
    """creationTimestamp → the Ready condition's lastTransitionTime (seconds), when Ready."""
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp", ""))
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            ready = parse_time(cond.get("lastTransitionTime", ""))
            if created is not None and ready is not None:
                return ready - created
    return None


@dataclass
class FloorBook:
    """The floor's bookkeeping: per job, when it was sent and when its allocation ran/ended."""

    prefix: str
    #: jobs the run registers: "all" means this many, not just the ones sent so far
    expected: int
    sent: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    delete_sent: dict[str, float] = field(default_factory=dict)
    terminal: dict[str, float] = field(default_factory=dict)
    #: times the event stream ended and the floor re-listed the allocations
    resyncs: int = 0
    running_done: asyncio.Event = field(default_factory=asyncio.Event)
    terminal_done: asyncio.Event = field(default_factory=asyncio.Event)

    def observe(self, alloc: dict[str, Any], now: float) -> None:
        """One allocation as Nomad's event stream shows it (jobs of other runs are ignored)."""
        job = str(alloc.get("JobID", ""))
        if not job.startswith(self.prefix) or job not in self.sent:
            return
        status = alloc.get("ClientStatus")
        if status == "running":
            self.running.setdefault(job, now)
        if status in ("complete", "failed", "lost") and job in self.delete_sent:
            self.terminal.setdefault(job, now)
        if self.all_running():
            self.running_done.set()
        if self.all_terminal():
            self.terminal_done.set()

    def all_running(self) -> bool:
        return len(self.sent) >= self.expected and len(self.running) >= len(self.sent)

    def all_terminal(self) -> bool:
        return len(self.delete_sent) >= self.expected and len(self.terminal) >= len(
            self.delete_sent
        )

    def to_running(self) -> list[float]:
        return [self.running[j] - t for j, t in self.sent.items() if j in self.running]

    def to_terminal(self) -> list[float]:
        return [self.terminal[j] - t for j, t in self.delete_sent.items() if j in self.terminal]


@dataclass
class NomadRun:
    kind: str  # "vkgate" or "floor"
    round: int
    pods: int
    mode: str = "burst"  # or "rate"
    rate: float = 0.0
    running_wall: float = float("nan")
    gone_wall: float = float("nan")  # vkgate: all pods gone; floor: all allocations terminal
    purged_wall: float = float("nan")  # all jobs gone from Nomad's job list
    to_running: list[float] = field(default_factory=list)
    to_running_api: list[float] = field(default_factory=list)
    to_gone: list[float] = field(default_factory=list)
    not_running: int = 0
    not_gone: int = 0
    requests_create: Counter[str] = field(default_factory=Counter)
    requests_delete: Counter[str] = field(default_factory=Counter)
    requests_idle: Counter[str] = field(default_factory=Counter)
    idle_seconds: float = 0.0
    idle_cpu: float | None = None  # vkgate CPU over the idle window
    #: seconds from all Running until the namespace's Event count stopped growing
    events_settled: float | None = None
    connections_max: int = 0
    connections_opened: int = 0
    #: floor only: event stream ends followed by a list of the allocations
    resyncs: int = 0
    #: running allocations by Nomad client once all were Running
    placed: dict[str, int] = field(default_factory=dict)
    agent_cpu_create: float | None = None
    agent_cpu_delete: float | None = None
    nomad_cpu_create: float | None = None
    nomad_cpu_delete: float | None = None
    rss_running: int | None = None
    load: tuple[float, float] | None = None
    #: the whole machine over the create phase: (busy core-seconds, core-seconds elapsed)
    machine_create: tuple[float, float] | None = None
    #: CPU seconds by command name over the create phase (``procstat.by_command``)
    who_create: dict[str, float] = field(default_factory=dict)
    #: the same over the delete phase
    machine_delete: tuple[float, float] | None = None
    who_delete: dict[str, float] = field(default_factory=dict)
    error: str = ""

    @property
    def agent_cpu(self) -> float | None:
        if self.agent_cpu_create is None:
            return None
        return self.agent_cpu_create + (self.agent_cpu_delete or 0.0)

    @property
    def nomad_cpu(self) -> float | None:
        if self.nomad_cpu_create is None:
            return None
        return self.nomad_cpu_create + (self.nomad_cpu_delete or 0.0)

    def row(self) -> dict[str, Any]:
        """JSON for ``bench.plots`` (per-pod latencies kept: the distribution plot needs them)."""
        return {
            "bench": "nomad_burst",
            "agent": self.kind,
            "mode": self.mode,
            "rate": self.rate,
            "round": self.round,
            "pods": self.pods,
            "running_wall": self.running_wall,
            "gone_wall": self.gone_wall,
            "purged_wall": self.purged_wall,
            "run_p50": report.percentile(self.to_running, 50),
            "run_p90": report.percentile(self.to_running, 90),
            "run_p99": report.percentile(self.to_running, 99),
            "to_running": sorted(round(v, 4) for v in self.to_running),
            "to_running_api": sorted(self.to_running_api),
            "requests_create_per_pod": per_pod(self.requests_create, self.pods),
            "requests_delete_per_pod": per_pod(self.requests_delete, self.pods),
            "requests_idle_per_s": (
                {k: v / self.idle_seconds for k, v in self.requests_idle.items()}
                if self.idle_seconds
                else {}
            ),
            "events_settled": self.events_settled,
            "idle_core_share": (
                self.idle_cpu / self.idle_seconds
                if self.idle_cpu is not None and self.idle_seconds
                else None
            ),
            "connections_max": self.connections_max,
            "connections_opened": self.connections_opened,
            "resyncs": self.resyncs,
            "placed": self.placed,
            "agent_cpu": self.agent_cpu,
            "cpu_per_pod_ms": (
                self.agent_cpu / self.pods * 1000 if self.agent_cpu is not None else None
            ),
            "nomad_cpu": self.nomad_cpu,
            "rss_running": self.rss_running,
            "load": self.load,
            "machine_create": self.machine_create,
            "who_create": self.who_create,
            "machine_delete": self.machine_delete,
            "who_delete": self.who_delete,
            "error": self.error,
        }


# --------------------------------------------------------------------------- the Nomad under test


@dataclass
class NomadTarget:
    """The Nomad a session runs against: the dev agent (plain HTTP, no ACLs, one process) or,
    with ``--cluster``, the e2e cluster's topology (``devstack.nomad_cluster``: a server and two
    clients, ACLs on, HTTP over mutual TLS)."""

    #: every Nomad process (their CPU is Nomad's)
    pids: tuple[int, ...]
    workdir: Path
    #: host:port the proxy forwards to
    upstream: str
    #: the harness's own way in, without the proxy
    direct_base: str
    #: the harness's and the floor's token (management); vkgate's is ``vkgate_token``
    token: str = ""
    vkgate_token: str = ""
    tls: NomadTLS | None = None
    server_cert: CertKey | None = None
    describe: str = ""

    def verify(self) -> ssl.SSLContext | bool:
        """The harness's TLS context: the CA and its client certificate.  The proxy serves the
        server's certificate, which names no address, so the harness checks the chain and not
        the name; vkgate checks both (``tls_server_name``)."""
        if self.tls is None:
            return True
        ctx = self.tls.context()
        ctx.check_hostname = False
        return ctx

    def client_kwargs(self) -> dict[str, Any]:
        """httpx.AsyncClient keyword arguments for the harness and the floor."""
        headers = {"X-Nomad-Token": self.token} if self.token else {}
        return {"verify": self.verify(), "headers": headers, "trust_env": False}

    def cpu_seconds(self) -> float | None:
        values = [procstat.cpu_seconds(pid) for pid in self.pids]
        return None if any(v is None for v in values) else sum(v or 0.0 for v in values)


# --------------------------------------------------------------------------- the proxy


class ProxyProcess:
    """``bench.nomad_proxy`` as a child process in front of ``upstream`` (host:port)."""

    def __init__(self, upstream: str, workdir: Path, target: NomadTarget | None = None) -> None:
        self.listen = f"127.0.0.1:{free_port()}"
        self.control = f"127.0.0.1:{free_port()}"
        self.tls = target is not None and target.tls is not None
        tls_args: list[str] = []
        if target is not None and target.tls is not None:
            if target.server_cert is None:
                raise RuntimeError("a TLS proxy needs the server's certificate")
            tls_args = [
                f"--tls-ca={target.tls.ca_file}",
                f"--tls-cert={target.server_cert.cert}",
                f"--tls-key={target.server_cert.key}",
                f"--upstream-cert={target.tls.cert_file}",
                f"--upstream-key={target.tls.key_file}",
                f"--upstream-name={target.tls.server_name}",
            ]
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(report.REPO), os.environ.get("PYTHONPATH", "")]),
        )
        self.proc = Proc(
            "nomad-proxy",
            [
                sys.executable,
                "-m",
                "bench.nomad_proxy",
                "--listen",
                self.listen,
                "--upstream",
                upstream,
                "--control",
                self.control,
                *tls_args,
            ],
            log_file=workdir / "nomad-proxy.log",
            env=env,
            cwd=report.REPO,
        )
        wait_for("the Nomad proxy", self._up, timeout=30, proc=self.proc)

    @property
    def address(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.listen}"

    def _up(self) -> bool:
        try:
            self.counts()
        except OSError:
            return False
        return True

    def _call(self, method: str, path: str) -> dict[str, Any]:
        req = urllib.request.Request(f"http://{self.control}{path}", method=method)
        with urllib.request.urlopen(req, timeout=10) as resp:
            out: dict[str, Any] = json.loads(resp.read())
            return out

    def counts(self) -> dict[str, Any]:
        return self._call("GET", "/counts")

    def reset(self) -> dict[str, Any]:
        return self._call("POST", "/reset")

    def stop(self) -> None:
        self.proc.stop(timeout=10)


# --------------------------------------------------------------------------- Nomad helpers


async def job_ids(nomad: httpx.AsyncClient, prefix: str) -> list[str]:
    r = await nomad.get("/v1/jobs", params={"prefix": prefix})
    r.raise_for_status()
    return [str(j["ID"]) for j in r.json()]


async def wait_purged(nomad: httpx.AsyncClient, prefix: str, bound: float) -> float | None:
    """Poll Nomad (directly, not through the proxy) until no job has ``prefix``."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if not await job_ids(nomad, prefix):
            return time.monotonic()
        await asyncio.sleep(0.25)
    return None


async def placements(nomad: httpx.AsyncClient, prefix: str) -> dict[str, int]:
    """Running allocations of the jobs named ``prefix…`` by Nomad client (the harness's own
    list, not through the proxy): did the burst land on every client?"""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        r = await nomad.get("/v1/allocations", params={"task_states": "false"})
        r.raise_for_status()
        return dict(
            Counter(
                str(a.get("NodeName") or a.get("NodeID") or "?")
                for a in r.json()
                if str(a.get("JobID", "")).startswith(prefix) and a.get("ClientStatus") == "running"
            )
        )
    return {}


async def gc(nomad: httpx.AsyncClient) -> None:
    """Collect dead jobs, evaluations and allocations, so the next run starts clean."""
    with contextlib.suppress(httpx.HTTPError):
        await nomad.put("/v1/system/gc")


async def event_stream(base: str, book: FloorBook, ready: asyncio.Event, **client: Any) -> None:
    """Nomad's event stream, topic Allocation, into ``book``.  Nomad closes a subscriber that
    falls behind its event buffer (a 2,000-job burst did): when the stream ends or breaks, the
    floor lists the allocations once (``book.resyncs`` counts it; what it finds is timed when
    it is read, so a resync can only make the floor look slower) and subscribes again."""
    client.setdefault("trust_env", False)
    async with httpx.AsyncClient(base_url=base, timeout=None, **client) as c:
        index = 0
        while True:
            try:
                params: dict[str, Any] = {"topic": "Allocation"}
                if index:
                    params["index"] = index + 1
                async with c.stream("GET", "/v1/event/stream", params=params) as resp:
                    resp.raise_for_status()
                    ready.set()
                    async for line in resp.aiter_lines():
                        if not line.strip():
                            continue
                        now = time.monotonic()
                        frame = json.loads(line)
                        if frame.get("Error"):
                            break
                        index = max(index, int(frame.get("Index") or 0))
                        for ev in frame.get("Events") or []:
                            alloc = (ev.get("Payload") or {}).get("Allocation")
                            if alloc:
                                book.observe(alloc, now)
            except (httpx.HTTPError, ValueError):
                await asyncio.sleep(0.2)
            book.resyncs += 1
            with contextlib.suppress(httpx.HTTPError, ValueError):
                r = await c.get("/v1/allocations", params={"task_states": "false"})
                now = time.monotonic()
                index = max(index, int(r.headers.get("X-Nomad-Index") or 0))
                for alloc in r.json():
                    book.observe(alloc, now)


# --------------------------------------------------------------------------- pacing


async def patient(
    send: Callable[[], Awaitable[httpx.Response]], tries: int = 10, pause: float = 0.2
) -> httpx.Response:
    """The floor's request, sent again after a 429: Nomad answers that when one address holds
    more than ``http_max_conns_per_client`` (100) connections, and everything through the
    proxy comes from 127.0.0.1 — a 5,000-job floor once had its deletes refused so, while httpx
    replaced connections the proxy had not yet seen closed.  Each try is counted by the proxy
    (the floor's requests per pod show it)."""
    for _ in range(tries - 1):
        r = await send()
        if r.status_code != 429:
            return r
        await r.aclose()
        await asyncio.sleep(pause)
    return await send()


async def paced(
    n: int, concurrency: int, rate: float, fn: Callable[[int], Awaitable[None]]
) -> list[BaseException]:
    """``fn(0..n-1)``: at most ``concurrency`` in flight, and with ``rate`` > 0 the i-th not
    started before i / rate seconds."""
    if rate <= 0:
        return await bounded(n, concurrency, fn)
    t0 = time.monotonic()

    async def one(i: int) -> None:
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await fn(i)

    return await bounded(n, max(concurrency, n), one)


# --------------------------------------------------------------------------- the two kinds of run


@dataclass
class Session:
    cp: ControlPlane
    nomad: NomadTarget
    proxy: ProxyProcess
    kube: KubeClient
    direct: httpx.AsyncClient  # Nomad without the proxy (the harness's own checks)
    workdir: Path
    job_template: dict[str, Any]
    args: argparse.Namespace


def vkgate_settings(s: Session, n: int) -> dict[str, Any]:
    nomad: dict[str, Any] = {
        "address": s.proxy.address,
        "template": TEMPLATE,
        "drivers": [DRIVER],
        "mhz_per_core": MHZ_PER_CORE,
    }
    if s.nomad.vkgate_token:
        nomad["token"] = s.nomad.vkgate_token
    if s.nomad.tls is not None:
        # the cluster's way in: the policy's token, mutual TLS, the server's name
        nomad |= {
            "ca_cert": str(s.nomad.tls.ca_file),
            "client_cert": str(s.nomad.tls.cert_file),
            "client_key": str(s.nomad.tls.key_file),
            "tls_server_name": s.nomad.tls.server_name,
        }
    settings: dict[str, Any] = {
        "log": {"level": "info"},
        "node": {"capacity": {"pods": str(max(110, n + 100))}},
        "templates": {"dirs": [str(TEMPLATES_DIR)]},
        "backend": {"kind": "nomad", "nomad": nomad},
    }
    return report.apply_sets(settings, s.args.set)


def render_template_job(workdir: Path) -> dict[str, Any]:
    """vkgate's job for one bench pod, from ``vkgate render`` with the bench's settings."""
    pod = workdir / "floor-pod.json"
    pod.write_text(json.dumps(pod_manifest("p0000", "floor", "floor")))
    cfg = workdir / "floor-render.toml"
    cfg.write_text(
        '[backend]\nkind = "nomad"\n[backend.nomad]\n'
        f'template = "{TEMPLATE}"\ndrivers = ["{DRIVER}"]\nmhz_per_core = {MHZ_PER_CORE}\n'
        f'[templates]\ndirs = ["{TEMPLATES_DIR}"]\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "render", str(pod), "-c", str(cfg)],
        capture_output=True,
        text=True,
        check=True,
        cwd=report.REPO,
    )
    job: dict[str, Any] = json.loads(out.stdout)
    return job


def _load() -> float:
    return os.getloadavg()[0]


async def run_vkgate(s: Session, n: int, round_no: int, *, rate: float, idle: float) -> NomadRun:
    args = s.args
    res = NomadRun("vkgate", round_no, n, mode="rate" if rate else "burst", rate=rate)
    run_id = uuid.uuid4().hex[:6]
    node, ns = f"nb-{run_id}", f"nb-{run_id}"
    load0 = _load()
    agent = VkgateAgent(s.cp, s.workdir, vkgate_settings(s, n))
    recorder: bench_profile.Recorder | None = None
    await s.kube.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        agent.start(node)
        await asyncio.sleep(args.settle)
        names = [f"p{i:04d}" for i in range(n)]
        tracker = Tracker(s.kube, ns, n)
        api_times: dict[str, float] = {}
        observe = tracker._observe

        def observe_api(kind: str, obj: dict[str, Any], now: float) -> None:
            observe(kind, obj, now)
            name = obj["metadata"]["name"]
            if name not in api_times:
                v = api_startup(obj)
                if v is not None:
                    api_times[name] = v

        tracker._observe = observe_api  # type: ignore[method-assign]
        watch = asyncio.create_task(tracker.run())
        try:
            await asyncio.wait_for(tracker.ready.wait(), 30)
            s.proxy.reset()
            c0 = s.proxy.counts()["requests"]
            a0, m0 = procstat.cpu_seconds(agent.pid or 0), s.nomad.cpu_seconds()
            if args.profile is not None and round_no == 1 and not rate and agent.pid:
                recorder = bench_profile.Recorder(agent.pid, args.profile / f"vkgate-nomad-{n}.raw")

            async def create(i: int) -> None:
                tracker._times(names[i]).sent = time.monotonic()
                await s.kube.create(
                    f"/api/v1/namespaces/{ns}/pods", pod_manifest(names[i], ns, node)
                )

            t0 = time.monotonic()
            mach0, who0 = procstat.machine(), procstat.by_command()
            pprof = nomad_pprof(s, "vkgate", n, rate)
            errors = await paced(n, args.concurrency, rate, create)
            if errors:
                raise RuntimeError(f"{len(errors)} creates failed, first: {errors[0]}")
            try:
                await asyncio.wait_for(tracker.all_running.wait(), args.timeout)
            except TimeoutError:
                res.error = f"not all Running after {args.timeout:.0f}s"
            times = tracker.pods.values()
            res.running_wall = max((t.running for t in times if t.running), default=t0) - t0
            res.not_running = sum(t.running is None for t in times)
            res.to_running = [t.running - t.sent for t in times if t.running and t.sent]
            res.to_running_api = list(api_times.values())
            mid = procstat.sample(agent.pid)
            res.rss_running = mid.rss_bytes
            res.agent_cpu_create = _delta(mid.cpu_seconds, a0)
            res.nomad_cpu_create = _delta(s.nomad.cpu_seconds(), m0)
            res.machine_create, res.who_create = _machine_since(mach0, who0)
            c1 = s.proxy.counts()["requests"]
            res.requests_create = counts_diff(c1, c0)
            if pprof is not None:
                await pprof
            res.placed = await placements(s.direct, f"{ns}-")
            if idle > 0 and not res.error:
                # at rest means the burst's own work is done: its Events are written at the
                # agent's event_qps (100/s), so 5,000 pods' four Events each trail the last
                # Running by minutes on a busy machine; then the usual 10 s of settling
                res.events_settled = await events_settled(s.kube, ns, bound=args.timeout)
                await asyncio.sleep(min(10.0, idle))
                i0 = s.proxy.counts()["requests"]
                ia = procstat.cpu_seconds(agent.pid or 0)
                await asyncio.sleep(idle)
                res.idle_seconds = idle
                res.idle_cpu = _delta(procstat.cpu_seconds(agent.pid or 0), ia)
                c1 = s.proxy.counts()["requests"]
                res.requests_idle = counts_diff(c1, i0)
            a1, m1 = procstat.cpu_seconds(agent.pid or 0), s.nomad.cpu_seconds()

            async def delete(i: int) -> None:
                tracker._times(names[i]).delete_sent = time.monotonic()
                with contextlib.suppress(NotFound):
                    await s.kube.delete(f"/api/v1/namespaces/{ns}/pods/{names[i]}")

            t1 = time.monotonic()
            mach1, who1 = procstat.machine(), procstat.by_command()
            errors = await bounded(n, args.concurrency, delete)
            if errors:
                raise RuntimeError(f"{len(errors)} deletes failed, first: {errors[0]}")
            try:
                await asyncio.wait_for(tracker.all_gone.wait(), args.timeout)
            except TimeoutError:
                res.error = _join(res.error, f"not all gone after {args.timeout:.0f}s")
            res.gone_wall = max((t.deleted for t in times if t.deleted), default=t1) - t1
            res.not_gone = sum(t.deleted is None for t in times)
            res.to_gone = [t.deleted - t.delete_sent for t in times if t.deleted and t.delete_sent]
            purged = await wait_purged(s.direct, f"{ns}-", args.timeout)
            if purged is None:
                res.error = _join(res.error, f"jobs not purged after {args.timeout:.0f}s")
            else:
                res.purged_wall = purged - t1
            res.agent_cpu_delete = _delta(procstat.cpu_seconds(agent.pid or 0), a1)
            res.nomad_cpu_delete = _delta(s.nomad.cpu_seconds(), m1)
            res.machine_delete, res.who_delete = _machine_since(mach1, who1)
            snap = s.proxy.counts()
            res.requests_delete = counts_diff(snap["requests"], c1)
            res.connections_max = int(snap["connections_max"])
            res.connections_opened = int(snap["connections_opened"])
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
    except Exception as exc:
        res.error = _join(res.error, f"{type(exc).__name__}: {exc}")
    finally:
        if recorder is not None:
            recorder.stop()
        agent.stop()
        await _cleanup(s, f"{ns}-")
    res.load = (load0, _load())
    return res


async def run_floor(s: Session, n: int, round_no: int, *, rate: float) -> NomadRun:
    """Register N jobs straight at Nomad (through the proxy), wait until each allocation runs,
    deregister them with ``purge=true`` and wait until each allocation is terminal."""
    args = s.args
    res = NomadRun("floor", round_no, n, mode="rate" if rate else "burst", rate=rate)
    prefix = f"floor-{uuid.uuid4().hex[:6]}-"
    book = FloorBook(prefix, n)
    load0 = _load()
    limits = httpx.Limits(
        max_connections=args.concurrency, max_keepalive_connections=args.concurrency
    )
    ready = asyncio.Event()
    client = s.nomad.client_kwargs()
    stream = asyncio.create_task(event_stream(s.proxy.address, book, ready, **client))
    try:
        async with httpx.AsyncClient(
            base_url=s.proxy.address, timeout=60, limits=limits, **client
        ) as nomad:
            await asyncio.wait_for(ready.wait(), 30)
            await asyncio.sleep(0.5)
            s.proxy.reset()
            c0 = s.proxy.counts()["requests"]
            m0 = s.nomad.cpu_seconds()
            ids = [f"{prefix}p{i:04d}" for i in range(n)]

            async def register(i: int) -> None:
                body = floor_job(s.job_template, ids[i], f"p{i:04d}")
                book.sent[ids[i]] = time.monotonic()
                r = await patient(lambda: nomad.post("/v1/jobs", json=body))
                r.raise_for_status()

            t0 = time.monotonic()
            mach0, who0 = procstat.machine(), procstat.by_command()
            pprof = nomad_pprof(s, "floor", n, rate)
            errors = await paced(n, args.concurrency, rate, register)
            if errors:
                raise RuntimeError(f"{len(errors)} registers failed, first: {errors[0]}")
            await _until(book.running_done, args.timeout)
            if not book.all_running():
                res.error = f"not all running after {args.timeout:.0f}s"
            res.running_wall = max(book.running.values(), default=t0) - t0
            res.not_running = n - len(book.running)
            res.to_running = book.to_running()
            res.nomad_cpu_create = _delta(s.nomad.cpu_seconds(), m0)
            res.machine_create, res.who_create = _machine_since(mach0, who0)
            c1 = s.proxy.counts()["requests"]
            res.requests_create = counts_diff(c1, c0)
            if pprof is not None:
                await pprof
            res.placed = await placements(s.direct, prefix)
            m1 = s.nomad.cpu_seconds()

            async def deregister(i: int) -> None:
                book.delete_sent[ids[i]] = time.monotonic()
                r = await patient(
                    lambda: nomad.delete(f"/v1/job/{ids[i]}", params={"purge": "true"})
                )
                r.raise_for_status()

            t1 = time.monotonic()
            mach1, who1 = procstat.machine(), procstat.by_command()
            errors = await bounded(n, args.concurrency, deregister)
            if errors:
                raise RuntimeError(f"{len(errors)} deregisters failed, first: {errors[0]}")
            t_dereg = time.monotonic()
            await _until(book.terminal_done, args.timeout)
            if not book.all_terminal():
                res.error = _join(res.error, f"not all terminal after {args.timeout:.0f}s")
            res.gone_wall = max(book.terminal.values(), default=t1) - t1
            res.purged_wall = max(res.gone_wall, t_dereg - t1)
            res.not_gone = n - len(book.terminal)
            res.to_gone = book.to_terminal()
            res.nomad_cpu_delete = _delta(s.nomad.cpu_seconds(), m1)
            res.machine_delete, res.who_delete = _machine_since(mach1, who1)
            snap = s.proxy.counts()
            res.requests_delete = counts_diff(snap["requests"], c1)
            res.connections_max = int(snap["connections_max"])
            res.connections_opened = int(snap["connections_opened"])
    except Exception as exc:
        res.error = _join(res.error, f"{type(exc).__name__}: {exc}")
    finally:
        res.resyncs = book.resyncs
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)
        await _cleanup(s, prefix)
    res.load = (load0, _load())
    return res


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


async def events_settled(
    kube: Any, ns: str, *, bound: float, poll: float = 2.0, still: int = 3
) -> float | None:
    """Seconds until the namespace's Event count (``remainingItemCount`` of a one-item page)
    is the same in ``still`` polls in a row: the agent's queued Events are written.  None if
    it kept growing for ``bound`` seconds."""
    t0 = time.monotonic()
    last, same = -1, 0
    while time.monotonic() - t0 < bound:
        page = await kube.get(f"/api/v1/namespaces/{ns}/events", params={"limit": 1})
        meta = page.get("metadata") or {}
        count = len(page.get("items") or []) + int(meta.get("remainingItemCount") or 0)
        same = same + 1 if count == last else 0
        if same >= still - 1:
            return time.monotonic() - t0
        last = count
        await asyncio.sleep(poll)
    return None


def _machine_since(
    mach0: tuple[float, float], who0: dict[str, float]
) -> tuple[tuple[float, float], dict[str, float]]:
    """The machine's busy and elapsed core-seconds since ``mach0``, and the six commands that
    used the most CPU since ``who0`` (the create phase: is the burst bound by the cores?)."""
    busy, total = procstat.machine()
    who = procstat.by_command()
    used = {k: v - who0.get(k, 0.0) for k, v in who.items()}
    top = dict(
        sorted(((k, round(v, 2)) for k, v in used.items() if v > 0), key=lambda kv: -kv[1])[:6]
    )
    return (busy - mach0[0], total - mach0[1]), top


def nomad_pprof(s: Session, kind: str, n: int, rate: float) -> asyncio.Task[None] | None:
    """Nomad's own CPU profile (the dev agent serves ``/debug/pprof``) over the first seconds of
    a burst, written to ``--nomad-pprof`` as ``nomad-<kind>-<n>.pprof`` (``go tool pprof``)."""
    out_dir: Path | None = s.args.nomad_pprof
    if out_dir is None or rate:
        return None
    seconds = int(s.args.nomad_pprof_seconds)

    async def fetch() -> None:
        r = await s.direct.get(
            "/debug/pprof/profile", params={"seconds": seconds}, timeout=seconds + 30
        )
        r.raise_for_status()
        await asyncio.to_thread(_write_bytes, out_dir / f"nomad-{kind}-{n}.pprof", r.content)

    return asyncio.create_task(fetch())


async def _until(event: asyncio.Event, bound: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), bound)


async def _cleanup(s: Session, prefix: str) -> None:
    """Purge whatever a failed run left behind (50 at a time, at most 2 minutes), then
    garbage-collect Nomad so the next run starts without this one's allocations."""
    with contextlib.suppress(httpx.HTTPError, TimeoutError):
        async with asyncio.timeout(120):
            jobs = await job_ids(s.direct, prefix)

            async def purge(i: int) -> None:
                await s.direct.delete(f"/v1/job/{jobs[i]}", params={"purge": "true"})

            await bounded(len(jobs), 50, purge)
    await gc(s.direct)
    await asyncio.sleep(2)


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


# --------------------------------------------------------------------------- report


def _s(v: float | None, unit: str = " s", digits: int = 1) -> str:
    return "n/a" if v is None or v != v else f"{v:.{digits}f}{unit}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a != a or b != b or b <= 0:
        return "n/a"
    return f"{a / b:.1f}x"


def _pcts(vs: Sequence[float]) -> str:
    if not vs:
        return "n/a"
    return " / ".join(f"{report.percentile(vs, q):.2f}" for q in (50, 90, 99)) + " s"


def _top(counts: Counter[str], n: int, limit: int = 8) -> str:
    if not counts or n <= 0:
        return "none"
    items = [f"`{k}` {v / n:.2f}" for k, v in counts.most_common(limit)]
    rest = sum(v for _, v in counts.most_common()[limit:])
    if rest:
        items.append(f"other {rest / n:.2f}")
    return ", ".join(items)


def markdown(
    results: Sequence[NomadRun], *, args: argparse.Namespace, machine: Sequence[str]
) -> str:
    out = [f"## Through a real Nomad: {args.pods} pods (`{args.command}`)", "", *machine, ""]
    header = [
        "round",
        "run",
        "pods",
        "all Running",
        "x floor",
        "startup p50 / p90 / p99",
        "all gone",
        "jobs purged",
        "x floor",
        "Nomad req/pod create",
        "Nomad req/pod delete",
        "conns max / opened",
        "vkgate CPU/pod",
        "Nomad CPU",
        "load 1 min",
    ]
    rows = []
    for r in results:
        floor = next(
            (f for f in results if f.kind == "floor" and f.round == r.round and f.mode == r.mode),
            None,
        )
        name = r.kind + (f" @ {r.rate:g}/s" if r.mode == "rate" else "")
        rows.append(
            [
                r.round,
                name,
                r.pods,
                _s(r.running_wall),
                _ratio(r.running_wall, floor.running_wall) if floor and r is not floor else "",
                _pcts(r.to_running),
                _s(r.gone_wall),
                _s(r.purged_wall),
                _ratio(r.purged_wall, floor.purged_wall) if floor and r is not floor else "",
                f"{sum(r.requests_create.values()) / r.pods:.2f}",
                f"{sum(r.requests_delete.values()) / r.pods:.2f}",
                f"{r.connections_max} / {r.connections_opened}",
                _s(None if r.agent_cpu is None else r.agent_cpu / r.pods * 1000, " ms", 1),
                _s(r.nomad_cpu),
                f"{r.load[0]:.1f} → {r.load[1]:.1f}" if r.load else "n/a",
            ]
        )
    out += ["", report.table(header, rows), ""]
    out += ["Nomad requests per pod by endpoint (the proxy's count):", ""]
    for r in results:
        name = f"round {r.round} {r.kind}" + (f" @ {r.rate:g}/s" if r.mode == "rate" else "")
        out.append(f"- {name}, create: {_top(r.requests_create, r.pods)}")
        out.append(f"- {name}, delete: {_top(r.requests_delete, r.pods)}")
    if any(len(r.placed) > 1 for r in results):
        out += ["", "Running allocations by Nomad client once all were Running:", ""]
        for r in results:
            name = f"round {r.round} {r.kind}" + (f" @ {r.rate:g}/s" if r.mode == "rate" else "")
            where = ", ".join(f"{k} {v}" for k, v in sorted(r.placed.items())) or "n/a"
            out.append(f"- {name}: {where}")
    api = [r for r in results if r.to_running_api]
    if api:
        out += [
            "",
            "vkgate's startup as the API records it (creationTimestamp → Ready, 1 s resolution):",
            "",
        ]
        for r in api:
            out.append(
                f"- round {r.round} {r.mode}: p50 / p90 / p99 {_pcts(r.to_running_api)} "
                f"({len(r.to_running_api)} pods)"
            )
    idle = [r for r in results if r.idle_seconds]
    if idle:
        out += ["", "Steady state, every pod Running, nothing happening:", ""]
        for r in idle:
            cpu = r.idle_cpu / r.idle_seconds * 100 if r.idle_cpu is not None else float("nan")
            rps = sum(r.requests_idle.values()) / r.idle_seconds
            by = ", ".join(
                f"`{k}` {v / r.idle_seconds:.2f}/s" for k, v in r.requests_idle.most_common(6)
            )
            settled = (
                f"; the window began once the burst's Events were written, "
                f"{r.events_settled:.0f} s after all Running, + 10 s"
                if r.events_settled is not None
                else ""
            )
            out.append(
                f"- round {r.round}, {r.pods} pods, {r.idle_seconds:.0f} s: vkgate CPU "
                f"{cpu:.2f} % of a core, Nomad requests {rps:.2f}/s ({by or 'none'}){settled}"
            )
    busy = [r for r in results if r.machine_create and r.machine_create[1] > 0]
    if busy:
        cores = os.cpu_count() or 1
        out += [
            "",
            f"The machine over each phase ({cores} cores; busy core-seconds, then the commands",
            "that used the most; busy ÷ cores is the least wall time that work needs here):",
            "",
        ]
        for r in busy:
            name = r.kind + (f" @ {r.rate:g}/s" if r.mode == "rate" else "")
            for phase, mach, who_used in (
                ("create", r.machine_create, r.who_create),
                ("delete", r.machine_delete, r.who_delete),
            ):
                if not mach or mach[1] <= 0:
                    continue
                b, t = mach
                who = ", ".join(f"{k} {v:.1f}" for k, v in who_used.items())
                out.append(
                    f"- round {r.round} {name} {phase}: {b:.1f} of {t:.1f} core-s busy "
                    f"({b / t * 100:.0f} %), ≥ {b / cores:.1f} s on {cores} cores; {who}"
                )
    resynced = [r for r in results if r.resyncs]
    if resynced:
        out += [
            "",
            "The floor's event stream ended and it re-listed the allocations (times found then are read then):",
            "",
        ]
        out += [f"- round {r.round} {r.mode}: {r.resyncs} time(s)" for r in resynced]
    problems = [r for r in results if r.error]
    if problems:
        out += ["", "Problems seen:", ""]
        out += [f"- round {r.round} {r.kind} {r.mode}: {r.error}" for r in problems]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.nomad_burst", description=__doc__.split("\n")[0]
    )
    p.add_argument("--pods", type=int, default=1000, help=f"pods per burst (1..{MAX_PODS})")
    p.add_argument("--rounds", type=int, default=1, help="repeat floor and vkgate, alternating")
    p.add_argument("--concurrency", type=int, default=50, help="creates/deletes in flight")
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="also run a rate round: --rate-pods pods created at this many per second (0: none)",
    )
    p.add_argument("--rate-pods", type=int, default=1000, help="pods of the rate round")
    p.add_argument("--no-burst", action="store_true", help="only the rate round")
    p.add_argument("--idle", type=float, default=0.0, help="steady-state seconds (vkgate, burst)")
    p.add_argument("--settle", type=float, default=3.0, help="idle seconds after vkgate starts")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="vkgate setting, e.g. pods.streamed_reconcile_interval=5 (JSON value)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="bound of each wait (s)")
    p.add_argument(
        "--nomad-event-buffer",
        type=int,
        default=0,
        help="the Nomad server's event_buffer_size, for the floor and vkgate alike (0: 100)",
    )
    p.add_argument(
        "--cluster",
        action="store_true",
        help="the e2e cluster's topology (a server, two clients, ACLs, mutual TLS), not a dev agent",
    )
    p.add_argument("--profile", type=Path, default=None, help="py-spy vkgate over round 1's burst")
    p.add_argument(
        "--nomad-pprof",
        type=Path,
        default=None,
        metavar="DIR",
        help="Go CPU profile of Nomad over the first --nomad-pprof-seconds of each burst",
    )
    p.add_argument("--nomad-pprof-seconds", type=int, default=8, help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, default=None, help="every run as JSON (bench.plots)")
    p.add_argument("--label", default="", help="name for this configuration in the JSON")
    p.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    p.add_argument("--section", default="nomad_burst", help="docs section to (re)write")
    p.add_argument("--doc", type=Path, default=report.DOC, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not 1 <= args.pods <= MAX_PODS or not 1 <= args.rate_pods <= MAX_PODS:
        p.error(f"--pods and --rate-pods must be 1..{MAX_PODS}")
    if not 1 <= args.rounds <= 5 or not 1 <= args.concurrency <= 200:
        p.error("--rounds 1..5, --concurrency 1..200")
    if not 0 < args.timeout <= 1800:
        p.error("--timeout must be in (0, 1800]")
    if args.no_burst and not args.rate:
        p.error("--no-burst needs --rate")
    if not 0 <= args.nomad_event_buffer <= 1_000_000:
        p.error("--nomad-event-buffer must be 0 (Nomad's default) .. 1000000")
    if args.cluster and args.nomad_pprof is not None:
        p.error("--nomad-pprof needs the dev agent (the cluster's server has no debug endpoints)")
    args.command = " ".join(
        ["python -m bench.nomad_burst", f"--pods {args.pods}", f"--rounds {args.rounds}"]
        + ([f"--rate {args.rate:g} --rate-pods {args.rate_pods}"] if args.rate else [])
        + (["--no-burst"] if args.no_burst else [])
        + ([f"--idle {args.idle:g}"] if args.idle else [])
        + ([f"--nomad-event-buffer {args.nomad_event_buffer}"] if args.nomad_event_buffer else [])
        + (["--cluster"] if args.cluster else [])
    )
    return args


#: How each kind of Nomad is described in a section's header.
DEV_AGENT = (
    "one Nomad dev agent (server + client in one process) with mock_driver tasks, task logs "
    "disabled, 10 MB ephemeral disk per pod; everything on 127.0.0.1 and the same CPUs"
)
CLUSTER = (
    "the e2e cluster's topology (`--cluster`, devstack/nomad_cluster.py): one Nomad server and "
    "two clients (three processes; the clients on their own addresses in the bench's network "
    "namespace, placements spread over both), ACLs on — vkgate with a token of the shipped "
    "least-privilege policy (deploy/nomad/vkgate-policy.hcl), the floor and the harness with "
    "the management token — and HTTP over mutual TLS (the counting proxy ends and re-makes it, "
    "for vkgate and the floor alike); mock_driver tasks, task logs disabled, 10 MB ephemeral "
    "disk per pod; everything on the same CPUs"
)


@contextlib.contextmanager
def nomad_session(
    allocs: int, event_buffer_size: int = 0, *, cluster: bool = False
) -> Iterator[tuple[NomadTarget, ProxyProcess]]:
    target: NomadTarget
    if cluster:
        # each client declares room for half the pods and more (bench_client doubles it)
        nodes = bench_clients()
        c = launch_nomad_cluster(
            clients=nodes,
            bench_allocs=-(-allocs // len(nodes)),
            event_buffer_size=event_buffer_size,
        )
        stop = c.stop
        target = NomadTarget(
            pids=c.pids,
            workdir=c.workdir,
            upstream=c.address.removeprefix("https://"),
            direct_base=c.local_address,
            token=c.management_token,
            vkgate_token=c.token,
            tls=c.tls,
            server_cert=c.server_cert,
            describe=CLUSTER,
        )
    else:
        agent = launch_nomad(bench_allocs=allocs, event_buffer_size=event_buffer_size)
        stop = agent.stop
        target = NomadTarget(
            pids=(agent.pid,),
            workdir=agent.workdir,
            upstream=agent.address.removeprefix("http://"),
            direct_base=agent.address,
            describe=DEV_AGENT,
        )
    try:
        proxy = ProxyProcess(target.upstream, target.workdir, target)
        try:
            yield target, proxy
        finally:
            proxy.stop()
    finally:
        stop()


async def run_all(
    cp: ControlPlane,
    nomad: NomadTarget,
    proxy: ProxyProcess,
    args: argparse.Namespace,
    workdir: Path,
) -> list[NomadRun]:
    results: list[NomadRun] = []
    template = await asyncio.to_thread(render_template_job, workdir)
    async with (
        KubeClient.from_kubeconfig(cp.kubeconfig, qps=10_000, burst=10_000) as kube,
        httpx.AsyncClient(
            base_url=nomad.direct_base, timeout=60, **nomad.client_kwargs()
        ) as direct,
    ):
        s = Session(cp, nomad, proxy, kube, direct, workdir, template, args)
        plan: list[tuple[int, float]] = []
        if not args.no_burst:
            plan.append((args.pods, 0.0))
        if args.rate:
            plan.append((args.rate_pods, args.rate))
        for rnd in range(1, args.rounds + 1):
            for n, rate in plan:
                order = list(KINDS) if rnd % 2 else list(reversed(KINDS))
                for kind in order:
                    what = f"{n} pods" + (f" at {rate:g}/s" if rate else "")
                    print(f"round {rnd}: {kind}, {what} ...", file=sys.stderr)
                    if kind == "floor":
                        r = await run_floor(s, n, rnd, rate=rate)
                    else:
                        r = await run_vkgate(s, n, rnd, rate=rate, idle=0.0 if rate else args.idle)
                    print(
                        f"  all Running {r.running_wall:.1f}s p99 "
                        f"{report.percentile(r.to_running, 99):.2f}s, purged {r.purged_wall:.1f}s; "
                        f"{r.error or 'ok'}",
                        file=sys.stderr,
                    )
                    results.append(r)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)  # py-spy writes nothing into none
    load_before = report.loadavg()
    started = time.monotonic()
    allocs = max(args.pods, args.rate_pods if args.rate else 0)
    with (
        report.control_plane_session() as (cp, workdir),
        nomad_session(allocs, args.nomad_event_buffer, cluster=args.cluster) as (nomad, proxy),
    ):
        results = asyncio.run(run_all(cp, nomad, proxy, args, workdir))
        describe = nomad.describe
    machine = report.machine_lines(
        load_before=load_before,
        load_after=report.loadavg(),
        extra=[
            f"binaries: {report.binary_versions('kube-apiserver', 'etcd', 'nomad')}; {describe}",
            f"{args.concurrency} creates/deletes in flight, pods bound by nodeName; "
            f"the whole run took {time.monotonic() - started:.0f} s",
        ],
    )
    text = markdown(results, args=args, machine=machine)
    if args.profile is not None:
        raw = args.profile / f"vkgate-nomad-{args.pods}.raw"
        if raw.exists():
            text += (
                f"\n### Where vkgate's CPU goes (py-spy over round 1's {args.pods}-pod burst)\n\n"
                + bench_profile.summarize(raw)
            )
    sys.stdout.write(text)
    if args.json:
        rows = [dict(r.row(), label=args.label) for r in results]
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.write_docs:
        path = report.write_section(args.section, text, doc=args.doc)
        print(f"\nwrote {path}", file=sys.stderr)
    return 0 if all(not r.error for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
