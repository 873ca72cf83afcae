"""Pure Node builders: condition times, label/taint patches that keep others' data."""

from __future__ import annotations

import pytest

from gateway.node import conditions as cond
from gateway.node import spec
from translators.base import Capacity, NodeInfo

OURS = {"key": "virtual-kubelet.io/provider", "value": "nomad", "effect": "NoSchedule"}


def test_transition_time_unchanged_when_status_same_even_if_reason_changes():
    current = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "lastTransitionTime": "T0",
        }
    ]
    wanted = cond.desired_conditions(
        ready=False, backend_kind="nomad", not_ready_reason="BackendUnreachable"
    )
    out = {c["type"]: c for c in cond.with_times(wanted, current, "T1")}
    assert out["Ready"]["lastTransitionTime"] == "T0"
    assert out["Ready"]["lastHeartbeatTime"] == "T1"
    assert out["MemoryPressure"]["lastTransitionTime"] == "T1"  # new condition


def test_transition_time_moves_on_flip():
    current = [{"type": "Ready", "status": "True", "lastTransitionTime": "T0"}]
    wanted = cond.desired_conditions(ready=False, backend_kind="nomad")
    out = cond.with_times(wanted, current, "T1")
    assert out[0]["lastTransitionTime"] == "T1"


def test_differs_ignores_times_only():
    wanted = cond.desired_conditions(ready=True, backend_kind="nomad")
    current = cond.with_times(wanted, [], "T0")
    assert not cond.differs(wanted, current)
    assert cond.differs(cond.desired_conditions(ready=False, backend_kind="nomad"), current)
    assert cond.differs(wanted, current[1:])  # Ready missing on the server


def test_metadata_patch_only_touches_our_labels():
    node = {
        "metadata": {"resourceVersion": "7", "labels": {"type": "virtual-kubelet", "x": "y"}},
        "spec": {"taints": [OURS]},
    }
    patch = spec.metadata_patch(node, {"type": "virtual-kubelet", "team": "ml"}, OURS)
    assert patch == {"metadata": {"labels": {"team": "ml"}}}


def test_metadata_patch_adds_our_taint_keeping_others_with_precondition():
    other = {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}
    node = {"metadata": {"resourceVersion": "7", "labels": {}}, "spec": {"taints": [other]}}
    patch = spec.metadata_patch(node, {}, OURS)
    assert patch == {"metadata": {"resourceVersion": "7"}, "spec": {"taints": [other, OURS]}}


def test_metadata_patch_updates_our_taint_value_in_place():
    stale = {**OURS, "value": "old", "timeAdded": "2026-01-01T00:00:00Z"}
    node = {"metadata": {"resourceVersion": "7"}, "spec": {"taints": [stale]}}
    patch = spec.metadata_patch(node, {}, OURS)
    assert patch is not None
    assert patch["spec"]["taints"] == [{**stale, "value": "nomad"}]


def test_disabled_taint_removes_only_ours():
    other = {"key": "virtual-kubelet.io/provider", "value": "admin", "effect": "NoSchedule"}
    node = {"metadata": {"resourceVersion": "7"}, "spec": {"taints": [OURS, other]}}
    patch = spec.metadata_patch(node, {}, None, remove=OURS)
    assert patch is not None and patch["spec"]["taints"] == [other]


@pytest.mark.parametrize(
    ("cap", "overrides", "expected"),
    [
        (
            Capacity(cpu_millis=1500, memory_bytes=2**20 * 3, pods=5),
            {},
            {"cpu": "1500m", "memory": "3Mi", "pods": "5"},
        ),
        (
            Capacity(
                cpu_millis=2000,
                memory_bytes=1000,
                pods=5,
                ephemeral_storage_bytes=2**30,
                extended={"nvidia.com/gpu": 1},
            ),
            {"pods": "7"},
            {
                "cpu": "2",
                "memory": "1000",
                "pods": "7",
                "ephemeral-storage": "1Gi",
                "nvidia.com/gpu": "1",
            },
        ),
        (None, {"cpu": "4"}, {"cpu": "4"}),
    ],
)
def test_capacity_map(cap, overrides, expected):
    assert spec.capacity_map(cap, overrides) == expected


def test_status_patch_removes_withdrawn_resources_with_null():
    facts = spec.NodeFacts(
        name="n",
        backend_kind="nomad",
        kubelet_port=10250,
        internal_ip="",
        hostname="",
        info=NodeInfo(),
        boot_id="b",
        capacity={"cpu": "1"},
    )
    desired = facts.status()
    patch = spec.status_patch(desired, [], ["nvidia.com/gpu"])
    assert patch["status"]["capacity"] == {"nvidia.com/gpu": None, "cpu": "1"}
    assert desired["addresses"][0] == {"type": "InternalIP", "address": "127.0.0.1"}
    assert desired["addresses"][1] == {"type": "Hostname", "address": "n"}
    current = {**desired, "capacity": {"cpu": "1", "nvidia.com/gpu": "2"}}
    assert spec.status_differs(desired, current, ["nvidia.com/gpu"])
    assert not spec.status_differs(
        desired, {**desired, "capacity": {"cpu": "1", "other": "3"}, "allocatable": {"cpu": "1"}}
    )


def test_node_labels_exclude_the_node_from_load_balancers_unless_turned_off():
    info = NodeInfo()
    labels = spec.node_labels("vk", "nomad", info, {})
    assert labels[spec.EXCLUDE_FROM_LB] == "true"
    assert spec.EXCLUDE_FROM_LB == "node.kubernetes.io/exclude-from-external-load-balancers"
    off = spec.node_labels("vk", "nomad", info, {}, exclude_from_load_balancers=False)
    assert spec.EXCLUDE_FROM_LB not in off
    # a configured value wins, like any other label
    mine = spec.node_labels("vk", "nomad", info, {spec.EXCLUDE_FROM_LB: "yes"})
    assert mine[spec.EXCLUDE_FROM_LB] == "yes"
