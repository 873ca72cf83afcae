"""`vkgate dev`'s network without servers: which interface a named address is on, what the
node's address changes, the sample's port and Service, and the printed lines."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from devstack import dev, devnet
from devstack.process import DevstackError
from gateway.cli import build_parser

ADDRS = {"lo": "127.0.0.1", "eth0": "10.1.2.3", "vkdev0": "198.51.100.30"}


def test_a_named_address_must_be_the_first_of_its_interface() -> None:
    assert devnet.interface_of("10.1.2.3", ADDRS) == "eth0"
    with pytest.raises(DevstackError, match=r"no interface has it as its first IPv4 address"):
        devnet.interface_of("10.1.2.4", ADDRS)
    with pytest.raises(DevstackError, match="expected an IPv4 address"):
        devnet.interface_of("fe80::1", ADDRS)


def test_a_routable_node_address_moves_the_node_and_its_kubelet() -> None:
    addr = devnet.NodeAddress("10.1.2.3", "eth0")
    assert addr.routable and addr.enter() == ""
    assert addr.settings() == {
        "node": {"internal_ip": "10.1.2.3"},
        "kubelet": {"address": "10.1.2.3"},
    }
    loop = devnet.NodeAddress()
    assert not loop.routable and loop.settings() == {} and loop.interface == "lo"
    inside = devnet.NodeAddress(devnet.NETNS_IP, devnet.NETNS_INTERFACE, 4242)
    assert inside.enter() == "nsenter --net=/proc/4242/ns/net "


def test_dev_takes_node_ip_and_netns_flags() -> None:
    args = build_parser().parse_args(["dev", "--node-ip", "10.1.2.3", "--netns"])
    assert (args.node_ip, args.netns) == ("10.1.2.3", True)
    plain = build_parser().parse_args(["dev"])
    assert (plain.node_ip, plain.netns) == (None, False)


def test_the_serving_sample_has_a_named_port_its_ip_and_a_server() -> None:
    spec = dev.sample_deployment("vk-dev", serve=True)["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["ports"] == [{"name": "http", "containerPort": devnet.SAMPLE_PORT}]
    assert c["env"][0]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert f'http.server {devnet.SAMPLE_PORT} --bind "$POD_IP"' in c["command"][2]
    assert "hello from vkgate" in c["command"][2]
    plain = dev.sample_deployment("vk-dev")["spec"]["template"]["spec"]["containers"][0]
    assert "ports" not in plain and "sleep 3600" in plain["command"][2]
    svc = devnet.sample_service({"app": dev.SAMPLE_APP})
    assert svc["spec"]["ports"] == [{"port": 80, "targetPort": "http"}]


class _Cp:
    def __init__(self, slices: list[dict[str, Any]]) -> None:
        self.slices = slices

    def get(self, path: str) -> dict[str, Any]:
        assert "labelSelector=kubernetes.io%2Fservice-name%3Dhello-vkgate" in path
        return {"items": self.slices}


def test_only_a_ready_endpoint_with_a_port_counts() -> None:
    not_ready = {"addresses": ["10.1.2.3"], "conditions": {"ready": False}}
    ready = {"addresses": ["10.1.2.3"], "conditions": {"ready": True}}
    assert devnet.ready_endpoint(_Cp([])) is None
    assert (
        devnet.ready_endpoint(_Cp([{"ports": [{"port": 18080}], "endpoints": [not_ready]}])) is None
    )
    assert devnet.ready_endpoint(_Cp([{"ports": None, "endpoints": [ready]}])) is None
    got = devnet.ready_endpoint(
        _Cp([{"ports": [{"port": 18080}], "endpoints": [not_ready, ready]}])
    )
    assert got == ("10.1.2.3", 18080)


def test_on_loopback_the_service_is_applied_and_the_demo_says_why_it_has_no_endpoints() -> None:
    applied: list[dict[str, Any]] = []
    said: list[str] = []

    def k(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        applied.append(json.loads(input or "{}"))
        return subprocess.CompletedProcess(list(args), 0, "created", "")

    out = devnet.service_step(_Cp([]), k, devnet.NodeAddress(), {"app": "x"}, said.append)
    assert out == "" and applied[0]["kind"] == "Service"
    assert "Kubernetes refuses loopback addresses in EndpointSlices" in said[0]
    assert "--node-ip" in said[0]


def test_the_summary_offers_the_service_lines() -> None:
    lines = devnet.try_lines(devnet.NodeAddress("10.1.2.3", "eth0"), "kubectl")
    assert (
        lines[0].strip() == "kubectl get endpointslices -l kubernetes.io/service-name=hello-vkgate"
    )
    assert f"curl http://10.1.2.3:{devnet.SAMPLE_PORT}/" in lines[1]
    inside = devnet.try_lines(devnet.NodeAddress(devnet.NETNS_IP, "vkdev0", 7), "kubectl")
    assert all(ln.strip().startswith("nsenter --net=/proc/7/ns/net ") for ln in inside)
    assert "no endpoints on 127.0.0.1" in devnet.try_lines(devnet.NodeAddress(), "kubectl")[1]
