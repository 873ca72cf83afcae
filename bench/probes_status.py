"""Probed pods end to end on a real API server: what N readiness probes cost the agent at rest,
and how long a readiness change takes to reach the pods' status (docs/design/probes.md, "Cost").

Run: ``python -m bench.probes_status [--pods 1000] [--period 10] [--window 30] [--write-docs]``.

One etcd + kube-apiserver on 127.0.0.1 and ``vkgate run`` on the simulated backend
(``bench.agents.VkgateAgent``).  Two phases, the same agent process:

1. **baseline**: N pods without probes, all Running; the agent's CPU over ``--window``
   seconds at rest; then they are deleted;
2. **probed**: N pods, each with a ``tcpSocket`` readiness probe every ``--period`` seconds
   (``failureThreshold: 1``) to a listener of this harness (``host: 127.0.0.1``: the simulated
   backend's pod addresses are not routable, and an explicit host is dialled as it is); all
   Ready; the agent's CPU over the same window at rest.  Then the listener is closed: for each
   pod, the time from the close to the watch event with ``Ready=False``; then reopened: the
   time to ``Ready=True``.

With ``--backend nomad`` the agent runs pods on a Nomad 1.6.3 dev agent with ``mock_driver``
tasks behind the counting proxy (``bench.nomad_burst``; template
``bench/job_templates/nomad/mock_driver_exec.j2``, whose tasks answer an exec), and a third
phase gives every pod an ``exec`` readiness probe instead: each attempt is one Nomad exec
WebSocket to the client agent.  The proxy counts Nomad's HTTP requests per second at rest in
each phase.

Reported: the probes' cost (probed minus baseline, in cores), the probe attempts per second,
and the flip → status latencies (p50 / p99 / max) against the target of one period plus 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import nomad_burst, procstat, report
from bench.agents import VkgateAgent
from bench.pods_burst import bounded
from devstack.controlplane import ControlPlane
from gateway.kube.client import KubeClient
from gateway.kube.errors import Gone, NotFound


def pod_manifest(
    name: str,
    ns: str,
    node: str,
    port: int | None,
    period: int,
    *,
    handler: str = "tcpSocket",
    nomad: bool = False,
) -> dict[str, Any]:
    """A pod without a probe (``port`` None), with a tcpSocket probe to the harness's listener,
    or with an exec probe (``handler="exec"``); on Nomad, the mock_driver bench pod's requests."""
    pod: dict[str, Any] = (
        nomad_burst.pod_manifest(name, ns, node)
        if nomad
        else {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "app", "image": "nginx:1.27"}],
            },
        }
    )
    if port is not None:
        action: dict[str, Any] = (
            {"exec": {"command": ["true"]}}
            if handler == "exec"
            else {"tcpSocket": {"host": "127.0.0.1", "port": port}}
        )
        pod["spec"]["containers"][0]["readinessProbe"] = {
            **action,
            "periodSeconds": period,
            "timeoutSeconds": 1,
            "failureThreshold": 1,
        }
    return pod


class Watcher:
    """Each pod's phase and Ready condition, from one watch, with the time it changed."""

    def __init__(self, client: KubeClient, ns: str) -> None:
        self.client, self.ns = client, ns
        self.phase: dict[str, str] = {}
        self.ready: dict[str, bool] = {}
        self.changed: dict[str, float] = {}
        self.gone: set[str] = set()
        self.listed = asyncio.Event()
        self.tick = asyncio.Event()

    def _see(self, kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.gone.add(name)
        st = obj.get("status") or {}
        self.phase[name] = st.get("phase", "")
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in st.get("conditions") or []
        )
        if self.ready.get(name) != ready:
            self.ready[name] = ready
            self.changed[name] = now
        self.tick.set()

    async def run(self) -> None:
        path = f"/api/v1/namespaces/{self.ns}/pods"
        while True:
            listing = await self.client.list(path)
            now = time.monotonic()
            for p in listing["items"]:
                self._see("ADDED", p, now)
            rv = listing["metadata"]["resourceVersion"]
            self.listed.set()
            try:
                params = {"resourceVersion": rv, "allowWatchBookmarks": True, "timeoutSeconds": 900}
                async for ev in self.client.watch(path, params=params):
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._see(ev["type"], ev["object"], time.monotonic())
            except Gone:
                continue

    async def until(self, what: str, done: Any, bound: float) -> None:
        deadline = time.monotonic() + bound
        while not done():
            self.tick.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: not after {bound:.0f} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.tick.wait(), min(left, 1.0))


async def _serve(port: int) -> asyncio.Server:
    async def accept(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.close()

    return await asyncio.start_server(accept, "127.0.0.1", port, backlog=1024)


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _phase(
    client: KubeClient,
    agent: VkgateAgent,
    *,
    node: str,
    n: int,
    port: int | None,
    period: int,
    window: float,
    bound: float,
    handler: str = "tcpSocket",
    proxy: Any = None,
) -> dict[str, Any]:
    ns = f"probes-{uuid.uuid4().hex[:6]}"
    await client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    w = Watcher(client, ns)
    task = asyncio.create_task(w.run())
    out: dict[str, Any] = {"pods": n, "probed": port is not None, "handler": handler}
    server = await _serve(port) if port is not None and handler != "exec" else None
    try:
        await asyncio.wait_for(w.listed.wait(), 30)
        names = [f"p{i:04d}" for i in range(n)]

        async def create(i: int) -> None:
            await client.create(
                f"/api/v1/namespaces/{ns}/pods",
                pod_manifest(
                    names[i], ns, node, port, period, handler=handler, nomad=proxy is not None
                ),
            )

        t0 = time.monotonic()
        errors = await bounded(n, 50, create)
        if errors:
            raise RuntimeError(f"{len(errors)} creates failed, first: {errors[0]}")
        want_ready = port is not None
        await w.until(
            f"{handler if port is not None else 'no-probe'} phase: all Running"
            + (" and Ready" if want_ready else ""),
            lambda: (
                sum(
                    w.phase.get(p) == "Running" and (w.ready.get(p, False) or not want_ready)
                    for p in names
                )
                >= n
            ),
            bound,
        )
        out["to_all_ready"] = time.monotonic() - t0
        await asyncio.sleep(max(5.0, period))  # let the create phase's Events drain
        counted = await asyncio.to_thread(proxy.counts) if proxy is not None else None
        before = procstat.sample(agent.pid)
        await asyncio.sleep(window)
        after = procstat.sample(agent.pid)
        assert before.cpu_seconds is not None and after.cpu_seconds is not None
        out["cores_at_rest"] = (after.cpu_seconds - before.cpu_seconds) / window
        if proxy is not None and counted is not None:
            now = await asyncio.to_thread(proxy.counts)
            per = nomad_burst.counts_diff(now["requests"], counted["requests"])
            out["nomad_requests_per_s"] = sum(per.values()) / window
            out["nomad_requests_top"] = {k: v / window for k, v in per.most_common(4)}
        if server is not None:
            for verdict, action in ((False, "close"), (True, "reopen")):
                if action == "close":
                    server.close()
                    await server.wait_closed()
                else:
                    server = await _serve(int(port or 0))
                flip = time.monotonic()
                await w.until(
                    f"all Ready={verdict}",
                    lambda v=verdict: sum(w.ready.get(p) is v for p in names) >= n,
                    period * 3 + bound,
                )
                lat = [w.changed[p] - flip for p in names]
                out[f"flip_to_{'unready' if not verdict else 'ready'}"] = {
                    "p50": statistics.median(lat),
                    "p99": _pct(lat, 0.99),
                    "max": max(lat),
                }
        t1 = time.monotonic()
        await bounded(n, 50, lambda i: _delete(client, ns, names[i]))
        await w.until("all gone", lambda: len(w.gone) >= n, bound)
        out["to_all_gone"] = time.monotonic() - t1
    finally:
        if server is not None:
            server.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return out


async def _delete(client: KubeClient, ns: str, name: str) -> None:
    with contextlib.suppress(NotFound):
        await client.delete(f"/api/v1/namespaces/{ns}/pods/{name}")


async def run(cp: ControlPlane, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    if args.backend == "nomad":
        with nomad_burst.nomad_session(args.pods + 50) as (_nomad, proxy):
            return await _run(cp, args, workdir, proxy)
    return await _run(cp, args, workdir, None)


def _settings(args: argparse.Namespace, proxy: Any) -> dict[str, Any]:
    # lifted limits: the harness measures the prober, not the client's rate limit
    kube = {"qps": 1000, "burst": 2000, "event_qps": 1000, "event_burst": 2000}
    if proxy is None:
        return {
            "log": {"level": "info"},
            # the tcpSocket probes dial the harness's listener by host (docs/design/probes.md,
            # "What a probe may send, and where")
            "probes": {"allow_host": True},
            "backend": {
                "kind": "simulated",
                "simulated": {"state_file": "", "pods": max(500, args.pods + 10)},
            },
            "kube": kube,
        }
    return {
        "log": {"level": "info"},
        "kube": kube,
        "probes": {"allow_host": True},
        "node": {"capacity": {"pods": str(max(110, args.pods + 100))}},
        "templates": {"dirs": [str(nomad_burst.TEMPLATES_DIR)]},
        "backend": {
            "kind": "nomad",
            "nomad": {
                "address": proxy.address,
                "template": "nomad/mock_driver_exec.j2",
                "drivers": [nomad_burst.DRIVER],
                "mhz_per_core": nomad_burst.MHZ_PER_CORE,
            },
        },
    }


async def _run(
    cp: ControlPlane, args: argparse.Namespace, workdir: Path, proxy: Any
) -> dict[str, Any]:
    agent = VkgateAgent(cp, workdir, _settings(args, proxy))
    node = f"probes-{uuid.uuid4().hex[:6]}"
    result: dict[str, Any] = {"period": args.period, "window": args.window, "backend": args.backend}
    async with KubeClient.from_kubeconfig(cp.kubeconfig, qps=10_000, burst=10_000) as client:
        agent.start(node)
        try:
            common = {
                "node": node,
                "n": args.pods,
                "period": args.period,
                "window": args.window,
                "bound": args.timeout,
                "proxy": proxy,
            }
            result["baseline"] = await _phase(client, agent, port=None, **common)
            result["probed"] = await _phase(client, agent, port=args.port, **common)
            if proxy is not None:
                result["exec"] = await _phase(
                    client, agent, port=args.port, handler="exec", **common
                )
        finally:
            agent.stop()
    return result


def markdown(result: dict[str, Any], *, args: argparse.Namespace, machine: list[str]) -> str:
    base, probed = result["baseline"], result["probed"]
    cost = probed["cores_at_rest"] - base["cores_at_rest"]
    target = args.period + 1.0
    lines = [
        f"## Probed pods on a real API server (`python -m bench.probes_status --pods {args.pods} "
        f"--period {args.period} --window {args.window:g}"
        + (" --backend nomad" if args.backend == "nomad" else "")
        + "`)",
        "",
        *machine,
        "",
        f"{args.pods} Running pods on the {result.get('backend', 'simulated')} backend"
        + (
            " (Nomad 1.6.3 dev agent, mock_driver tasks)"
            if result.get("backend") == "nomad"
            else ""
        )
        + ", each with a tcpSocket readiness probe "
        f"every {args.period} s ({args.pods / args.period:.0f} attempts/s), against the same "
        'pods without probes in the same agent process (docs/design/probes.md, "Cost").',
        "",
        "| | without probes | with probes | probes' cost |",
        "|---|---|---|---|",
        f"| vkgate CPU at rest (cores) | {base['cores_at_rest']:.3f} | "
        f"{probed['cores_at_rest']:.3f} | **{cost:.3f}** (target ≤ 0.05) |",
        f"| create → all Running (Ready) | {base['to_all_ready']:.1f} s | "
        f"{probed['to_all_ready']:.1f} s | |",
        "",
        "| listener flipped | status follows: p50 | p99 | max | target p99 |",
        "|---|---|---|---|---|",
    ]
    if "exec" in result:
        ex = result["exec"]
        lines[-4:-4] = [
            f"| vkgate CPU at rest, exec probes through Nomad (cores) | | "
            f"{ex['cores_at_rest']:.3f} | **{ex['cores_at_rest'] - base['cores_at_rest']:.3f}** "
            "(target ≤ 0.05) |",
            f"| Nomad HTTP requests/s at rest (proxy) | "
            f"{base.get('nomad_requests_per_s', 0):.2f} | "
            f"tcp {probed.get('nomad_requests_per_s', 0):.2f}, exec "
            f"{ex.get('nomad_requests_per_s', 0):.2f} | and "
            f"{args.pods / args.period:.0f} exec WebSockets/s (one per attempt, to the "
            "client agent, not through the proxy) |",
        ]
    for key, label in (
        ("flip_to_unready", "closed → Ready=False"),
        ("flip_to_ready", "reopened → Ready=True"),
    ):
        lat = probed[key]
        ok = "met" if lat["p99"] <= target else "**not met**"
        lines.append(
            f"| {label} | {lat['p50']:.2f} s | {lat['p99']:.2f} s | {lat['max']:.2f} s | "
            f"≤ {target:.0f} s: {ok} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.probes_status", description=__doc__)
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--period", type=int, default=10)
    p.add_argument("--window", type=float, default=30.0, help="seconds of CPU at rest")
    p.add_argument("--port", type=int, default=18765, help="the harness's listener (127.0.0.1)")
    p.add_argument("--timeout", type=float, default=300.0, help="bound of each wait (s)")
    p.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    p.add_argument("--section", default="probes_status")
    p.add_argument(
        "--backend",
        choices=("simulated", "nomad"),
        default="simulated",
        help="nomad: a dev agent with mock_driver tasks behind the counting proxy (bench.nomad_burst)",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = report.loadavg()
    started = time.monotonic()
    with report.control_plane_session() as (cp, workdir):
        result = asyncio.run(run(cp, args, workdir))
    machine = report.machine_lines(
        load_before=load_before,
        load_after=report.loadavg(),
        extra=[f"the whole run took {time.monotonic() - started:.0f} s"],
    )
    text = markdown(result, args=args, machine=machine)
    sys.stdout.write(text)
    if args.write_docs:
        path = report.write_section(args.section, text)
        print(f"\nwrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
