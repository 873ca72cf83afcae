"""Kubernetes namespace → Nomad namespace (``namespace_from_pod``, ``namespace_map``), its
allow-list, its precedence over the ``vkgate.io/nomad-namespace`` annotation, and the node pool
and node class a node pins its jobs to."""

from __future__ import annotations

import re
from typing import Any

import pytest

from translators.base import ResolvedContainer, ResolvedPod, TranslationError
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import render_job
from translators.nomad.overrides import mapped_namespace, overrides
from translators.render.engine import Renderer
from vkgate_core.settings import SettingsError

ANNOTATION = "vkgate.io/nomad-namespace"


def cfg(**table: Any) -> NomadConfig:
    return NomadConfig.from_settings(table, environ={})


def pod(namespace: str, annotations: dict[str, str] | None = None, **spec: Any) -> ResolvedPod:
    raw: Any = {
        "metadata": {"name": "web", "namespace": namespace, "annotations": annotations or {}},
        "spec": spec,
    }
    return ResolvedPod(
        namespace=namespace,
        name="web",
        uid="1234abcd-0000",
        node_name="vk",
        pod=raw,
        containers=(ResolvedContainer(name="app", image="busybox", command=("true",)),),
    )


def job(p: ResolvedPod, c: NomadConfig) -> dict[str, Any]:
    out: dict[str, Any] = render_job(p, renderer=Renderer(), cfg=c, settings={}, factor=1000)
    return dict(out["Job"])


# -- settings ------------------------------------------------------------------------------


def test_mapping_is_off_by_default() -> None:
    c = cfg(namespaces=["team-a"])
    assert c.namespace_from_pod == "" and dict(c.namespace_map) == {}
    assert mapped_namespace("team-a", c) is None
    assert job(pod("team-a"), c)["Namespace"] == "default"


@pytest.mark.parametrize(
    ("table", "key", "text"),
    [
        ({"namespace_from_pod": "mirror"}, "namespace_from_pod", 'expected "", "same" or "table"'),
        (
            {"namespace_map": {"a": "b"}},
            "namespace_map",
            'only read with namespace_from_pod = "table"',
        ),
        (
            {"namespace_from_pod": "table", "namespace_map": {"a": "ops"}, "namespaces": ["b"]},
            "namespace_map",
            "Nomad namespaces 'ops' are not allowed (allowed: default, b; add them to "
            "backend.nomad.namespaces)",
        ),
        ({"namespace_from_pod": "table", "namespace_map": ["a"]}, "namespace_map", "a table"),
        ({"namespace_from_pod": "table", "namespace_map": "a=b,c"}, "namespace_map", "k8s-ns="),
    ],
)
def test_bad_mapping_settings_name_the_key(table: dict[str, Any], key: str, text: str) -> None:
    with pytest.raises(SettingsError) as err:
        cfg(**table)
    assert err.value.key == f"backend.nomad.{key}"
    assert text in str(err.value)


def test_the_map_also_reads_the_environment_variable_form() -> None:
    c = cfg(
        namespace_from_pod="table",
        namespace_map=" ml = ml-jobs , web=default",
        namespaces=["ml-jobs"],
    )
    assert dict(c.namespace_map) == {"ml": "ml-jobs", "web": "default"}


# -- "same" --------------------------------------------------------------------------------


def test_same_puts_the_job_into_the_pods_namespace_when_it_is_allowed() -> None:
    c = cfg(namespace_from_pod="same", namespaces=["team-a", "team-b"])
    assert job(pod("team-a"), c)["Namespace"] == "team-a"
    assert job(pod("team-b"), c)["Namespace"] == "team-b"


def test_same_refuses_a_pod_whose_namespace_is_not_allowed() -> None:
    c = cfg(namespace_from_pod="same", namespaces=["team-a"])
    with pytest.raises(TranslationError) as err:
        job(pod("team-z"), c)
    assert err.value.field == "metadata.namespace"
    assert str(err.value).startswith(
        "Nomad namespace 'team-z' (from the pod's namespace 'team-z', "
        "backend.nomad.namespace_from_pod = 'same') is not allowed (allowed: default, team-a; "
        "add it to backend.nomad.namespaces)"
    )


# -- "table" -------------------------------------------------------------------------------


def test_table_maps_listed_namespaces_and_leaves_the_rest_on_namespace() -> None:
    c = cfg(
        namespace="k8s",
        namespace_from_pod="table",
        namespace_map={"ml": "ml-jobs", "web": "k8s"},
        namespaces=["ml-jobs"],
    )
    assert job(pod("ml"), c)["Namespace"] == "ml-jobs"
    assert job(pod("web"), c)["Namespace"] == "k8s"
    assert job(pod("other"), c)["Namespace"] == "k8s"


# -- the annotation ------------------------------------------------------------------------


def test_a_mapped_pod_cannot_pick_another_namespace_by_annotation() -> None:
    c = cfg(namespace_from_pod="same", namespaces=["team-a", "team-b"])
    with pytest.raises(TranslationError) as err:
        overrides({ANNOTATION: "team-b"}, c, pod_namespace="team-a")
    assert err.value.field == f"metadata.annotations[{ANNOTATION}]"
    assert re.search(
        r"maps to 'team-a' \(backend\.nomad\.namespace_from_pod = 'same'\)", str(err.value)
    )
    # repeating the mapped namespace is fine
    assert overrides({ANNOTATION: "team-a"}, c, pod_namespace="team-a")["namespace"] == "team-a"


def test_an_unmapped_pod_keeps_the_annotation_rules() -> None:
    c = cfg(
        namespace_from_pod="table", namespace_map={"ml": "ml-jobs"}, namespaces=["ml-jobs", "batch"]
    )
    assert overrides({ANNOTATION: "batch"}, c, pod_namespace="web")["namespace"] == "batch"
    with pytest.raises(TranslationError, match=re.escape("add it to backend.nomad.namespaces")):
        overrides({ANNOTATION: "ops"}, c, pod_namespace="web")
    with pytest.raises(TranslationError, match="maps to 'ml-jobs'"):
        overrides({ANNOTATION: "batch"}, c, pod_namespace="ml")


# -- node pool and node class --------------------------------------------------------------


def test_a_node_pool_node_registers_its_jobs_in_that_pool() -> None:
    assert job(pod("ns"), cfg(node_pool="pool-b"))["NodePool"] == "pool-b"
    assert "NodePool" not in job(pod("ns"), cfg())  # Nomad's default pool
    c = cfg(node_pool="pool-b", node_pools=["pool-c"])
    assert job(pod("ns", {"vkgate.io/nomad-node-pool": "pool-c"}), c)["NodePool"] == "pool-c"


def test_a_node_class_node_pins_every_job_to_that_class() -> None:
    c = cfg(node_class="class-b")
    assert job(pod("ns"), c)["Constraints"] == [
        {"LTarget": "${node.class}", "RTarget": "class-b", "Operand": "="}
    ]
    # the same class through the nodeSelector is not repeated; another one cannot lift the pin
    same = job(pod("ns", nodeSelector={"node.kubernetes.io/instance-type": "class-b"}), c)
    assert same["Constraints"] == [
        {"LTarget": "${node.class}", "RTarget": "class-b", "Operand": "="}
    ]
    other = job(pod("ns", nodeSelector={"node.kubernetes.io/instance-type": "class-a"}), c)
    assert [x["RTarget"] for x in other["Constraints"]] == ["class-b", "class-a"]
    assert job(pod("ns"), cfg())["Constraints"] == []
