"""Which ports of a pod port-forward reaches (``gateway.kubelet.api.podports``): every port of a
pod with a network namespace of its own, only the pod's ports when its address is its host's."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.kubelet.api.podports import declared_ports, reach
from translators.base import PodRef, WorkloadState
from vkgate_core.kubetypes import Pod, as_pod

REF = PodRef("default", "web", "uid-1")


def web() -> Pod:
    """An app (8080/TCP, 53/UDP), a sidecar (9090) and an init container (7000)."""
    spec: dict[str, Any] = {
        "initContainers": [
            {"name": "setup", "ports": [{"containerPort": 7000}]},
            {"name": "proxy", "restartPolicy": "Always", "ports": [{"containerPort": 9090}]},
        ],
        "containers": [
            {
                "name": "app",
                "ports": [
                    {"name": "http", "containerPort": 8080},
                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                ],
            },
            {"name": "quiet"},
        ],
        "ephemeralContainers": [{"name": "debug"}],
    }
    meta = {"name": "web", "namespace": "default", "uid": "uid-1"}
    return as_pod({"metadata": meta, "spec": spec, "status": {"podIP": "10.0.0.5"}})


def state(**kw: Any) -> WorkloadState:
    return WorkloadState(ref=REF, backend_id="job", pod_ip="10.0.0.5", host_ip="10.0.0.9", **kw)


def test_every_containers_declared_ports_count() -> None:
    assert declared_ports(web()) == {7000, 9090, 8080, 53}
    assert declared_ports(as_pod({"spec": {}})) == frozenset()


@pytest.mark.parametrize("port", [8080, 53, 9090, 7000, 4646, 8500, 22, 65535])
def test_own_network_namespace_forwards_any_port(port: int) -> None:
    """Nomad bridge / CNI, Zun: the address is the pod's own, as a kubelet's sandbox."""
    assert reach(web(), state()).refusal(port) == ""


@pytest.mark.parametrize("port", [8080, 53, 9090, 7000, 31000])
def test_host_network_forwards_the_declared_and_reserved_ports(port: int) -> None:
    assert reach(web(), state(host_network=True, host_ports=(31000,))).refusal(port) == ""


@pytest.mark.parametrize("port", [4646, 8500, 22, 8081])
def test_host_network_refuses_every_other_port_of_the_host(port: int) -> None:
    got = reach(web(), state(host_network=True, host_ports=(31000,))).refusal(port)
    assert got == (
        f"port {port} is not declared by the pod (host network: its address is its host's, "
        "and port-forward reaches only its declared containerPorts and the ports reserved "
        "for it: 53, 7000, 8080, 9090, 31000)"
    )


def test_a_pod_address_equal_to_its_host_address_is_host_network_whatever_the_backend_says() -> (
    None
):
    same = WorkloadState(ref=REF, backend_id="job", pod_ip="10.0.0.5", host_ip="10.0.0.5")
    assert not same.host_network
    assert reach(web(), same).refusal(8080) == ""
    assert (
        reach(web(), same)
        .refusal(4646)
        .startswith("port 4646 is not declared by the pod (host network:")
    )


def test_a_host_network_pod_without_ports_gets_none() -> None:
    bare = as_pod({"spec": {"containers": [{"name": "app"}]}, "status": {"podIP": "10.0.0.5"}})
    assert (
        reach(bare, state(host_network=True))
        .refusal(4646)
        .endswith("the ports reserved for it: none)")
    )


NOT_KNOWN = (
    "port 4646 is not declared by the pod (its network is not known: until the backend reports "
    "the address it runs at, port-forward reaches only its declared containerPorts: "
    "53, 7000, 8080, 9090)"
)


def test_an_unknown_workload_gets_only_its_declared_ports() -> None:
    """No state yet (just after a restart): the address may be the host's."""
    r = reach(web(), None)
    assert r.refusal(8080) == ""
    assert r.refusal(4646) == NOT_KNOWN


@pytest.mark.parametrize("reported", ["", "10.0.0.6"])
def test_a_state_for_another_address_is_no_state(reported: str) -> None:
    """The pod's ``podIP`` (where vkgate dials) is not the address the backend reports now —
    a host-mode workload being replaced reads "no allocation, no address": what the state
    says about its network is not about ``podIP``."""
    moved = WorkloadState(ref=REF, backend_id="job", pod_ip=reported)
    r = reach(web(), moved)
    assert r.refusal(8080) == ""
    assert r.refusal(4646) == NOT_KNOWN
