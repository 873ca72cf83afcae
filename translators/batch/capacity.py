"""Node capacity from the Batch pool, and the node cache the status mapping uses for host IPs.

Batch does not expose a VM size's cores or memory, so a small built-in table of common sizes
(``VM_SIZES``, overridable and extendable with ``[backend.batch.vm_sizes.<name>]``) turns the
pool's ``vmSize`` into resources.  Capacity counts *usable* nodes (``idle``/``running``) from one
``list_nodes`` call; ``pods`` is usable nodes x ``taskSlotsPerNode``.  When the node list is not
available the pool's current dedicated + low-priority counts stand in.  ``[backend.batch.capacity]``
overrides win over everything (e.g. an autoscaling pool at zero nodes still advertises room).

``NodeCache`` keeps the pool and its nodes for ``node_refresh_seconds``, so ``hostIP`` costs at most
one node list per interval, never one call per pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from translators.base import JSON, BackendRejected, Capacity, cpu_millis, parse_quantity
from translators.batch.settings import VmSize

log = logging.getLogger(__name__)

_GI = 1024**3

#: cores, memory, GPUs of common sizes (lower-case names, as Batch reports them).
VM_SIZES: dict[str, VmSize] = {
    "standard_a1_v2": VmSize(1, 2 * _GI),
    "standard_a2_v2": VmSize(2, 4 * _GI),
    "standard_a4_v2": VmSize(4, 8 * _GI),
    "standard_a8_v2": VmSize(8, 16 * _GI),
    "standard_b2s": VmSize(2, 4 * _GI),
    "standard_b4ms": VmSize(4, 16 * _GI),
    "standard_d2s_v3": VmSize(2, 8 * _GI),
    "standard_d4s_v3": VmSize(4, 16 * _GI),
    "standard_d8s_v3": VmSize(8, 32 * _GI),
    "standard_d16s_v3": VmSize(16, 64 * _GI),
    "standard_d32s_v3": VmSize(32, 128 * _GI),
    "standard_d2s_v5": VmSize(2, 8 * _GI),
    "standard_d4s_v5": VmSize(4, 16 * _GI),
    "standard_d8s_v5": VmSize(8, 32 * _GI),
    "standard_d16s_v5": VmSize(16, 64 * _GI),
    "standard_d2ds_v5": VmSize(2, 8 * _GI),
    "standard_d4ds_v5": VmSize(4, 16 * _GI),
    "standard_e2s_v3": VmSize(2, 16 * _GI),
    "standard_e4s_v3": VmSize(4, 32 * _GI),
    "standard_e8s_v3": VmSize(8, 64 * _GI),
    "standard_f2s_v2": VmSize(2, 4 * _GI),
    "standard_f4s_v2": VmSize(4, 8 * _GI),
    "standard_f8s_v2": VmSize(8, 16 * _GI),
    "standard_f16s_v2": VmSize(16, 32 * _GI),
    "standard_nc6s_v3": VmSize(6, 112 * _GI, 1),
    "standard_nc12s_v3": VmSize(12, 224 * _GI, 2),
    "standard_nc24s_v3": VmSize(24, 448 * _GI, 4),
    "standard_nc4as_t4_v3": VmSize(4, 28 * _GI, 1),
    "standard_nc8as_t4_v3": VmSize(8, 56 * _GI, 1),
    "standard_nc16as_t4_v3": VmSize(16, 110 * _GI, 1),
    "standard_nc64as_t4_v3": VmSize(64, 440 * _GI, 4),
}

#: Node states whose task slots count as capacity.
USABLE_STATES = frozenset({"idle", "running"})


@dataclass(frozen=True)
class PoolInfo:
    """The pool facts vkgate uses (capacity, requiredSlots, docker run options)."""

    id: str
    vm_size: str = ""
    slots_per_node: int = 1
    #: ``dockerCompatible``, ``criCompatible`` or "" (no container configuration).
    container_type: str = ""
    state: str = ""
    allocation_state: str = ""
    dedicated: int = 0
    low_priority: int = 0

    @classmethod
    def from_json(cls, pool: JSON) -> PoolInfo:
        vmc = pool.get("virtualMachineConfiguration") or {}
        cc = vmc.get("containerConfiguration") or {}
        return cls(
            id=str(pool.get("id", "")),
            vm_size=str(pool.get("vmSize", "")).lower(),
            slots_per_node=int(pool.get("taskSlotsPerNode") or 1),
            container_type=str(cc.get("type", "")),
            state=str(pool.get("state", "")),
            allocation_state=str(pool.get("allocationState", "")),
            dedicated=int(pool.get("currentDedicatedNodes") or 0),
            low_priority=int(pool.get("currentLowPriorityNodes") or 0),
        )

    def as_context(self, vm: VmSize | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "vm_size": self.vm_size,
            "slots_per_node": self.slots_per_node,
            "container_type": self.container_type,
            "cores": vm.cpus if vm else None,
            "memory_bytes": vm.memory_bytes if vm else None,
            "gpus": vm.gpus if vm else None,
        }


def vm_size(name: str, overrides: Mapping[str, VmSize]) -> VmSize | None:
    key = name.lower()
    return overrides.get(key) or VM_SIZES.get(key)


def capacity_from_pool(
    pool: PoolInfo,
    nodes: Sequence[JSON] | None,
    *,
    sizes: Mapping[str, VmSize],
    overrides: Mapping[str, str],
) -> Capacity:
    """Capacity of the pool's usable nodes; ``overrides`` (cpu, memory, pods, gpu) win."""
    if nodes is not None:
        count = sum(1 for n in nodes if str(n.get("state", "")).lower() in USABLE_STATES)
    else:
        count = pool.dedicated + pool.low_priority
    vm = vm_size(pool.vm_size, sizes)
    if vm is None and not ({"cpu", "memory"} <= set(overrides)):
        raise BackendRejected(
            f"pool {pool.id!r} has vmSize {pool.vm_size!r}, which vkgate has no cores/memory for: "
            f"add [backend.batch.vm_sizes.{pool.vm_size}] cpu/memory (or capacity overrides)",
            reason="UnknownVmSize",
        )
    cpu = int(count * vm.cpus * 1000) if vm else 0
    memory = count * vm.memory_bytes if vm else 0
    gpus = count * vm.gpus if vm else 0
    pods = count * pool.slots_per_node
    if "cpu" in overrides:
        cpu = cpu_millis(overrides["cpu"])
    if "memory" in overrides:
        memory = int(parse_quantity(overrides["memory"]))
    if "pods" in overrides:
        pods = int(parse_quantity(overrides["pods"]))
    for key in ("nvidia.com/gpu", "gpu", "gpus"):
        if key in overrides:
            gpus = int(parse_quantity(overrides[key]))
    return Capacity(
        cpu_millis=cpu,
        memory_bytes=memory,
        pods=pods,
        extended={"nvidia.com/gpu": gpus} if gpus else {},
    )


class NodeCache:
    """The pool and its nodes, refreshed at most once per interval (one list call)."""

    def __init__(
        self,
        api: Any,
        pool_id: str,
        *,
        node_ttl: float,
        pool_ttl: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._pool_id = pool_id
        self._node_ttl = node_ttl
        self._pool_ttl = pool_ttl
        self._mono = monotonic
        self.pool: PoolInfo | None = None
        self.nodes: dict[str, JSON] | None = None
        self._pool_at = -1e18
        self._nodes_at = -1e18

    async def refresh_pool(self, *, force: bool = False) -> PoolInfo:
        if force or self.pool is None or self._mono() - self._pool_at >= self._pool_ttl:
            self.pool = PoolInfo.from_json(await self._api.get_pool(self._pool_id))
            self._pool_at = self._mono()
            if self.pool.allocation_state not in ("", "steady"):
                log.info("Batch pool %s is %s", self.pool.id, self.pool.allocation_state)
        return self.pool

    async def refresh_nodes(self, *, force: bool = False) -> dict[str, JSON]:
        if force or self.nodes is None or self._mono() - self._nodes_at >= self._node_ttl:
            nodes = await self._api.list_nodes(self._pool_id)
            self.nodes = {str(n.get("id")): n for n in nodes}
            self._nodes_at = self._mono()
        return self.nodes

    def stale(self) -> bool:
        return self.nodes is None or self._mono() - self._nodes_at >= self._node_ttl

    def ip_of(self, node_id: str) -> str:
        node = (self.nodes or {}).get(node_id)
        return str(node.get("ipAddress", "")) if node else ""
