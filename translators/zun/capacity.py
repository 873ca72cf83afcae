"""Node capacity from the project's Zun quotas and usages (``GET /quotas/{project}?usages=True``).

docs/design/zun.md, "Capacity from quotas": ``cpu`` = cpu.limit vCPU, ``memory`` = memory.limit MiB,
``pods`` = containers.limit.  The node advertises what vkgate can still use: the limit minus the
usage *not* caused by vkgate's own workloads (other tenants of the same project), so the scheduler
neither over-commits nor counts our own pods twice.  ``-1`` (unlimited) falls back to the sum of
``GET /hosts`` (admin only, opt-in ``use_hosts``) or to the defaults below; when a quota and host
totals both exist the smaller wins.  Configured ``cpu``/``memory``/``pods`` win over all. Pure
functions: the translator fetches, this module computes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from translators.base import Capacity, cpu_millis, parse_quantity

#: Used when a quota is unlimited and nothing else bounds it.
DEFAULT_CPU = "64"
DEFAULT_MEMORY = "256Gi"
DEFAULT_PODS = 110


@dataclass(frozen=True)
class Usage:
    """Resources held by vkgate's own workloads (from the last list)."""

    cpu: float = 0.0
    memory_mib: int = 0
    containers: int = 0


def usage_of(containers: Iterable[Mapping[str, Any]]) -> Usage:
    """Sum Zun ``cpu`` (float) and ``memory`` (MiB string) of containers (capsule members
    included: quota counts every container)."""
    cpu = 0.0
    mem = 0
    count = 0
    for c in containers:
        count += 1
        with contextlib.suppress(TypeError, ValueError):
            cpu += float(c.get("cpu") or 0)
        mem += _mib(c.get("memory"))
    return Usage(cpu=cpu, memory_mib=mem, containers=count)


def _mib(value: Any) -> int:
    text = str(value or "0").strip().upper().removesuffix("M").removesuffix("MB")
    try:
        return int(float(text))
    except ValueError:
        return 0


def _quota(quotas: Mapping[str, Any], key: str) -> tuple[float, float]:
    """(limit, in_use) of one resource; accepts the plain-number shape without usages."""
    raw = quotas.get(key)
    if isinstance(raw, Mapping):
        return float(raw.get("limit", -1)), float(raw.get("in_use", 0) or 0)
    if raw is None:
        return -1.0, 0.0
    return float(raw), 0.0


def _bounded(limit: float, host_total: float | None) -> float | None:
    candidates = [v for v in (limit if limit >= 0 else None, host_total) if v is not None]
    return min(candidates) if candidates else None


def capacity_from_quotas(
    quotas: Mapping[str, Any] | None,
    *,
    own: Usage = Usage(),
    hosts: Sequence[Mapping[str, Any]] | None = None,
    cpu: str = "",
    memory: str = "",
    pods: int = 0,
) -> Capacity:
    """Capacity in Kubernetes units (millicores, bytes, pod count)."""
    q = quotas or {}
    host_cpu = sum(float(h.get("cpus") or 0) for h in hosts) if hosts else None
    host_mem = sum(float(h.get("mem_total") or 0) for h in hosts) if hosts else None

    cpu_limit, cpu_used = _quota(q, "cpu")
    mem_limit, mem_used = _quota(q, "memory")
    pod_limit, pod_used = _quota(q, "containers")

    def available(limit: float, used: float, mine: float, host_total: float | None) -> float | None:
        bound = _bounded(limit, host_total)
        if bound is None:
            return None
        foreign = max(0.0, used - mine)
        return max(0.0, bound - foreign)

    cpu_avail = available(cpu_limit, cpu_used, own.cpu, host_cpu)
    mem_avail = available(mem_limit, mem_used, own.memory_mib, host_mem)
    pod_avail = available(pod_limit, pod_used, own.containers, None)

    cpu_m = (
        cpu_millis(cpu)
        if cpu
        else math.floor(cpu_avail * 1000)
        if cpu_avail is not None
        else cpu_millis(DEFAULT_CPU)
    )
    mem_b = (
        int(parse_quantity(memory))
        if memory
        else int(mem_avail) * 2**20
        if mem_avail is not None
        else int(parse_quantity(DEFAULT_MEMORY))
    )
    pod_n = pods or (int(pod_avail) if pod_avail is not None else DEFAULT_PODS)
    return Capacity(cpu_millis=cpu_m, memory_bytes=mem_b, pods=pod_n)
