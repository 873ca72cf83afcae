"""deploy/ applies to the real API server: the Kustomize base on a cluster that has never seen
vkgate (first try, no ordering errors), then every overlay with ``--dry-run=server`` and for
real (docs/deploy.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OVERLAYS = ["overlays/single-node", "overlays/multi-node", "overlays/ha"]


def _deployments(kubectl: Any) -> dict[str, dict]:
    out = kubectl("get", "deployments", "-n", "vkgate-system", "-o", "json").stdout
    return {d["metadata"]["name"]: d for d in json.loads(out)["items"]}


def _env(kubectl: Any, deployment: dict) -> dict[str, str]:
    spec = deployment["spec"]["template"]["spec"]["containers"][0]
    name = spec["envFrom"][0]["configMapRef"]["name"]
    cm = kubectl("get", "configmap", "-n", "vkgate-system", name, "-o", "json").stdout
    return json.loads(cm)["data"]


@pytest.fixture
def clean_deployments(kubectl: Any):
    yield
    # Workloads go; the namespace and RBAC stay (deleting a namespace needs its controller).
    kubectl("delete", "deployments,services", "-n", "vkgate-system", "--all", "--wait=false")


def test_base_then_every_overlay_applies(kubectl: Any, clean_deployments: None) -> None:
    assert kubectl("get", "namespace", "vkgate-system", check=False).returncode != 0, (
        "the cluster must not know vkgate yet: this test proves the first apply"
    )
    kubectl("apply", "-k", str(DEPLOY / "base"))
    base = _deployments(kubectl)["vkgate"]
    pod_spec = base["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert pod_spec["serviceAccountName"] == "vkgate"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    svc = json.loads(
        kubectl("get", "service", "-n", "vkgate-system", "vkgate-metrics", "-o", "json").stdout
    )
    assert svc["spec"]["ports"][0]["port"] == 10255

    for overlay in OVERLAYS:
        dry = kubectl("apply", "-k", str(DEPLOY / overlay), "--dry-run=server")
        assert "(server dry run)" in dry.stdout, dry.stdout
        kubectl("apply", "-k", str(DEPLOY / overlay))

    deployments = _deployments(kubectl)
    assert deployments["vkgate"]["spec"]["replicas"] == 2  # the ha overlay, applied last
    assert _env(kubectl, deployments["vkgate"])["VKGATE_HA__ENABLED"] == "true"
    for dc in ("dc1", "dc2"):
        d = deployments[f"vkgate-{dc}"]
        assert _env(kubectl, d)["VKGATE_NODE__NAME"] == f"vk-nomad-{dc}"
        assert d["spec"]["selector"]["matchLabels"]["vkgate.io/node"] == f"vk-nomad-{dc}"
