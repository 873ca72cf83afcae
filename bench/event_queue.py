"""Memory of queued Events: what the Event queue holds while a pod burst's Events trail it.

A pod burst on a real API server queues four Events per pod (Accepted, Created, Started,
Killing) while the senders let status writes go first (docs/design/kube-client.md, "Events
yield to pod work").  Each Event is recorded with the pod version of its moment, decoded from a
watch event and leaned as the pod cache keeps it (``gateway.kube.reflector.lean``); the cache
keeps only the latest version and forgets the pod once it is deleted, so whatever a queued Event
still holds of its pod is held by the queue alone.

This measures, with ``tracemalloc``, the bytes held by ``--pods`` x 4 queued Events once every
pod is gone from the cache (the end of a burst, when the Events trail furthest), and the
process RSS before and after.  No servers; a few seconds per 10,000 pods.

    python -m bench.event_queue --pods 10000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tracemalloc
from typing import Any

import httpx

from gateway.config import KubeSettings
from gateway.kube.client import KubeClient, KubeConfig
from gateway.kube.events import EventRecorder
from gateway.kube.reflector import lean
from vkgate_core.clock import FakeClock

REASONS = (
    ("Accepted", "pod accepted by vkgate"),
    ("Created", "Created container app"),
    ("Started", "Started container app"),
    ("Killing", "Stopping container app"),
)


def server_pod(i: int, version: int, phase: str) -> dict[str, Any]:
    """A pod as the API server sends it in a watch event (managedFields included)."""
    name = f"burst-{i:05d}"
    ts = "2026-11-27T01:00:00Z"
    cond = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"{i:08x}-0000-4000-8000-{version:012x}",
            "resourceVersion": str(100_000 + 4 * i + version),
            "creationTimestamp": ts,
            "labels": {"bench-run": "r1"},
            "managedFields": [
                {
                    "manager": "bench",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": ts,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:containers": {'k:{"name":"app"}': {".": {}}}}},
                }
            ],
        },
        "spec": {
            "nodeName": "vk-bench",
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1.27",
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": phase,
            "conditions": cond,
            "hostIP": "10.0.0.1",
            "podIP": f"10.1.{i // 250}.{i % 250}",
            "startTime": ts,
            "containerStatuses": [
                {
                    "name": "app",
                    "state": {"running": {"startedAt": ts}},
                    "ready": True,
                    "restartCount": 0,
                    "image": "nginx:1.27",
                    "imageID": "",
                    "containerID": f"vkgate://{i:08x}",
                    "started": True,
                }
            ],
            "qosClass": "BestEffort",
        },
    }


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


async def measure(pods: int) -> dict[str, float]:
    clock = FakeClock()
    client = KubeClient(
        KubeConfig(server="https://k"),
        transport=httpx.MockTransport(lambda r: httpx.Response(201, json={})),
        clock=clock,
    )
    recorder = EventRecorder(client, clock=clock, queue_size=10 * pods)
    await recorder.start()  # senders exist but never run: nothing awaits while recording
    gc.collect()
    rss_before = rss_kib()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    cache: dict[str, dict[str, Any]] = {}
    for i in range(pods):
        name = f"burst-{i:05d}"
        for version, (reason, message) in enumerate(REASONS):
            raw = json.loads(json.dumps(server_pod(i, version, "Running")))  # a watch event
            pod = lean(raw, cache.get(name))
            cache[name] = pod
            await recorder.record(pod, type="Normal", reason=reason, message=message)
        del cache[name]  # deleted: the cache forgets it, the queue may not
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    rss_after = rss_kib()
    tracemalloc.stop()
    queued = recorder._queued
    await recorder.stop(drain_seconds=0)
    await client.aclose()
    return {
        "pods": pods,
        "queued": queued,
        "dropped": recorder.counts["dropped"],
        "bytes_per_event": held / max(1, queued),
        "held_mib": held / 2**20,
        "rss_growth_mib": (rss_after - rss_before) / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=10_000)
    args = ap.parse_args(argv)
    r = asyncio.run(measure(args.pods))
    default = KubeSettings().event_queue
    print(
        f"{int(r['queued'])} Events queued for {int(r['pods'])} pods: "
        f"{r['bytes_per_event']:.0f} B per queued Event, {r['held_mib']:.1f} MiB held "
        f"(tracemalloc), RSS +{r['rss_growth_mib']:.1f} MiB; "
        f"the default queue ({default}) drops {max(0, int(r['queued']) - default)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
