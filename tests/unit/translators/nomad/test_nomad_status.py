"""Allocation → WorkloadState rules beyond the golden files: time parsing, exit codes from
signals, tasks that never ran, placement text, reschedule counting."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import pytest

from translators.base import Phase, PodRef
from translators.nomad.placements import placement_from, placement_text
from translators.nomad.status import (
    JobView,
    container_state,
    host_ports,
    needs_address,
    parse_time,
    pod_ip,
    workload_state,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "2026-11-22T09:13:19.000075228Z",
            _dt.datetime(2026, 11, 22, 9, 13, 19, 75, tzinfo=_dt.UTC),
        ),
        ("2026-11-22T09:13:19Z", _dt.datetime(2026, 11, 22, 9, 13, 19, tzinfo=_dt.UTC)),
        (
            "2026-11-22T10:13:19.5+01:00",
            _dt.datetime(2026, 11, 22, 9, 13, 19, 500000, tzinfo=_dt.UTC),
        ),
        ("0001-01-01T00:00:00Z", None),
        (None, None),
        ("", None),
        (1795338799000000000, _dt.datetime.fromtimestamp(1795338799, _dt.UTC)),
    ],
)
def test_parse_time(value: Any, expected: _dt.datetime | None) -> None:
    assert parse_time(value) == expected


def dead(details: dict[str, str], *, failed: bool) -> dict[str, Any]:
    return {
        "State": "dead",
        "Failed": failed,
        "StartedAt": "2026-11-22T09:00:00Z",
        "FinishedAt": "2026-11-22T09:00:05Z",
        "Events": [
            {"Type": "Started", "Time": 1},
            {"Type": "Terminated", "Time": 2, "Details": details},
        ],
    }


@pytest.mark.parametrize(
    ("details", "failed", "code", "reason"),
    [
        ({"exit_code": "0"}, False, 0, "Completed"),
        ({"exit_code": "3"}, True, 3, "Error"),
        ({"exit_code": "0", "signal": "15"}, False, 143, "Error"),
        ({"exit_code": "137", "signal": "9", "oom_killed": "true"}, True, 137, "OOMKilled"),
    ],
)
def test_terminated_exit_codes(
    details: dict[str, str], failed: bool, code: int, reason: str
) -> None:
    cs = container_state("app", dead(details, failed=failed), alloc_id="a1")
    assert (cs.state, cs.exit_code, cs.reason) == ("terminated", code, reason)
    assert cs.container_id == "nomad://a1/app"
    assert cs.finished_at == _dt.datetime(2026, 11, 22, 9, 0, 5, tzinfo=_dt.UTC)


def test_a_task_that_never_ran_and_failed_cannot_run() -> None:
    ts = {
        "State": "dead",
        "Failed": True,
        "StartedAt": None,
        "Events": [{"Type": "Driver Failure", "Details": {"driver_error": "exec format error"}}],
    }
    cs = container_state("app", ts, alloc_id="a")
    # never started: the kubelet's StartError with containerd's 128, not a process exit code
    assert (cs.reason, cs.exit_code, cs.message) == (
        "StartError",
        128,
        "Driver Failure: exec format error",
    )


def test_a_task_stopped_before_it_ran_is_completed() -> None:
    cs = container_state("app", {"State": "dead", "Failed": False, "Events": []}, alloc_id="a")
    assert (cs.state, cs.exit_code, cs.reason) == ("terminated", 0, "Completed")


def test_no_task_state_yet_is_creating() -> None:
    assert container_state("app", None, alloc_id="").reason == "ContainerCreating"
    assert container_state("app", None, alloc_id="", initializing=True).reason == "PodInitializing"


def test_placement_text_reads_like_nomad_job_status() -> None:
    ev = {
        "FailedTGAllocs": {
            "pod": {
                "NodesEvaluated": 3,
                "NodesAvailable": {"dc1": 3, "dc9": 0},
                "ConstraintFiltered": {"${attr.cpu.arch} = arm64": 2},
                "NodesExhausted": 1,
                "DimensionExhausted": {"memory": 1},
            }
        }
    }
    assert placement_text(ev) == (
        'No nodes are available in datacenter "dc9"; '
        'Constraint "${attr.cpu.arch} = arm64": 2 nodes excluded by filter; '
        "Resources exhausted on 1 nodes; "
        'Dimension "memory" exhausted on 1 nodes'
    )
    assert placement_text({"FailedTGAllocs": {"pod": {"NodesEvaluated": 0}}}) == (
        "No nodes were eligible for evaluation"
    )
    assert placement_from([{"CreateIndex": 5}, {"CreateIndex": 4, **ev}]).startswith("No nodes")


def view(**kw: Any) -> JobView:
    return JobView(
        job_id="j",
        namespace="default",
        region="",
        ref=PodRef("ns", "p", "u"),
        node="vk",
        containers=("app",),
        **kw,
    )


def test_unschedulable_only_while_not_placed_and_not_stopped() -> None:
    v = view(placement="Resources exhausted on 1 nodes")
    st = workload_state(v)
    assert (st.phase, st.reason, st.placed) == (Phase.PENDING, "Unschedulable", False)
    assert "Resources exhausted" in st.message
    v.stop = True
    assert workload_state(v).reason == ""


def test_pending_allocation_whose_task_ran_before_is_running() -> None:
    v = view()
    v.allocs["a"] = {
        "ID": "a",
        "CreateIndex": 1,
        "ClientStatus": "pending",
        "TaskStates": {
            "app": {
                "State": "pending",
                "Restarts": 1,
                "StartedAt": "2026-11-22T09:00:00Z",
                "Events": [{"Type": "Restarting"}],
            }
        },
    }
    st = workload_state(v)
    assert st.phase == Phase.RUNNING
    # one run so far: Nomad counted the restart it scheduled, the kubelet counts it once made
    assert st.containers[0].reason == "CrashLoopBackOff" and st.containers[0].restart_count == 0
    v.allocs["a"]["TaskStates"]["app"].update(
        State="running", Events=[{"Type": "Restarting"}, {"Type": "Started"}]
    )
    assert workload_state(v).containers[0].restart_count == 1


def test_unknown_client_status_is_unknown() -> None:
    v = view()
    v.allocs["a"] = {"ID": "a", "ClientStatus": "something-new", "TaskStates": {}}
    assert workload_state(v).phase == Phase.UNKNOWN


def test_host_and_pod_ip_name_the_client_of_the_newest_allocation() -> None:
    """Two clients: the pod's addresses follow its allocation, also when Nomad replaced it on
    the other client."""
    ips = {"c1": "198.51.100.21", "c2": "198.51.100.22"}
    v = view()
    v.allocs["a"] = {"ID": "a", "CreateIndex": 1, "NodeID": "c1", "ClientStatus": "running"}
    st = workload_state(v, node_ips=ips)
    assert (st.host_ip, st.pod_ip) == ("198.51.100.21", "198.51.100.21")
    v.allocs["b"] = {"ID": "b", "CreateIndex": 2, "NodeID": "c2", "ClientStatus": "running"}
    st = workload_state(v, node_ips=ips)
    assert (st.host_ip, st.pod_ip) == ("198.51.100.22", "198.51.100.22")
    assert workload_state(v).host_ip == ""  # client unknown: the gateway decides


@pytest.mark.parametrize(
    ("alloc", "expected"),
    [
        ({}, "198.51.100.21"),
        ({"AllocatedResources": {"Shared": {"Networks": [{"IP": "10.1.0.5"}]}}}, "10.1.0.5"),
        (
            {
                "AllocatedResources": {
                    "Shared": {"Ports": [{"Label": "http", "HostIP": "10.1.0.6"}]}
                }
            },
            "10.1.0.6",
        ),
        ({"NetworkStatus": {"InterfaceName": "eth0", "Address": "172.26.64.9"}}, "172.26.64.9"),
    ],
)
def test_pod_ip_is_the_allocations_own_address_else_its_clients(
    alloc: dict[str, Any], expected: str
) -> None:
    assert pod_ip(alloc, "198.51.100.21") == expected


def test_a_bridge_job_has_its_allocations_address_and_none_before_it_is_known() -> None:
    """Bridge / CNI (``Meta["vkgate.network"]``): the client's address is where the pod's
    container ports do not answer, so the pod has no address until ``NetworkStatus`` names
    the allocation's; host jobs (no such key, like every job before it) keep the client's."""
    job = {"ID": "j", "Meta": {"k8s.name": "web", "vkgate.network": "bridge"}}
    v = JobView.from_job(job)
    assert v.network_mode == "bridge" and v.own_address
    stub = {"ID": "a", "NodeID": "c1", "ClientStatus": "running"}
    stub["AllocatedResources"] = {"Shared": {"Ports": [{"Label": "p", "HostIP": "198.51.100.21"}]}}
    v.allocs["a"] = dict(stub)
    ips = {"c1": "198.51.100.21"}
    st = workload_state(v, node_ips=ips)
    assert (st.host_ip, st.pod_ip) == ("198.51.100.21", "")
    assert needs_address(v) is v.allocs["a"]
    v.allocs["a"]["NetworkStatus"] = {"InterfaceName": "eth0", "Address": "203.0.113.7"}
    st = workload_state(v, node_ips=ips)
    assert (st.host_ip, st.pod_ip) == ("198.51.100.21", "203.0.113.7")
    assert needs_address(v) is None
    host = JobView.from_job({"ID": "h", "Meta": {"k8s.name": "web"}})
    host.allocs["a"] = dict(stub)
    assert host.network_mode == "host" and needs_address(host) is None
    assert workload_state(host, node_ips=ips).pod_ip == "198.51.100.21"


#: A host-mode allocation of a pod declaring 8080, with a dynamic port a template added
#: (``Shared.Ports``) and the group network's view of the same (``Shared.Networks``), as list
#: stubs carry them.
HOST_ALLOC = {
    "ID": "a",
    "NodeID": "c1",
    "ClientStatus": "running",
    "AllocatedResources": {
        "Shared": {
            "Ports": [
                {"Label": "http", "Value": 8080, "To": 8080, "HostIP": "198.51.100.21"},
                {"Label": "metrics", "Value": 23456, "To": 0, "HostIP": "198.51.100.21"},
            ],
            "Networks": [
                {
                    "Mode": "host",
                    "IP": "198.51.100.21",
                    "ReservedPorts": [{"Label": "http", "Value": 8080, "To": 8080}],
                    "DynamicPorts": [{"Label": "metrics", "Value": 23456}, {"Label": "x"}],
                }
            ],
        }
    },
}


def test_a_host_mode_pod_is_on_its_clients_network_with_its_reserved_ports() -> None:
    """Host networking: the pod's address is the client's, so the state says so and names
    the ports Nomad reserved for the allocation — port-forward reaches no other
    (docs/design/nomad.md, "Pod networking")."""
    assert host_ports(HOST_ALLOC) == (8080, 23456)
    v = JobView.from_job({"ID": "h", "Meta": {"k8s.name": "web"}})
    v.allocs["a"] = dict(HOST_ALLOC)
    st = workload_state(v, node_ips={"c1": "198.51.100.21"})
    assert st.pod_ip == "198.51.100.21"
    assert st.host_network and st.host_ports == (8080, 23456)
    # a pod without ports: on the client's network all the same, nothing reserved
    bare = JobView.from_job({"ID": "b", "Meta": {}})
    bare.allocs["a"] = {"ID": "a", "NodeID": "c1", "ClientStatus": "running"}
    st = workload_state(bare, node_ips={"c1": "198.51.100.21"})
    assert st.host_network and st.host_ports == ()


@pytest.mark.parametrize("mode", ["bridge", "cni/vknet"])
def test_a_bridge_or_cni_pod_has_a_network_namespace_of_its_own(mode: str) -> None:
    v = JobView.from_job({"ID": "j", "Meta": {"vkgate.network": mode}})
    v.allocs["a"] = {**HOST_ALLOC, "NetworkStatus": {"Address": "203.0.113.7"}}
    st = workload_state(v, node_ips={"c1": "198.51.100.21"})
    assert (st.pod_ip, st.host_network, st.host_ports) == ("203.0.113.7", False, ())
    v.allocs["a"] = dict(HOST_ALLOC)  # its address not known yet: no address, no ports
    st = workload_state(v, node_ips={"c1": "198.51.100.21"})
    assert (st.pod_ip, st.host_network) == ("", False)


def test_an_allocation_with_its_own_address_is_not_on_the_host_whatever_meta_says() -> None:
    v = JobView.from_job({"ID": "h", "Meta": {}})  # host by Meta
    v.allocs["a"] = {**HOST_ALLOC, "NetworkStatus": {"Address": "203.0.113.7"}}
    st = workload_state(v, node_ips={"c1": "198.51.100.21"})
    assert (st.pod_ip, st.host_network) == ("203.0.113.7", False)


def test_no_allocation_yet_is_no_address_and_no_ports() -> None:
    st = workload_state(view())
    assert (st.pod_ip, st.host_network, st.host_ports) == ("", False, ())


@pytest.mark.parametrize("client_status", ["pending", "complete", "failed", "lost"])
def test_only_a_running_allocation_is_fetched_for_its_address(client_status: str) -> None:
    v = JobView.from_job({"ID": "j", "Meta": {"vkgate.network": "cni/vknet"}})
    v.allocs["a"] = {"ID": "a", "ClientStatus": client_status}
    assert needs_address(v) is None
