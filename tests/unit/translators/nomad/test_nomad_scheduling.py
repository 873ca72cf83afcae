"""Scheduling intent → Nomad constraints, affinities, priority (translators/nomad/scheduling.py)."""

from __future__ import annotations

from typing import Any

import pytest

from translators.base import ResolvedContainer, ResolvedPod, UnsupportedError
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import backend_info, selector_target
from translators.nomad.scheduling import (
    META_NOT_FORWARDED,
    node_affinity,
    nomad_priority,
    not_forwarded,
)

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}
        }
    }


def test_each_operator_becomes_its_nomad_operand() -> None:
    spec = required(
        [
            expr("kubernetes.io/arch", "In", "amd64"),
            expr("topology.kubernetes.io/zone", "In", "dc1", "dc2"),
            expr("meta.nomad.vkgate.io/rack", "NotIn", "r1", "r2"),
            expr("meta.nomad.vkgate.io/gpu", "Exists"),
            expr("meta.nomad.vkgate.io/spot", "DoesNotExist"),
            expr("attr.nomad.vkgate.io/cpu.numcores", "Gt", "3"),
            expr("attr.nomad.vkgate.io/memory.totalbytes", "Lt", "9000000000"),
        ]
    )
    constraints, affinities = node_affinity(spec, selector_target)
    assert affinities == []
    assert constraints == [
        {"LTarget": "${attr.cpu.arch}", "RTarget": "amd64", "Operand": "="},
        {"LTarget": "${node.datacenter}", "RTarget": "dc1,dc2", "Operand": "set_contains_any"},
        {"LTarget": "${meta.rack}", "RTarget": "r1", "Operand": "!="},
        {"LTarget": "${meta.rack}", "RTarget": "r2", "Operand": "!="},
        {"LTarget": "${meta.gpu}", "RTarget": "", "Operand": "is_set"},
        {"LTarget": "${meta.spot}", "RTarget": "", "Operand": "is_not_set"},
        {"LTarget": "${attr.cpu.numcores}", "RTarget": "3", "Operand": ">"},
        {"LTarget": "${attr.memory.totalbytes}", "RTarget": "9000000000", "Operand": "<"},
    ]


def test_keys_outside_the_map_are_not_forwarded_even_in_several_terms() -> None:
    spec = required([expr("type", "In", "virtual-kubelet")], [expr("team", "Exists")])
    assert node_affinity(spec, selector_target) == ([], [])


def test_several_terms_naming_nomad_attributes_are_refused() -> None:
    spec = required([expr("kubernetes.io/arch", "In", "amd64")], [expr("type", "Exists")])
    with pytest.raises(UnsupportedError) as err:
        node_affinity(spec, selector_target)
    assert err.value.field == f"spec.affinity.nodeAffinity.{REQ}.nodeSelectorTerms"
    assert err.value.reason == "UnsupportedPodFeature"
    assert "cannot express the OR" in str(err.value)


def test_an_operator_without_values_is_refused_naming_the_expression() -> None:
    with pytest.raises(UnsupportedError) as err:
        node_affinity(required([expr("kubernetes.io/os", "Gt")]), selector_target)
    assert err.value.field.endswith("nodeSelectorTerms[0].matchExpressions[0]")


def test_preferred_terms_become_affinities_with_their_weight() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                PREF: [
                    {
                        "weight": 80,
                        "preference": {
                            "matchExpressions": [
                                expr("meta.nomad.vkgate.io/rack", "In", "r1"),
                                expr("type", "In", "x"),
                            ]
                        },
                    },
                    {
                        "weight": 5,
                        "preference": {
                            "matchExpressions": [
                                expr("kubernetes.io/arch", "NotIn", "arm64"),
                            ]
                        },
                    },
                ]
            }
        }
    }
    assert node_affinity(spec, selector_target) == (
        [],
        [
            {"LTarget": "${meta.rack}", "RTarget": "r1", "Operand": "=", "Weight": 80},
            {"LTarget": "${attr.cpu.arch}", "RTarget": "arm64", "Operand": "!=", "Weight": 5},
        ],
    )


def test_pod_affinity_is_refused() -> None:
    spec = {"affinity": {"podAffinity": {PREF: [{"weight": 1}]}}}
    with pytest.raises(UnsupportedError) as err:
        not_forwarded(spec)
    assert err.value.field == f"spec.affinity.podAffinity.{PREF}"


def test_spread_do_not_schedule_is_refused_schedule_anyway_listed() -> None:
    with pytest.raises(UnsupportedError) as err:
        not_forwarded({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "h"}]})
    assert err.value.field == "spec.topologySpreadConstraints[0]"
    spec = {
        "affinity": {"podAntiAffinity": {REQ: [{"topologyKey": "kubernetes.io/hostname"}]}},
        "topologySpreadConstraints": [{"whenUnsatisfiable": "ScheduleAnyway"}],
    }
    assert not_forwarded(spec) == [
        f"spec.affinity.podAntiAffinity.{REQ}",
        "spec.topologySpreadConstraints[0]",
    ]


@pytest.mark.parametrize(
    ("priority", "nomad"),
    [
        (None, 50),
        (0, 50),
        (1, 51),
        (1000, 67),
        (1_000_000, 84),
        (1_000_000_000, 100),
        (2_000_001_000, 100),
        (-1, 49),
        (-1000, 33),
        (-(2**31), 1),
    ],
)
def test_priority_is_log_scaled_between_default_and_the_limits(
    priority: int | None, nomad: int
) -> None:
    assert nomad_priority(priority, default=50, maximum=100) == nomad


def test_priority_without_room_above_the_default_stays_there() -> None:
    assert nomad_priority(1_000_000, default=50, maximum=50) == 50


def pod(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> ResolvedPod:
    meta: Any = {"name": "web", "namespace": "ns", "uid": "u-1", "annotations": annotations or {}}
    raw: Any = {"metadata": meta, "spec": spec}
    return ResolvedPod(
        namespace="ns",
        name="web",
        uid="1234abcd-0000",
        node_name="vk",
        pod=raw,
        containers=(ResolvedContainer(name="app", image="busybox", command=("true",)),),
    )


def test_backend_info_carries_constraints_affinities_priority_and_meta() -> None:
    cfg = NomadConfig(priority=50, max_priority=90)
    spec: dict[str, Any] = {
        "priority": 1_000_000_000,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        **required([expr("kubernetes.io/os", "In", "linux"), expr("kubernetes.io/arch", "Exists")]),
        "topologySpreadConstraints": [{"whenUnsatisfiable": "ScheduleAnyway"}],
    }
    spec["affinity"]["nodeAffinity"][PREF] = [
        {"weight": 10, "preference": {"matchExpressions": [expr("kubernetes.io/arch", "In", "x")]}}
    ]
    info = backend_info(pod(spec), cfg=cfg, factor=1000.0)
    assert info["priority"] == 90
    assert info["constraints"] == [
        {"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="},
        {"LTarget": "${attr.cpu.arch}", "RTarget": "", "Operand": "is_set"},
    ]
    assert info["affinities"] == [
        {"LTarget": "${attr.cpu.arch}", "RTarget": "x", "Operand": "=", "Weight": 10}
    ]
    assert info["meta"][META_NOT_FORWARDED] == "spec.topologySpreadConstraints[0]"
    # the annotation wins over spec.priority
    info = backend_info(pod(spec, {"vkgate.io/nomad-priority": "60"}), cfg=cfg, factor=1000.0)
    assert info["priority"] == 60
    plain = backend_info(pod({}), cfg=cfg, factor=1000.0)
    assert (plain["priority"], plain["affinities"]) == (50, [])
    assert META_NOT_FORWARDED not in plain["meta"]
