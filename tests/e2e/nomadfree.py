"""What the e2e Nomad cluster leaves free for one vkgate node, computed from Nomad's own answers
with the management token: the ready, eligible clients of the default node pool (where a pod
that asks for no pool runs) minus what the live allocations of *other* jobs hold
(docs/design/nomad.md, "Capacity").  The e2e jobs are single tasks without lifecycle hooks, so a
task's ``AllocatedResources`` is what it holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TERMINAL = {"complete", "failed", "lost"}


@dataclass(frozen=True)
class Free:
    shares: int  # MHz on the eligible clients, reserved subtracted
    cores: int
    total_shares: int  # before reserved and held: for the MHz-per-core factor
    memory_mb: int
    held_shares: int
    held_memory_mb: int


def free_for(agent: Any, node_name: str) -> Free:
    with agent.http_client() as c:
        nodes = [
            n
            for n in c.get("/v1/nodes", params={"resources": "true"}).json()
            if n["Status"] == "ready"
            and n["SchedulingEligibility"] == "eligible"
            and not n["Drain"]
            and (n.get("NodePool") or "default") == "default"
        ]
        ids = {n["ID"] for n in nodes}
        allocs = c.get("/v1/allocations", params={"namespace": "*", "resources": "true"}).json()
        owners = {
            (j["Namespace"], j["ID"]): (j.get("Meta") or {}).get("vkgate.node")
            for j in c.get("/v1/jobs", params={"namespace": "*", "meta": "true"}).json()
        }
    held_cpu = held_mem = 0
    for a in allocs:
        if a["NodeID"] not in ids or a["DesiredStatus"] != "run" or a["ClientStatus"] in TERMINAL:
            continue
        if owners.get((a["Namespace"], a["JobID"])) == node_name:
            continue
        for task in ((a.get("AllocatedResources") or {}).get("Tasks") or {}).values():
            held_cpu += task["Cpu"]["CpuShares"]
            held_mem += task["Memory"]["MemoryMB"]
    shares = sum(n["NodeResources"]["Cpu"]["CpuShares"] for n in nodes)
    reserved = sum(n["ReservedResources"]["Cpu"]["CpuShares"] for n in nodes)
    mem = sum(
        n["NodeResources"]["Memory"]["MemoryMB"] - n["ReservedResources"]["Memory"]["MemoryMB"]
        for n in nodes
    )
    return Free(
        shares=shares - reserved - held_cpu,
        cores=sum(n["NodeResources"]["Cpu"]["TotalCpuCores"] for n in nodes),
        total_shares=shares,
        memory_mb=mem - held_mem,
        held_shares=held_cpu,
        held_memory_mb=held_mem,
    )
