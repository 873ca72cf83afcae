"""securityContext admission (gateway.pods.resolve.features over translators.securitycontext): a
restriction the backend cannot enforce refuses the pod naming the field; one the node relaxes
passes with a Warning Event."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.pods.resolve import Resolver, features
from translators import securitycontext as sc
from translators.base import Features


def pod(pod_sc: Any = None, **container_sc: Any) -> Any:
    c: dict[str, Any] = {"name": "app", "image": "busybox:1.36", "command": ["sleep", "1"]}
    if container_sc:
        c["securityContext"] = container_sc
    spec: dict[str, Any] = {"containers": [c]}
    if pod_sc is not None:
        spec["securityContext"] = pod_sc
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": spec}


RESTRICTED = pod(
    {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    allowPrivilegeEscalation=False,
    readOnlyRootFilesystem=True,
    capabilities={"drop": ["ALL"]},
)


def test_every_restriction_of_a_restricted_pod_is_refused_by_a_backend_without_them() -> None:
    found = features.check_pod(RESTRICTED, Features(), backend="zun")
    assert {(u.feature, u.field) for u in found} == {
        ("runAsUser", "spec.securityContext.runAsUser"),
        ("runAsNonRoot", "spec.securityContext.runAsNonRoot"),
        ("seccompProfile", "spec.securityContext.seccompProfile"),
        (
            "allowPrivilegeEscalation",
            "spec.containers[app].securityContext.allowPrivilegeEscalation",
        ),
        ("readOnlyRootFilesystem", "spec.containers[app].securityContext.readOnlyRootFilesystem"),
        ("capabilities", "spec.containers[app].securityContext.capabilities"),
    }
    assert all(u.reason == "UnsupportedPodFeature" for u in found)
    u = next(u for u in found if u.feature == "runAsUser")
    assert u.message.startswith("spec.securityContext.runAsUser: the zun backend cannot enforce")


def test_a_backend_that_enforces_them_or_a_node_that_relaxes_them_admits_the_pod() -> None:
    assert features.check_pod(RESTRICTED, Features(security_context=sc.DOCKER), backend="n") == []
    relaxed = Features(relaxed_security_context=frozenset(sc.DOCKER))
    assert features.check_pod(RESTRICTED, relaxed, backend="n") == []
    assert [f for _, f in features.relaxed_security(RESTRICTED, relaxed)] == [
        "runAsUser",
        "runAsNonRoot",
        "readOnlyRootFilesystem",
        "capabilities",
        "allowPrivilegeEscalation",
        "seccompProfile",
    ]


@pytest.mark.parametrize(
    "container_sc",
    [
        {"runAsNonRoot": False},
        {"readOnlyRootFilesystem": False},
        {"allowPrivilegeEscalation": True},
        {"capabilities": {"add": [], "drop": []}},
        {"procMount": "Default"},
        {},
    ],
)
def test_defaults_spelled_out_are_not_restrictions(container_sc: Any) -> None:
    assert features.check_pod(pod(**container_sc), Features(), backend="zun") == []


def test_the_container_wins_over_the_pod() -> None:
    (r,) = sc.requests(
        {"securityContext": {"runAsUser": 1}}, {"name": "a", "securityContext": {"runAsUser": 2}}
    )
    assert (r.value, r.where) == (2, "spec.containers[a].securityContext.runAsUser")
    # a pod-only field in a container's securityContext is not the pod's
    assert sc.requests({}, {"name": "a", "securityContext": {"fsGroup": 1}}) == []


def test_pod_only_fields_are_refused_where_no_backend_enforces_them() -> None:
    p = pod({"fsGroup": 2000, "supplementalGroups": [1], "sysctls": [{"name": "a", "value": "1"}]})
    found = features.check_pod(p, Features(security_context=sc.DOCKER), backend="nomad")
    assert [u.field for u in found] == [
        "spec.securityContext.fsGroup",
        "spec.securityContext.supplementalGroups",
        "spec.securityContext.sysctls",
    ]


class NoRefs:
    """Lookups for a pod that references nothing: no services, no team label."""

    async def get(self, kind: Any, namespace: str, name: str) -> Any:
        raise AssertionError("the pod references nothing")

    async def services(self, namespace: str) -> list[dict[str, Any]]:
        return []

    async def team(self, namespace: str) -> str:
        return ""

    async def token(self, pod: Any, key: Any) -> str:
        raise AssertionError("the pod has no token volume")

    async def persistent_volume(self, name: str) -> Any:
        return None


async def test_the_resolver_warns_once_per_relaxed_field() -> None:
    resolver = Resolver(
        NoRefs(),
        features=Features(relaxed_security_context=frozenset({"runAsUser"})),
        backend="nomad",
        node_name="vk",
        host_ip=lambda: "127.0.0.9",
        allocatable=dict,
    )
    out = await resolver.resolve(pod({"runAsUser": 1000}, runAsUser=7))
    assert out.unsupported == [] and out.pod is not None
    (event,) = [e for e in out.events if e.reason == "SecurityContextRelaxed"]
    assert event.type == "Warning"
    assert event.message.startswith(
        "spec.containers[app].securityContext.runAsUser: securityContext.runAsUser may run"
    )
