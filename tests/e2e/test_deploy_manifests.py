"""deploy/ applies to the real API server: the Kustomize base on a cluster that has never seen
vkgate (first try, no ordering errors), then every overlay and the Nomad TLS components with
``--dry-run=server`` and for real, then the Helm chart with one node and with several, its
Nomad Secret and ACL policy ConfigMap (deploy/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import make_kubectl, unavailable

from devstack.controlplane import launch_control_plane
from devstack.process import BinaryUnavailable

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


@pytest.fixture(scope="module")
def kubectl(kubectl_path: Path) -> Any:
    """A cluster of its own, fresh: the first apply must work on a cluster that never saw
    vkgate (other modules apply deploy/common to the shared one)."""
    try:
        cp = launch_control_plane()
    except BinaryUnavailable as exc:
        unavailable(str(exc).splitlines()[0])
    try:
        yield make_kubectl(cp, kubectl_path)
    finally:
        cp.stop()


def test_base_then_every_overlay_applies(kubectl: Any, tmp_path: Path) -> None:
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
        if overlay == "overlays/single-node":  # the CA of the Secret vkgate-nomad, mounted
            spec = _deployments(kubectl)["vkgate"]["spec"]["template"]["spec"]
            tls = next(v for v in spec["volumes"] if v["name"] == "nomad-tls")
            assert tls["secret"]["secretName"] == "vkgate-nomad"
            env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
            assert env["NOMAD_CACERT"] == "/etc/vkgate/nomad-tls/ca.pem"

    # the mutual-TLS component (the single-node overlay carries the CA-only one)
    mtls = tmp_path / "mtls"
    mtls.mkdir()
    (mtls / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(DEPLOY / "base", mtls)],
                "components": [os.path.relpath(DEPLOY / "components" / "nomad-mtls", mtls)],
            }
        )
    )
    assert "(server dry run)" in kubectl("apply", "-k", str(mtls), "--dry-run=server").stdout

    optional = str(DEPLOY / "optional" / "csr-self-approve.yaml")
    assert "(server dry run)" in kubectl("apply", "-f", optional, "--dry-run=server").stdout
    kubectl("apply", "-f", optional)

    deployments = _deployments(kubectl)
    assert deployments["vkgate"]["spec"]["replicas"] == 2  # the ha overlay, applied last
    assert _env(kubectl, deployments["vkgate"])["VKGATE_HA__ENABLED"] == "true"
    for dc in ("dc1", "dc2"):
        d = deployments[f"vkgate-{dc}"]
        assert _env(kubectl, d)["VKGATE_NODE__NAME"] == f"vk-nomad-{dc}"
        assert d["spec"]["selector"]["matchLabels"]["vkgate.io/node"] == f"vk-nomad-{dc}"


@pytest.fixture(scope="module")
def helm() -> Path:
    from devstack.build import BuildError, ensure

    try:
        return ensure("helm")
    except (BuildError, OSError) as exc:
        unavailable(f"helm cannot be built: {exc}")


def test_helm_chart_lints_renders_the_same_rbac_and_applies(
    kubectl: Any, helm: Path, tmp_path: Path
) -> None:
    chart = DEPLOY / "helm" / "vkgate"
    subprocess.run([str(helm), "lint", "--strict", str(chart)], check=True, capture_output=True)
    rendered = subprocess.run(
        [
            str(helm),
            "template",
            "vkgate",
            str(chart),
            "--namespace=vkgate-helm",
            "--set=replicas=2",
            "--set=nodeName=vk-helm",
            '--set-json=templates.configMaps={"team-ml":{"nomad__job.j2":"{{ pod.name }}"}}',
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    kustomize = [d for d in yaml.safe_load_all((DEPLOY / "common" / "rbac.yaml").read_text()) if d]
    wanted = next(d for d in kustomize if d["kind"] == "ClusterRole")["rules"]
    assert by_kind[("ClusterRole", "vkgate")]["rules"] == wanted
    config = by_kind[("ConfigMap", "vkgate-config")]["data"]["vkgate.toml"]
    assert 'configmap_namespace = "vkgate-helm"' in config and "enabled = true" in config
    assert by_kind[("ConfigMap", "team-ml")]["metadata"]["labels"]["vkgate.io/templates"] == "true"
    out = tmp_path / "chart.yaml"
    out.write_text(rendered)
    kubectl("create", "namespace", "vkgate-helm")
    try:
        dry = kubectl("apply", "-f", str(out), "--dry-run=server")
        assert "(server dry run)" in dry.stdout
        kubectl("apply", "-f", str(out))
        got = json.loads(
            kubectl("get", "deployment", "-n", "vkgate-helm", "vkgate", "-o", "json").stdout
        )
        assert got["spec"]["replicas"] == 2

        # several nodes in one process, TLS files from a Secret the chart makes
        nodes = [{"name": "vk-helm-dc1"}, {"name": "vk-helm-dc2", "kubeletPort": 10300}]
        multi = subprocess.run(
            [
                str(helm),
                "template",
                "vkgate-multi",
                str(chart),
                "--namespace=vkgate-helm",
                f"--set-json=nodes={json.dumps(nodes)}",
                "--set=nomad.existingSecret=",
                "--set=nomad.token=t0ken",
                "--set=nomad.tls.enabled=true",
                "--set=nomad.tls.clientCert=true",
                "--set=nomad.tls.ca=CA",
                "--set=nomad.tls.cert=CERT",
                "--set=nomad.tls.key=KEY",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (tmp_path / "multi.yaml").write_text(multi)
        dry = kubectl("apply", "-f", str(tmp_path / "multi.yaml"), "--dry-run=server")
        assert "(server dry run)" in dry.stdout
        kubectl("apply", "-f", str(tmp_path / "multi.yaml"))
        got = json.loads(
            kubectl("get", "deployment", "-n", "vkgate-helm", "vkgate-multi", "-o", "json").stdout
        )
        ports = {
            p["name"]: p["containerPort"]
            for p in got["spec"]["template"]["spec"]["containers"][0]["ports"]
        }
        assert ports == {"kubelet-0": 10250, "kubelet-1": 10300, "metrics": 10255}
        secret = json.loads(
            kubectl("get", "secret", "-n", "vkgate-helm", "vkgate-multi-nomad", "-o", "json").stdout
        )
        assert set(secret["data"]) == {"NOMAD_TOKEN", "ca.pem", "client.pem", "client-key.pem"}
        kubectl("get", "configmap", "-n", "vkgate-helm", "vkgate-multi-nomad-policy")
    finally:
        kubectl("delete", "deployments,services", "-n", "vkgate-helm", "--all", "--wait=false")
