"""Nomad client nodes → the virtual node's capacity, MHz-per-core factor, node info, addresses.

One factor F (MHz per Kubernetes core) is used in both directions — pod CPU requests become
``ceil(millicores * F / 1000)`` MHz and node capacity is ``floor(MHz * 1000 / F)`` millicores —
so Kubernetes' bin-packing and Nomad's agree.  F is ``mhz_per_core`` from the settings when
set, else Σ ``NodeResources.Cpu.CpuShares`` ÷ Σ ``TotalCpuCores`` over the eligible nodes
(the same numbers as ``cpu.totalcompute`` ÷ ``cpu.numcores``, but available from one
``/v1/nodes?resources=true`` call), else 1000.

A node counts when ``Status == ready``, ``SchedulingEligibility == eligible``, it is not
draining, and its datacenter (glob patterns, like Nomad's) and node class match the settings and
its node pool is one a pod of this node can run in (``node_pool`` or "default", and ``node_pools``).

What is free, per eligible node, is what Nomad's scheduler sees free there
(``structs.AllocsFit``): the node's resources minus its reserved resources minus what the
allocations of *other* jobs hold — every allocation that is not terminal (``DesiredStatus``
``run`` and ``ClientStatus`` not ``complete``/``failed``/``lost``) and does not belong to this
virtual node (its own pods are counted by Kubernetes from their requests).  Per node the result
never goes below zero; the node's capacity is the sum:

==================  ==========================================================================
cpu                 Σ (CpuShares - reserved - held CpuShares) * 1000 ÷ F, rounded down
memory              Σ (MemoryMB - reserved - held MemoryMB) MiB
ephemeral-storage   Σ (DiskMB - reserved - held Shared.DiskMB) MiB
<vendor>.com/<t>    healthy instances of devices with Vendor=<vendor>, Type=<t> (nvidia.com/gpu)
                    minus the DeviceIDs other allocations hold
pods                ``pods`` setting (Nomad has no pod limit)
==================  ==========================================================================

What one allocation holds follows ``AllocatedResources.Comparable()`` of Nomad 1.6: main tasks
and prestart sidecars add up, prestart (non-sidecar) tasks and poststop tasks run before or
after the main tasks, so only the largest of the three sums counts; poststart tasks are not
counted (Nomad does not count them either).  Allocations Nomad's ACLs hide from the token
(namespaces without ``read-job``) cannot be seen and are not subtracted.

A pod's ``hostIP`` is the address of the client its allocation runs on (``node_address``): the
first host-mode ``NodeResources.Networks`` IP, which is the IP Nomad fingerprints as
``attr.unique.network.ip-address`` (what a pod's ``status.podIP`` fieldRef becomes, see
``literal.py``), else the host of the client's ``HTTPAddr`` (the stub's ``Address``).
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from translators.base import Capacity, NodeInfo
from translators.nomad.config import NomadConfig

DEFAULT_MHZ_PER_CORE = 1000.0

#: Server-side filter of the allocation list capacity reads: the allocations Nomad's scheduler
#: counts on a node (``Allocation.TerminalStatus`` is false).
HELD_FILTER = (
    'DesiredStatus == "run" and ClientStatus != "complete" and ClientStatus != "failed"'
    ' and ClientStatus != "lost"'
)
_TERMINAL = frozenset({"complete", "failed", "lost"})
#: A Kubernetes label value; a Nomad name that is not one (node classes may hold any text) is
#: left out of the node's labels rather than failing its registration.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def eligible(node: Mapping[str, Any], cfg: NomadConfig) -> bool:
    if node.get("Status") != "ready" or node.get("SchedulingEligibility") != "eligible":
        return False
    if node.get("Drain"):
        return False
    dc = str(node.get("Datacenter") or "")
    if not any(fnmatch.fnmatchcase(dc, pattern) for pattern in cfg.datacenters):
        return False
    if cfg.node_class and node.get("NodeClass") != cfg.node_class:
        return False
    # A job without a node pool runs in "default" (Nomad < 1.6 has no pools: every node is in
    # "default"); a pod may pick another pool only from ``node_pools``.  "all" spans every pool.
    pools = cfg.all_node_pools
    return "all" in pools or str(node.get("NodePool") or "default") in pools


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


@dataclass
class Held:
    """What allocations hold on one node (or what one allocation holds)."""

    mhz: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    devices: Counter[str] = field(default_factory=Counter)

    def add(self, other: Held) -> None:
        self.mhz += other.mhz
        self.memory_mb += other.memory_mb
        self.disk_mb += other.disk_mb
        self.devices.update(other.devices)

    def max(self, other: Held) -> None:
        self.mhz = max(self.mhz, other.mhz)
        self.memory_mb = max(self.memory_mb, other.memory_mb)
        self.devices |= other.devices


def _task_held(task: Mapping[str, Any]) -> Held:
    devices: Counter[str] = Counter()
    for dev in task.get("Devices") or []:
        vendor, kind = str(dev.get("Vendor") or ""), str(dev.get("Type") or "")
        if vendor and kind:
            devices[f"{vendor}.com/{kind}"] += len(dev.get("DeviceIDs") or [])
    return Held(
        mhz=int((task.get("Cpu") or {}).get("CpuShares") or 0),
        memory_mb=int((task.get("Memory") or {}).get("MemoryMB") or 0),
        devices=devices,
    )


def held_by(alloc: Mapping[str, Any]) -> Held:
    """What one allocation holds on its node (Nomad 1.6 ``AllocatedResources.Comparable``)."""
    res = alloc.get("AllocatedResources") or {}
    lifecycles: Mapping[str, Any] = res.get("TaskLifecycles") or {}
    main, sidecars, ephemeral, poststop = Held(), Held(), Held(), Held()
    for name, task in (res.get("Tasks") or {}).items():
        hook = lifecycles.get(name) or {}
        if not hook:
            main.add(_task_held(task))
        elif hook.get("Hook") == "prestart":
            (sidecars if hook.get("Sidecar") else ephemeral).add(_task_held(task))
        elif hook.get("Hook") == "poststop":
            poststop.add(_task_held(task))
    ephemeral.max(main)
    ephemeral.max(poststop)
    sidecars.add(ephemeral)
    sidecars.disk_mb = int((res.get("Shared") or {}).get("DiskMB") or 0)
    return sidecars


def holds_resources(alloc: Mapping[str, Any]) -> bool:
    """Nomad's scheduler counts the allocation (``HELD_FILTER``, checked again here)."""
    return alloc.get("DesiredStatus", "run") == "run" and alloc.get("ClientStatus") not in _TERMINAL


def per_node(held: Iterable[tuple[str, Held]]) -> dict[str, Held]:
    """NodeID → the sum of what each (NodeID, Held) pair holds there."""
    out: dict[str, Held] = {}
    for node, one in held:
        out.setdefault(node, Held()).add(one)
    return out


def held_per_node(allocs: Iterable[Mapping[str, Any]]) -> dict[str, Held]:
    """NodeID → what the given (non-terminal) allocations hold there."""
    return per_node(
        (str(a["NodeID"]), held_by(a)) for a in allocs if a.get("NodeID") and holds_resources(a)
    )


def _free(total: Any, reserved: Any, held: int) -> int:
    return max(0, int(total or 0) - int(reserved or 0) - held)


def capacity(
    nodes: Sequence[Mapping[str, Any]],
    cfg: NomadConfig,
    *,
    held: Mapping[str, Held] | None = None,
) -> Capacity:
    """The eligible nodes' resources minus reserved minus ``held`` (NodeID → what other jobs'
    allocations hold there, ``held_per_node``)."""
    factor = Fraction(str(mhz_per_core(nodes, cfg)))
    mhz = mem_mb = disk_mb = 0
    devices: Counter[str] = Counter()
    for n in nodes:
        if not eligible(n, cfg):
            continue
        used = (held or {}).get(str(n.get("ID") or "")) or Held()
        shares, reserved, _ = _cpu(n)
        mhz += _free(shares, reserved, used.mhz)
        res = n.get("NodeResources") or {}
        rsv = n.get("ReservedResources") or {}
        mem_mb += _free(
            (res.get("Memory") or {}).get("MemoryMB"),
            (rsv.get("Memory") or {}).get("MemoryMB"),
            used.memory_mb,
        )
        disk_mb += _free(
            (res.get("Disk") or {}).get("DiskMB"),
            (rsv.get("Disk") or {}).get("DiskMB"),
            used.disk_mb,
        )
        healthy: Counter[str] = Counter()
        for dev in res.get("Devices") or []:
            vendor, kind = str(dev.get("Vendor") or ""), str(dev.get("Type") or "")
            if not vendor or not kind:
                continue
            count = sum(1 for i in dev.get("Instances") or [] if i.get("Healthy"))
            healthy[f"{vendor}.com/{kind}"] += count
        for name, count in healthy.items():
            devices[name] += max(0, count - used.devices[name])
    return Capacity(
        cpu_millis=math.floor(mhz * 1000 / factor),
        memory_bytes=mem_mb * 2**20,
        pods=cfg.pods,
        ephemeral_storage_bytes=disk_mb * 2**20,
        extended={k: v for k, v in sorted(devices.items()) if v > 0},
    )


def node_address(node: Mapping[str, Any]) -> str:
    """The client's IP for ``hostIP``/``podIP`` (see the module docstring)."""
    for net in (node.get("NodeResources") or {}).get("Networks") or []:
        if (net.get("Mode") or "host") == "host" and net.get("IP"):
            return str(net["IP"])
    return str(node.get("Address") or "")


def node_addresses(nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """NodeID → the node's address (``hostIP`` of pods placed there)."""
    return {str(n["ID"]): node_address(n) for n in nodes if n.get("ID")}


def node_info(
    nodes: Sequence[Mapping[str, Any]], detail: Mapping[str, Any] | None, cfg: NomadConfig
) -> NodeInfo:
    """What the virtual node says about itself.

    ``internal_ip`` and ``hostname`` stay empty: the node's addresses are where *vkgate's*
    kubelet API listens and the virtual node's own name (the gateway fills them from its
    settings), not any one Nomad client (docs/design/kubelet-contract.md, "Node object").
    OS/arch/kernel come from one eligible client (``detail`` is its full ``/v1/node/:id``);
    the runtime version is the most common client version.  Labels name the region, node
    pool and node class the settings pin the node to, so nodeSelectors can steer to it.
    """
    versions = Counter(str(n.get("Version") or "") for n in nodes if eligible(n, cfg))
    version = versions.most_common(1)[0][0] if versions else ""
    attrs: Mapping[str, str] = (detail or {}).get("Attributes") or {}
    pins = {
        "nomad.vkgate.io/region": cfg.region,
        "nomad.vkgate.io/node-pool": cfg.node_pool,
        "nomad.vkgate.io/node-class": cfg.node_class,
        "node.kubernetes.io/instance-type": cfg.node_class,
    }
    labels = {k: v for k, v in pins.items() if v and _LABEL_VALUE.fullmatch(v)}
    return NodeInfo(
        internal_ip="",
        hostname="",
        os=attrs.get("kernel.name", "linux") or "linux",
        arch=attrs.get("cpu.arch", "amd64") or "amd64",
        kernel_version=attrs.get("kernel.version", ""),
        os_image=" ".join(x for x in (attrs.get("os.name"), attrs.get("os.version")) if x),
        runtime_version=f"nomad://{version}" if version else "nomad://unknown",
        labels=labels,
    )
