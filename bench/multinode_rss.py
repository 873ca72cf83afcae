"""Memory of one ``vkgate run`` serving 1, 2, 4 and 8 idle virtual nodes (``[[nodes]]``).

What a node costs when one process serves several (docs/design/multinode.md): a real etcd +
kube-apiserver on 127.0.0.1 (``devstack.controlplane``), then for each node count a
fresh ``vkgate run`` (``devstack.agent.GatewayProcess``) with that many simulated
nodes — each its own Node, Lease, leader Lease, pod watch, kubelet port and serving
certificate — started, left idle for ``--settle`` seconds, sampled from ``/proc`` and stopped.

Reported per node count: RSS after the idle period (median of ``--samples`` readings one
second apart), the high-water mark (``VmHWM``), CPU seconds spent during the idle period, open
sockets (listening kubelet and metrics ports plus API connections), and the cost of each node
beyond the first: ``(RSS(N) - RSS(1)) / (N - 1)``.  The baseline, in the same run, is the one
node process: N separate single-node processes would take ``N x RSS(1)``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import procstat, report
from devstack.agent import GatewayProcess
from devstack.controlplane import ControlPlane

MAX_NODES = 32


@dataclass(frozen=True)
class Result:
    nodes: int
    rss_bytes: int
    hwm_bytes: int
    idle_cpu_seconds: float
    sockets: int


def open_sockets(pid: int) -> int:
    """File descriptors of ``pid`` that are sockets (listeners and connections)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


def measure(cp: ControlPlane, workdir: Path, n: int, *, settle: float, samples: int) -> Result:
    tag = uuid.uuid4().hex[:6]
    nodes = [{"name": f"vk-rss-{tag}-{i}"} for i in range(n)]
    settings = {
        "log": {"level": "info"},
        "backend": {"kind": "simulated", "simulated": {"state_file": ""}},
        "nodes": nodes,
    }
    gw = GatewayProcess(cp, workdir / f"n{n}", settings, ready_timeout=120.0)
    gw.start()
    try:
        pid = gw.pid
        assert pid is not None
        before = procstat.sample(pid).cpu_seconds or 0.0
        time.sleep(settle)
        readings: list[int] = []
        for _ in range(samples):
            readings.append(procstat.sample(pid).rss_bytes or 0)
            time.sleep(1.0)
        last = procstat.sample(pid)
        result = Result(
            nodes=n,
            rss_bytes=int(statistics.median(readings)),
            hwm_bytes=last.hwm_bytes or 0,
            idle_cpu_seconds=(last.cpu_seconds or 0.0) - before,
            sockets=open_sockets(pid),
        )
    finally:
        code = gw.stop()
        for node in nodes:
            cp.api().request("DELETE", f"/api/v1/nodes/{node['name']}")
    if code != 0:
        raise RuntimeError(f"vkgate with {n} nodes exited {code}: {gw.log_text()[-2000:]}")
    return result


def markdown(results: Sequence[Result], *, args: argparse.Namespace, machine: list[str]) -> str:
    base = next(r for r in results if r.nodes == min(x.nodes for x in results))
    rows = []
    for r in results:
        extra = (
            f"{(r.rss_bytes - base.rss_bytes) / (r.nodes - base.nodes) / 2**20:.1f}"
            if r.nodes > base.nodes
            else "—"
        )
        separate = base.rss_bytes * r.nodes / base.nodes
        rows.append(
            [
                r.nodes,
                procstat.mib(r.rss_bytes),
                extra,
                procstat.mib(int(separate)),
                f"{r.rss_bytes / separate:.2f}",
                procstat.mib(r.hwm_bytes),
                f"{r.idle_cpu_seconds / args.settle * 100:.1f} %",
                r.sockets,
            ]
        )
    header = [
        "nodes in one process",
        "RSS (MiB)",
        "per extra node (MiB)",
        f"{base.nodes}-node processes x N (MiB)",
        "ratio",
        "peak RSS (MiB)",
        "idle CPU",
        "sockets",
    ]
    lines = [
        "## One process, several virtual nodes: memory per node (`bench.multinode_rss`)",
        "",
        *machine,
        "",
        f"`{args.command}`: each row is a fresh `vkgate run` with that many simulated nodes "
        f"(no pods), idle {args.settle:.0f} s, RSS the median of {args.samples} readings one "
        "second apart. *per extra node* = (RSS - RSS of one node) / (nodes - 1); the baseline "
        "is the same run's one-node process, times N (what N separate processes would take); "
        "ratio = RSS / that. Idle CPU = CPU time during the idle period / its length (Lease, "
        "leader Lease and status loops of every node). Sockets: kubelet and metrics listeners "
        "plus connections to the API server (one pool for every node).",
        "",
        report.table(header, rows),
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.multinode_rss", description=__doc__.split("\n")[0]
    )
    p.add_argument("--nodes", default="1,2,4,8", help=f"node counts (1..{MAX_NODES}), first = 1")
    p.add_argument("--settle", type=float, default=20.0, help="idle seconds before sampling")
    p.add_argument("--samples", type=int, default=5, help="RSS readings, one second apart")
    p.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    p.add_argument("--doc", type=Path, default=report.DOC, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.counts = [int(x) for x in args.nodes.split(",") if x.strip()]
    except ValueError:
        p.error("--nodes: comma-separated integers")
    if not args.counts or any(not 1 <= c <= MAX_NODES for c in args.counts):
        p.error(f"--nodes: counts in 1..{MAX_NODES}")
    if args.counts[0] != 1:
        p.error("--nodes: the first count must be 1 (the baseline)")
    if not 1 <= args.settle <= 600 or not 1 <= args.samples <= 60:
        p.error("--settle 1..600, --samples 1..60")
    args.command = (
        f"python -m bench.multinode_rss --nodes {args.nodes} --settle {args.settle:g} "
        f"--samples {args.samples}"
    )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = report.loadavg()
    started = time.monotonic()
    results: list[Result] = []
    with report.control_plane_session() as (cp, workdir):
        for n in args.counts:
            print(f"{n} node(s) ...", file=sys.stderr)
            r = measure(cp, workdir, n, settle=args.settle, samples=args.samples)
            print(f"  RSS {procstat.mib(r.rss_bytes)} MiB", file=sys.stderr)
            results.append(r)
    machine = report.machine_lines(
        load_before=load_before,
        load_after=report.loadavg(),
        extra=[
            f"binaries: {report.binary_versions('kube-apiserver', 'etcd')} (both on 127.0.0.1); "
            f"the whole run took {time.monotonic() - started:.0f} s",
        ],
    )
    text = markdown(results, args=args, machine=machine)
    sys.stdout.write(text)
    if args.write_docs:
        path = report.write_section("multinode", text, doc=args.doc)
        print(f"\nwrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
