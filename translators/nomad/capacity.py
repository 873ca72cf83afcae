"""Nomad client nodes → the virtual node's capacity, MHz-per-core factor and node info.

One factor F (MHz per Kubernetes core) is used in both directions — pod CPU requests become
``ceil(millicores * F / 1000)`` MHz and node capacity is ``floor(MHz * 1000 / F)`` millicores —
so Kubernetes' bin-packing and Nomad's agree.  F is ``mhz_per_core`` from the settings when
set, else Σ ``NodeResources.Cpu.CpuShares`` ÷ Σ ``TotalCpuCores`` over the eligible nodes
(the same numbers as ``cpu.totalcompute`` ÷ ``cpu.numcores``, but available from one
``/v1/nodes?resources=true`` call), else 1000.

A node counts when ``Status == ready``, ``SchedulingEligibility == eligible``, it is not
draining, and its datacenter (glob patterns, like Nomad's) and node pool match the settings.

==================  ==========================================================================
cpu                 Σ (CpuShares - reserved CpuShares) * 1000 ÷ F, rounded down (millicores)
memory              Σ (MemoryMB - reserved MemoryMB) MiB
ephemeral-storage   Σ (DiskMB - reserved DiskMB) MiB
<vendor>.com/<t>    healthy instances of devices with Vendor=<vendor>, Type=<t> (nvidia.com/gpu)
pods                ``pods`` setting (Nomad has no pod limit)
==================  ==========================================================================
"""

from __future__ import annotations

import fnmatch
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from translators.base import Capacity, NodeInfo
from translators.nomad.config import NomadConfig

DEFAULT_MHZ_PER_CORE = 1000.0


def eligible(node: Mapping[str, Any], cfg: NomadConfig) -> bool:
    if node.get("Status") != "ready" or node.get("SchedulingEligibility") != "eligible":
        return False
    if node.get("Drain"):
        return False
    dc = str(node.get("Datacenter") or "")
    if not any(fnmatch.fnmatchcase(dc, pattern) for pattern in cfg.datacenters):
        return False
    return not (cfg.node_pool and node.get("NodePool") != cfg.node_pool)


def _cpu(node: Mapping[str, Any]) -> tuple[int, int, int]:
    """(CpuShares, reserved CpuShares, cores) of one node stub."""
    res = node.get("NodeResources") or {}
    cpu = res.get("Cpu") or {}
    reserved = ((node.get("ReservedResources") or {}).get("Cpu") or {}).get("CpuShares") or 0
    cores = int(cpu.get("TotalCpuCores") or 0)
    return int(cpu.get("CpuShares") or 0), int(reserved), cores


def mhz_per_core(nodes: Sequence[Mapping[str, Any]], cfg: NomadConfig) -> float:
    """F: the configured value, else measured from the eligible nodes, else 1000."""
    if cfg.mhz_per_core > 0:
        return cfg.mhz_per_core
    shares = cores = 0
    for n in nodes:
        if eligible(n, cfg):
            s, _, c = _cpu(n)
            if s and c:
                shares += s
                cores += c
    return shares / cores if cores else DEFAULT_MHZ_PER_CORE


def capacity(nodes: Sequence[Mapping[str, Any]], cfg: NomadConfig) -> Capacity:
    factor = Fraction(str(mhz_per_core(nodes, cfg)))
    mhz = mem_mb = disk_mb = 0
    devices: Counter[str] = Counter()
    for n in nodes:
        if not eligible(n, cfg):
            continue
        shares, reserved, _ = _cpu(n)
        mhz += max(0, shares - reserved)
        res = n.get("NodeResources") or {}
        rsv = n.get("ReservedResources") or {}
        mem_mb += max(
            0,
            int((res.get("Memory") or {}).get("MemoryMB") or 0)
            - int((rsv.get("Memory") or {}).get("MemoryMB") or 0),
        )
        disk_mb += max(
            0,
            int((res.get("Disk") or {}).get("DiskMB") or 0)
            - int((rsv.get("Disk") or {}).get("DiskMB") or 0),
        )
        for dev in res.get("Devices") or []:
            vendor, kind = str(dev.get("Vendor") or ""), str(dev.get("Type") or "")
            if not vendor or not kind:
                continue
            healthy = sum(1 for i in dev.get("Instances") or [] if i.get("Healthy"))
            devices[f"{vendor}.com/{kind}"] += healthy
    return Capacity(
        cpu_millis=math.floor(mhz * 1000 / factor),
        memory_bytes=mem_mb * 2**20,
        pods=cfg.pods,
        ephemeral_storage_bytes=disk_mb * 2**20,
        extended={k: v for k, v in sorted(devices.items()) if v > 0},
    )


def node_addresses(nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """NodeID → the node's address (``hostIP`` of pods placed there)."""
    return {str(n["ID"]): str(n.get("Address") or "") for n in nodes if n.get("ID")}


def node_info(
    nodes: Sequence[Mapping[str, Any]], detail: Mapping[str, Any] | None, cfg: NomadConfig
) -> NodeInfo:
    """What the virtual node says about itself.

    ``internal_ip`` stays empty: the node's InternalIP is where *vkgate's* kubelet API
    listens, which is not a Nomad address.  OS/arch/kernel come from one eligible client
    (``detail`` is its full ``/v1/node/:id``); the runtime version is the most common
    client version.
    """
    versions = Counter(str(n.get("Version") or "") for n in nodes if eligible(n, cfg))
    version = versions.most_common(1)[0][0] if versions else ""
    attrs: Mapping[str, str] = (detail or {}).get("Attributes") or {}
    labels = {}
    if cfg.region:
        labels["nomad.vkgate.io/region"] = cfg.region
    return NodeInfo(
        internal_ip="",
        hostname=str((detail or {}).get("Name") or ""),
        os=attrs.get("kernel.name", "linux") or "linux",
        arch=attrs.get("cpu.arch", "amd64") or "amd64",
        kernel_version=attrs.get("kernel.version", ""),
        os_image=" ".join(x for x in (attrs.get("os.name"), attrs.get("os.version")) if x),
        runtime_version=f"nomad://{version}" if version else "nomad://unknown",
        labels=labels,
    )
