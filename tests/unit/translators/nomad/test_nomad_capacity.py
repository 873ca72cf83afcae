"""Capacity from Nomad client nodes: which nodes count, the MHz-per-core factor, reserved
resources, devices."""

from __future__ import annotations

from typing import Any

from translators.nomad.capacity import capacity, eligible, mhz_per_core, node_info
from translators.nomad.config import NomadConfig


def node(
    *,
    dc: str = "dc1",
    pool: str = "default",
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
        "ID": f"n-{dc}-{mhz}",
        "Address": "10.0.0.1",
        "Datacenter": dc,
        "NodePool": pool,
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
