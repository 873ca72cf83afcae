"""Capacity from Nomad client nodes: which nodes count, the MHz-per-core factor, reserved
resources, devices, what other jobs' allocations hold, the node's info and the clients'
addresses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from translators.nomad.capacity import (
    capacity,
    eligible,
    held_by,
    held_per_node,
    mhz_per_core,
    node_address,
    node_addresses,
    node_info,
)
from translators.nomad.config import NomadConfig


def node(
    *,
    dc: str = "dc1",
    pool: str = "default",
    node_class: str = "",
    node_id: str = "",
    status: str = "ready",
    elig: str = "eligible",
    drain: bool = False,
    mhz: int = 4000,
    cores: int = 2,
    mem: int = 8192,
    reserved_mhz: int = 0,
    reserved_mem: int = 0,
    devices: list[dict[str, Any]] | None = None,
    version: str = "1.11.3",
) -> dict[str, Any]:
    return {
        "ID": node_id or f"n-{dc}-{mhz}",
        "Address": "10.0.0.1",
        "Datacenter": dc,
        "NodePool": pool,
        "NodeClass": node_class,
        "Status": status,
        "SchedulingEligibility": elig,
        "Drain": drain,
        "Version": version,
        "NodeResources": {
            "Cpu": {"CpuShares": mhz, "TotalCpuCores": cores},
            "Memory": {"MemoryMB": mem},
            "Disk": {"DiskMB": 1000},
            "Devices": devices or [],
        },
        "ReservedResources": {
            "Cpu": {"CpuShares": reserved_mhz},
            "Memory": {"MemoryMB": reserved_mem},
            "Disk": {"DiskMB": 0},
        },
    }


CFG = NomadConfig.from_settings({}, environ={})


def test_only_ready_eligible_not_draining_nodes_count() -> None:
    nodes = [
        node(),
        node(status="down"),
        node(elig="ineligible"),
        node(drain=True),
        node(status="initializing"),
    ]
    cap = capacity(nodes, CFG)
    assert cap.cpu_millis == 2000 and cap.memory_bytes == 8192 * 2**20


def test_datacenter_globs_and_node_pool_filter() -> None:
    cfg = NomadConfig.from_settings({"datacenters": ["eu-*"], "node_pool": "gpu"}, environ={})
    assert eligible(node(dc="eu-west", pool="gpu"), cfg)
    assert not eligible(node(dc="us-east", pool="gpu"), cfg)
    assert not eligible(node(dc="eu-west", pool="default"), cfg)


def test_only_pools_a_pod_of_this_node_can_run_in_count() -> None:
    """Without ``node_pool`` a job runs in Nomad's "default" pool: a client in another pool
    counts only when ``node_pools`` lets a pod pick it; Nomad < 1.6 nodes (no pool) are
    "default"; "all" spans every pool."""
    plain = NomadConfig.from_settings({}, environ={})
    assert eligible(node(pool="default"), plain)
    assert not eligible(node(pool="pool-b"), plain)
    legacy = node()
    del legacy["NodePool"]
    assert eligible(legacy, plain)
    picks = NomadConfig.from_settings({"node_pools": ["pool-b"]}, environ={})
    assert eligible(node(pool="pool-b"), picks) and eligible(node(pool="default"), picks)
    assert not eligible(node(pool="pool-c"), picks)
    assert eligible(
        node(pool="pool-c"), NomadConfig.from_settings({"node_pool": "all"}, environ={})
    )


def test_one_factor_in_both_directions_and_reserved_is_subtracted() -> None:
    nodes = [node(mhz=4800, cores=2, reserved_mhz=600, reserved_mem=512), node(mhz=2400, cores=1)]
    assert mhz_per_core(nodes, CFG) == 2400  # 7200 MHz / 3 cores
    cap = capacity(nodes, CFG)
    assert cap.cpu_millis == (4800 - 600 + 2400) * 1000 // 2400 == 2750
    assert cap.memory_bytes == (8192 - 512 + 8192) * 2**20


def test_configured_factor_wins_and_no_nodes_falls_back_to_1000() -> None:
    cfg = NomadConfig.from_settings({"mhz_per_core": 1000}, environ={})
    assert capacity([node(mhz=4000)], cfg).cpu_millis == 4000
    assert mhz_per_core([], CFG) == 1000


def test_healthy_gpus_are_counted() -> None:
    gpus = [
        {
            "Vendor": "nvidia",
            "Type": "gpu",
            "Name": "A100",
            "Instances": [{"ID": "1", "Healthy": True}, {"ID": "2", "Healthy": False}],
        }
    ]
    cap = capacity([node(devices=gpus), node(devices=gpus)], CFG)
    assert cap.extended == {"nvidia.com/gpu": 2}
    assert cap.pods == 110


def test_node_info_reports_the_runtime_and_platform() -> None:
    detail = {
        "Name": "client-1",
        "Attributes": {
            "kernel.name": "linux",
            "cpu.arch": "arm64",
            "os.name": "debian",
            "os.version": "12",
        },
    }
    info = node_info(
        [node(version="1.11.3"), node(version="1.11.3"), node(version="1.10.0")], detail, CFG
    )
    assert info.runtime_version == "nomad://1.11.3"
    assert (info.os, info.arch, info.os_image) == ("linux", "arm64", "debian 12")
    assert info.internal_ip == ""
    # the virtual node's Hostname is its own name (the gateway's), never one Nomad client's
    assert info.hostname == ""
    assert info.labels == {}


def test_node_info_labels_name_the_pool_and_class_the_node_is_pinned_to() -> None:
    cfg = NomadConfig.from_settings(
        {"region": "eu", "node_pool": "pool-b", "node_class": "class-b"}, environ={}
    )
    assert node_info([], None, cfg).labels == {
        "nomad.vkgate.io/region": "eu",
        "nomad.vkgate.io/node-pool": "pool-b",
        "nomad.vkgate.io/node-class": "class-b",
        "node.kubernetes.io/instance-type": "class-b",
    }
    # a node class that is no label value stays out rather than failing the registration
    odd = NomadConfig.from_settings({"node_class": "big box/2"}, environ={})
    assert node_info([], None, odd).labels == {}


def test_node_class_filters_the_clients() -> None:
    cfg = NomadConfig.from_settings({"node_class": "class-b"}, environ={})
    assert eligible(node(node_class="class-b"), cfg)
    assert not eligible(node(node_class="class-a"), cfg)
    both = [node(node_class="class-a", node_id="a"), node(node_class="class-b", node_id="b")]
    assert capacity(both, cfg).memory_bytes == 8192 * 2**20
    assert capacity(both, CFG).memory_bytes == 2 * 8192 * 2**20


# -- what other jobs hold ----------------------------------------------------------------------


def task(mhz: int, mem: int, devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An ``AllocatedTaskResources`` as ``/v1/allocations?resources=true`` returns it (1.6)."""
    return {
        "Cpu": {"CpuShares": mhz, "ReservedCores": None},
        "Memory": {"MemoryMB": mem, "MemoryMaxMB": 0},
        "Networks": None,
        "Devices": devices,
    }


def alloc(
    node_id: str,
    tasks: dict[str, dict[str, Any]],
    *,
    lifecycles: dict[str, Any] | None = None,
    disk: int = 300,
    desired: str = "run",
    client: str = "running",
) -> dict[str, Any]:
    return {
        "ID": f"a-{node_id}-{len(tasks)}",
        "Namespace": "other-team",
        "NodeID": node_id,
        "JobID": "etl",
        "DesiredStatus": desired,
        "ClientStatus": client,
        "AllocatedResources": {
            "Tasks": tasks,
            "TaskLifecycles": lifecycles or dict.fromkeys(tasks),
            "Shared": {"DiskMB": disk, "Networks": None, "Ports": None},
        },
    }


def test_other_jobs_allocations_are_subtracted_per_node_and_never_below_zero() -> None:
    cfg = NomadConfig.from_settings({"mhz_per_core": 1000}, environ={})
    nodes = [node(node_id="c1", mhz=4000, mem=8192), node(node_id="c2", mhz=2000, mem=4096)]
    held = held_per_node(
        [
            alloc("c1", {"etl": task(1500, 3072)}),
            alloc("c1", {"web": task(500, 1024)}),
            alloc("c2", {"big": task(9000, 9000)}, disk=5000),  # more than the node has
        ]
    )
    cap = capacity(nodes, cfg, held=held)
    assert cap.cpu_millis == (4000 - 1500 - 500) + 0
    assert cap.memory_bytes == (8192 - 3072 - 1024) * 2**20
    assert cap.ephemeral_storage_bytes == (1000 - 600) * 2**20
    assert capacity(nodes, cfg).cpu_millis == 6000  # nothing held: the whole clients


@pytest.mark.parametrize(
    ("desired", "client", "counts"),
    [
        ("run", "pending", True),
        ("run", "running", True),
        ("run", "unknown", True),
        ("run", "complete", False),
        ("run", "failed", False),
        ("run", "lost", False),
        ("stop", "running", False),  # Nomad's scheduler no longer counts a stopping allocation
        ("evict", "running", False),
    ],
)
def test_only_allocations_nomad_counts_hold_resources(
    desired: str, client: str, counts: bool
) -> None:
    held = held_per_node([alloc("c1", {"t": task(700, 100)}, desired=desired, client=client)])
    assert ("c1" in held) is counts


def test_an_allocation_holds_what_nomads_scheduler_counts_for_its_lifecycle_hooks() -> None:
    """Main tasks and prestart sidecars add up; a prestart (init) task and poststop tasks run
    before/after the main tasks, so only the largest of the three counts (Nomad 1.6
    ``AllocatedResources.Comparable``); a poststart task is not counted."""
    a = alloc(
        "c1",
        {
            "app": task(500, 256),
            "proxy": task(100, 64),
            "init": task(2000, 128),
            "cleanup": task(50, 512),
            "notify": task(999, 999),
        },
        lifecycles={
            "app": None,
            "proxy": {"Hook": "prestart", "Sidecar": True},
            "init": {"Hook": "prestart", "Sidecar": False},
            "cleanup": {"Hook": "poststop", "Sidecar": False},
            "notify": {"Hook": "poststart", "Sidecar": False},
        },
        disk=150,
    )
    held = held_by(a)
    assert (held.mhz, held.memory_mb, held.disk_mb) == (100 + 2000, 64 + 512, 150)


def test_devices_other_allocations_hold_are_not_offered() -> None:
    gpus = [
        {
            "Vendor": "nvidia",
            "Type": "gpu",
            "Name": "A100",
            "Instances": [{"ID": "g1", "Healthy": True}, {"ID": "g2", "Healthy": True}],
        }
    ]
    dev = [{"Vendor": "nvidia", "Type": "gpu", "Name": "A100", "DeviceIDs": ["g1"]}]
    nodes = [node(node_id="c1", devices=gpus), node(node_id="c2", devices=gpus)]
    held = held_per_node([alloc("c1", {"train": task(100, 100, dev)})])
    assert capacity(nodes, CFG, held=held).extended == {"nvidia.com/gpu": 3}


# -- addresses -------------------------------------------------------------------------------


def test_a_clients_address_is_its_fingerprinted_ip_else_its_http_address() -> None:
    """``NodeResources.Networks`` (``/v1/nodes?resources=true``, Nomad 1.6): the host-mode
    entry's IP is ``attr.unique.network.ip-address``; a bridge entry is not the host."""
    stub = node(node_id="c1")
    stub["Address"] = "198.51.100.21"  # HTTPAddr's host
    assert node_address(stub) == "198.51.100.21"
    stub["NodeResources"]["Networks"] = [
        {"Mode": "bridge", "Device": "nomad", "IP": "172.26.64.1", "CIDR": "172.26.64.1/20"},
        {"Mode": "host", "Device": "veth-c1", "IP": "198.51.100.121", "CIDR": "198.51.100.121/32"},
    ]
    assert node_address(stub) == "198.51.100.121"
    assert node_addresses([stub, node(node_id="c2")]) == {"c1": "198.51.100.121", "c2": "10.0.0.1"}


# -- real Nomad 1.6.3 ------------------------------------------------------------------------

CAPTURED = json.loads((Path(__file__).parent / "nomad-1.6.3-clients.json").read_text())


def test_captured_nomad_1_6_responses_give_what_its_scheduler_left_free() -> None:
    """The scheduler placed 2900 MHz more on this 5192 MHz client, so it counted the captured
    allocation as 2100 MHz (``note`` in the file), not the 2600 MHz ``nomad node status`` sums."""
    nodes, allocs = CAPTURED["nodes"], CAPTURED["allocations"]
    held = held_per_node(allocs)
    (node_id,) = held
    assert (held[node_id].mhz, held[node_id].memory_mb, held[node_id].disk_mb) == (2100, 320, 150)
    cfg = NomadConfig.from_settings({"mhz_per_core": 1000}, environ={})
    cap = capacity(nodes, cfg, held=held)
    assert cap.cpu_millis == 5192 - 2100
    assert cap.memory_bytes == (24105 - 320) * 2**20
    assert node_addresses(nodes) == {node_id: "127.0.0.1"}  # the host entry, not the bridge
    assert eligible(nodes[0], NomadConfig.from_settings({"node_class": "class-a"}, environ={}))
