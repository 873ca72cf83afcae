"""The Helm chart (deploy/helm/vkgate) rendered with ``helm template``: it lints, grants exactly
the RBAC of deploy/common/rbac.yaml, and ``nodes`` renders several virtual nodes in one
process — ``[[nodes]]`` entries that vkgate's own settings loader accepts, and one kubelet port
per node on the pod (docs/design/multinode.md; deploy/README.md)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml
from deploy_render import CHART, DEPLOY, Doc, helm, helm_template, one, rendered

from gateway.config import load

NODES = [
    {
        "name": "vk-nomad-dc1",
        "labels": {"topology.kubernetes.io/zone": "dc1"},
        "settings": {"datacenters": ["dc1"]},
    },
    {
        "name": "vk-nomad-dc2",
        "labels": {"topology.kubernetes.io/zone": "dc2"},
        "settings": {"datacenters": ["dc2"], "node_pool": "batch"},
    },
    {"name": "vk-nomad-gpu", "kubeletPort": 10300},
]


def toml_of(docs: list[Doc]) -> str:
    text: str = one(docs, "ConfigMap", "vkgate-config")["data"]["vkgate.toml"]
    return text


def ports(docs: list[Doc]) -> dict[str, int]:
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def test_the_chart_lints_strictly_with_one_node_and_with_several(tmp_path: Path) -> None:
    for extra in ([], [f"--set-json=nodes={json.dumps(NODES)}"]):
        out = subprocess.run(
            [str(helm()), "lint", "--strict", str(CHART), *extra],
            capture_output=True,
            text=True,
            check=False,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_the_chart_grants_the_rbac_of_deploy_common(tmp_path: Path) -> None:
    docs = rendered(tmp_path)
    kustomize = [d for d in yaml.safe_load_all((DEPLOY / "common" / "rbac.yaml").read_text()) if d]
    for kind in ("ClusterRole", "Role"):
        wanted = sorted(json.dumps(d["rules"]) for d in kustomize if d["kind"] == kind)
        got = sorted(json.dumps(d["rules"]) for d in docs if d["kind"] == kind)
        assert got == wanted, kind


def test_one_node_is_the_node_table_and_one_kubelet_port(tmp_path: Path) -> None:
    docs = rendered(tmp_path, "--set=nodeName=vk-one")
    config = tomllib.loads(toml_of(docs))
    assert config["node"]["name"] == "vk-one" and "nodes" not in config
    assert ports(docs) == {"kubelet": 10250, "metrics": 10255}


def test_nodes_render_one_nodes_entry_and_one_kubelet_port_each(tmp_path: Path) -> None:
    docs = rendered(tmp_path, f"--set-json=nodes={json.dumps(NODES)}")
    text = toml_of(docs)
    config = tomllib.loads(text)
    assert "name" not in config.get("node", {})
    entries: list[dict[str, Any]] = config["nodes"]
    assert [e["name"] for e in entries] == [n["name"] for n in NODES]
    assert [e["kubelet"]["port"] for e in entries] == [10250, 10251, 10300]
    assert entries[0]["labels"] == {"topology.kubernetes.io/zone": "dc1"}
    assert entries[1]["backend"] == {"nomad": {"datacenters": ["dc2"], "node_pool": "batch"}}
    assert "backend" not in entries[2] and "labels" not in entries[2]
    assert ports(docs) == {
        "kubelet-0": 10250,
        "kubelet-1": 10251,
        "kubelet-2": 10300,
        "metrics": 10255,
    }

    # vkgate itself reads the rendered file as three nodes on the shared defaults
    path = tmp_path / "vkgate.toml"
    path.write_text(text)
    settings = load(path, environ={"VKGATE_NODE__INTERNAL_IP": "10.0.0.7"})
    units = settings.units()
    assert [(u.node.name, u.kubelet.port) for u in units] == [
        ("vk-nomad-dc1", 10250),
        ("vk-nomad-dc2", 10251),
        ("vk-nomad-gpu", 10300),
    ]
    tables = [u.backend.table("nomad") for u in units]
    assert [t["datacenters"] for t in tables] == [["dc1"], ["dc2"], ["*"]]
    assert tables[1]["node_pool"] == "batch"
    assert units[0].node.labels == {"topology.kubernetes.io/zone": "dc1"}
    assert {u.node.internal_ip for u in units} == {"10.0.0.7"}  # the pod IP, as with one node
    assert all(u.kubelet.csr for u in units)


def test_a_nodes_entry_without_a_name_is_refused(tmp_path: Path) -> None:
    out = helm_template(tmp_path, '--set-json=nodes=[{"kubeletPort": 10250}]', check=False)
    assert out.returncode != 0 and "every entry of nodes needs a name" in out.stderr


def test_the_chart_names_its_own_template_configmaps_global_and_no_label_chooses_a_team(
    tmp_path: Path,
) -> None:
    """docs/design/teams.md: the chart's template ConfigMaps are the operator's (global); who
    is which team comes from the chart's values, never from a label unless they allow it."""
    path = tmp_path / "vkgate.toml"
    path.write_text(toml_of(rendered(tmp_path)))
    t = load(path, environ={}).templates
    assert (t.global_configmaps, t.team_label_namespaces, t.team_label_configmaps) == ([], [], [])
    docs = rendered(
        tmp_path,
        '--set-json=templates.configMaps={"platform":{"nomad__job.j2":"{}"}}',
        '--set-json=templates.teams={"ml-prod":"ml"}',
        '--set-json=templates.configmapTeams={"ml-templates":"ml"}',
        '--set-json=templates.teamLabelNamespaces=["lab-*"]',
    )
    path.write_text(toml_of(docs))
    t = load(path, environ={}).templates
    assert t.global_configmaps == ["platform"] and t.teams == {"ml-prod": "ml"}
    assert t.configmap_teams == {"ml-templates": "ml"} and t.team_label_namespaces == ["lab-*"]
