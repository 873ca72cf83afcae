"""``/stats/summary``: the kubelet Summary API shape, from translator usage.

Shape: docs/design/kubelet-contract.md, "Stats summary".

Only what the backend measured appears: ``cpu`` carries ``usageNanoCores`` /
``usageCoreNanoSeconds`` and ``memory`` ``workingSetBytes`` / ``rssBytes`` when known, each
object with its ``time``.  Unknown fields are left out rather than zeroed (same rule as
``/metrics/resource``, same pod/node aggregation).  ``only_cpu_and_memory=true`` is accepted;
we never report more than CPU and memory anyway.

Internal to ``gateway.kubelet.api``: ``routes`` calls it.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from gateway.kubelet.api.metrics import node_cpu, node_memory, pod_cpu, pod_memory
from translators.base import ContainerUsage, NodeUsage, PodUsage


def _ts(t: _dt.datetime) -> str:
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cpu(time: str, core_seconds: float | None, nano_cores: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"time": time}
    if nano_cores is not None:
        out["usageNanoCores"] = int(nano_cores)
    if core_seconds is not None:
        out["usageCoreNanoSeconds"] = round(core_seconds * 1e9)
    return out


def _memory(time: str, working_set: float | None, rss: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"time": time}
    if working_set is not None:
        out["workingSetBytes"] = int(working_set)
    if rss is not None:
        out["rssBytes"] = int(rss)
    return out


def _sum_int(values: list[int | None]) -> int | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _container(c: ContainerUsage, time: str, fallback_start: str) -> dict[str, Any]:
    return {
        "name": c.name,
        "startTime": _ts(c.started_at) if c.started_at else fallback_start,
        "cpu": _cpu(time, c.cpu_core_seconds, c.cpu_nano_cores),
        "memory": _memory(time, c.memory_working_set_bytes, c.memory_rss_bytes),
    }


def _pod(p: PodUsage, time: str, node_start: str) -> dict[str, Any]:
    start = _ts(p.started_at) if p.started_at else node_start
    return {
        "podRef": {"name": p.ref.name, "namespace": p.ref.namespace, "uid": p.ref.uid},
        "startTime": start,
        "containers": [_container(c, time, start) for c in p.containers],
        "cpu": _cpu(time, pod_cpu(p), _sum_int([c.cpu_nano_cores for c in p.containers])),
        "memory": _memory(
            time, pod_memory(p), _sum_int([c.memory_rss_bytes for c in p.containers])
        ),
    }


def summary(usage: NodeUsage, *, node_name: str, node_start: _dt.datetime) -> dict[str, Any]:
    time = _ts(usage.time)
    start = _ts(node_start)
    nano = usage.cpu_nano_cores
    if nano is None:
        nano = _sum_int([_sum_int([c.cpu_nano_cores for c in p.containers]) for p in usage.pods])
    return {
        "node": {
            "nodeName": node_name,
            "startTime": start,
            "cpu": _cpu(time, node_cpu(usage), nano),
            "memory": _memory(time, node_memory(usage), None),
        },
        "pods": [
            _pod(p, time, start)
            for p in sorted(usage.pods, key=lambda p: (p.ref.namespace, p.ref.name))
        ],
    }


def empty_summary(*, node_name: str, node_start: _dt.datetime, now: _dt.datetime) -> dict[str, Any]:
    """For a backend without metrics: the node, no usage, no pods."""
    time = _ts(now)
    return {
        "node": {
            "nodeName": node_name,
            "startTime": _ts(node_start),
            "cpu": {"time": time},
            "memory": {"time": time},
        },
        "pods": [],
    }
