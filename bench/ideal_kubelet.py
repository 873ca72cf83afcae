"""The baseline agent: the least a kubelet must write to run pods, and nothing else.

``python -m bench.ideal_kubelet --kubeconfig K --node N --metrics-address 127.0.0.1:P``

For every pod bound to node ``N`` it sends exactly one status PATCH (straight to Running, with
the conditions and container statuses a real kubelet reports, so the API server stores a
status of the same size) and, once the pod has a ``deletionTimestamp``, exactly one final
DELETE (grace 0, UID precondition).  No backend, no Node, no Lease, no Events, no retries
beyond the client's own.  It answers the question "how fast can *any* agent go on this API
server with this client rate limit?", so the benchmark can report vkgate as a ratio to it.

It uses vkgate's own ``KubeClient`` (same HTTP stack, same token-bucket rate limit, same write
counters) and exposes those counters as ``vkgate_api_writes_total`` on a plain-HTTP
``/metrics`` with vkgate's own metrics server, so the harness reads both agents the same way.
A fixed pool of workers (``--workers``, vkgate's ``pods.workers`` default) drains a queue
keyed by pod, latest object wins, like vkgate's work queue.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as _dt
import hashlib
import signal
from collections.abc import Sequence
from typing import Any

from gateway.kube.client import KubeClient
from gateway.kube.errors import Conflict, Gone, NotFound
from gateway.kubelet.api import MetricsServer
from gateway.kubelet.service import add_component_collectors
from gateway.metrics import Metrics

CONDITIONS = (
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def running_status(pod: dict[str, Any]) -> dict[str, Any]:
    """A strategic-merge status patch that takes ``pod`` straight to Running and Ready."""
    now = _now()
    uid = pod["metadata"]["uid"]
    digest = hashlib.sha256(uid.encode()).digest()
    ip = f"10.{digest[0]}.{digest[1]}.{digest[2] or 1}"
    containers = (pod.get("spec") or {}).get("containers") or []
    return {
        "metadata": {"uid": uid},
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": now,
            "qosClass": "BestEffort",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now} for t in CONDITIONS
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": f"ideal://{uid}-{c['name']}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for c in containers
            ],
        },
    }


class IdealKubelet:
    def __init__(self, client: KubeClient, node: str, *, workers: int) -> None:
        self.client = client
        self.node = node
        self.workers = workers
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.latest: dict[str, dict[str, Any]] = {}
        self.running: set[str] = set()  # uids already patched to Running
        self.deleting: set[str] = set()  # uids whose final DELETE was sent
        self.listed = asyncio.Event()

    def _enqueue(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        fresh = key not in self.latest
        self.latest[key] = pod
        if fresh:
            self.queue.put_nowait(key)

    async def watch(self) -> None:
        params = {"fieldSelector": f"spec.nodeName={self.node}"}
        while True:
            listing = await self.client.list("/api/v1/pods", params=params)
            for pod in listing["items"]:
                self._enqueue(pod)
            self.listed.set()
            rv = listing["metadata"]["resourceVersion"]
            with contextlib.suppress(Gone):
                while True:
                    async for ev in self.client.watch(
                        "/api/v1/pods",
                        params={
                            **params,
                            "resourceVersion": rv,
                            "allowWatchBookmarks": True,
                            "timeoutSeconds": 300,
                        },
                    ):
                        obj = ev["object"]
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            self._enqueue(obj)

    async def worker(self) -> None:
        while True:
            key = await self.queue.get()
            pod = self.latest.pop(key, None)
            if pod is None:
                continue
            meta = pod["metadata"]
            uid = meta["uid"]
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            try:
                if meta.get("deletionTimestamp"):
                    if uid not in self.deleting:
                        self.deleting.add(uid)
                        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
                        await self.client.delete(path, body=body)
                elif uid not in self.running:
                    self.running.add(uid)
                    await self.client.patch(path + "/status", running_status(pod))
            except (NotFound, Conflict):
                pass  # gone already, or a new pod with the same name: nothing to do

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.watch())
            for _ in range(self.workers):
                tg.create_task(self.worker())


def own_metrics(client: object) -> Metrics:
    """``vkgate_api_writes_total`` from ``client.stats``, as vkgate exposes it."""
    metrics = Metrics(backend="ideal-kubelet", process=False)
    add_component_collectors(metrics, kube=client)
    return metrics


async def amain(args: argparse.Namespace) -> int:
    client = KubeClient.from_kubeconfig(args.kubeconfig, qps=args.qps, burst=args.burst)
    metrics = MetricsServer(own_metrics(client), args.metrics_address)
    agent = IdealKubelet(client, args.node, workers=args.workers)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.wait_for(agent.listed.wait(), 60)
        await metrics.start()  # the harness treats "/healthz answers" as ready
        await asyncio.wait([task, asyncio.create_task(stop.wait())], return_when="FIRST_COMPLETED")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await metrics.stop()
        await client.aclose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ideal_kubelet", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--metrics-address", required=True, help="host:port, loopback")
    p.add_argument("--workers", type=int, default=10)
    p.add_argument("--qps", type=float, default=50.0)
    p.add_argument("--burst", type=int, default=100)
    return asyncio.run(amain(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
