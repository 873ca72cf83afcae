"""A team pod created while vkgate cannot load its team's templates — or the namespace team
labels — waits for them and runs with the team's template (docs/design/startup.md), against a
real kube-apiserver and Nomad.

The gateway runs as a ServiceAccount of its own, bound to the deploy/ roles except the one the
test withholds, so the first list of that input is forbidden for as long as the test wants: the
pod is created during the wait, nothing reaches Nomad, ``/readyz`` and the Node's Ready
condition name the input, the wait turns into the named error ``InputsNotSynced`` after
``pods.inputs_timeout``; then the role is bound and the pod's Nomad job has the team's priority
(80; the default template's is 50).  Deterministic: the order is held by the gate, not by timing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from test_templates_configmap import nomad_job, pod, team_template
from waiting import wait_until

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SA_NS = "vkgate-system"


def deploy_rbac() -> dict[tuple[str, str], dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "common" / "rbac.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d}


@dataclass
class Identity:
    """A ServiceAccount, its kubeconfig, and ``grant(kind, name, doc)`` to bind a role later."""

    name: str
    kubeconfig: Path
    grant: Callable[[dict[str, Any]], None]


@pytest.fixture
def identity(
    kubectl: Any, control_plane: Any, tmp_path: Path
) -> Iterator[Callable[[set[str]], Identity]]:
    """``identity(withheld)``: a ServiceAccount bound to the deploy/ roles, minus the rules on
    the resources in ``withheld`` (those come with ``grant``)."""
    made: list[tuple[str, str, str]] = []  # (kind, name, namespace) to delete

    def apply(doc: dict[str, Any]) -> None:
        kubectl("apply", "-f", "-", input=json.dumps(doc))
        made.append((doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace", "")))

    def make(withheld: set[str]) -> Identity:
        sa = f"vkgate-startup-{uuid.uuid4().hex[:6]}"
        kubectl("create", "namespace", SA_NS, check=False)
        apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": sa, "namespace": SA_NS},
            }
        )
        subject = [{"kind": "ServiceAccount", "name": sa, "namespace": SA_NS}]
        rbac = deploy_rbac()
        role = json.loads(json.dumps(rbac[("ClusterRole", "vkgate")]))
        role["metadata"] = {"name": sa}
        role["rules"] = [r for r in role["rules"] if not set(r["resources"]) & withheld]
        apply(role)
        apply(binding("ClusterRoleBinding", sa, "", "ClusterRole", sa, subject))
        lease = json.loads(json.dumps(rbac[("Role", "vkgate-lease")]))
        lease["metadata"] = {"name": sa, "namespace": "kube-node-lease"}
        apply(lease)
        apply(binding("RoleBinding", sa, "kube-node-lease", "Role", sa, subject))
        token = kubectl("create", "token", sa, "-n", SA_NS, "--duration=1h").stdout.strip()
        admin = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
        path = tmp_path / f"{sa}.kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": admin["clusters"][0]["cluster"]}],
                    "users": [{"name": sa, "user": {"token": token}}],
                    "contexts": [{"name": sa, "context": {"cluster": "c", "user": sa}}],
                    "current-context": sa,
                }
            )
        )

        def grant(role_doc: dict[str, Any]) -> None:
            """Create ``role_doc`` (a Role or ClusterRole) and bind it to the ServiceAccount."""
            apply(role_doc)
            meta = role_doc["metadata"]
            kind = "RoleBinding" if role_doc["kind"] == "Role" else "ClusterRoleBinding"
            ns = meta.get("namespace", "")
            apply(binding(kind, meta["name"], ns, role_doc["kind"], meta["name"], subject))

        return Identity(sa, path, grant)

    yield make
    for kind, name, ns in reversed(made):
        kubectl(
            "delete", kind, name, *(["-n", ns] if ns else []), "--ignore-not-found", check=False
        )


def binding(
    kind: str, name: str, ns: str, role_kind: str, role: str, subjects: list[dict[str, str]]
) -> dict[str, Any]:
    meta: dict[str, str] = {"name": name, **({"namespace": ns} if ns else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects,
    }


def templates_role(name: str, ns: str) -> dict[str, Any]:
    """deploy/'s Role on the template ConfigMaps, in ``ns``."""
    role: dict[str, Any] = json.loads(json.dumps(deploy_rbac()[("Role", "vkgate-templates")]))
    role["metadata"] = {"name": name, "namespace": ns}
    return role


def namespaces_role(name: str) -> dict[str, Any]:
    """deploy/'s rule on namespaces (the team labels), as a ClusterRole of its own."""
    rules = [
        r
        for r in deploy_rbac()[("ClusterRole", "vkgate")]["rules"]
        if "namespaces" in r["resources"]
    ]
    assert rules and rules[0]["verbs"] == ["list", "watch"], rules
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }


def team_configmap(ns: str, team: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{team}-templates",
                "namespace": ns,
                "labels": {"vkgate.io/templates": "true", "vkgate.io/team": team},
            },
            "data": {"nomad__job.j2": team_template(80, "startup")},
        }
    )


def readyz(gw: Any) -> tuple[int, str]:
    address = gw.settings["kubelet"]["metrics_address"]
    r = httpx.get(f"http://{address}/readyz", timeout=5, trust_env=False)
    return r.status_code, r.text


def ready_condition(control_plane: Any, node: str) -> dict[str, Any]:
    got = control_plane.get(f"/api/v1/nodes/{node}") or {}
    conds = (got.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), {})


def scenario(
    *,
    withheld: str,
    identity: Callable[[set[str]], Identity],
    kubectl: Any,
    control_plane: Any,
    nomad_agent: Any,
    start_gateway: Any,
) -> None:
    """Create the team pod while ``withheld`` cannot be listed; grant; the team's template."""
    suffix = uuid.uuid4().hex[:6]
    team, team_ns, tpl_ns = f"ml{suffix}", f"ml-{suffix}", f"vkgate-tpl-{suffix}"
    kubectl("create", "namespace", tpl_ns)
    kubectl("create", "namespace", team_ns)
    kubectl("label", "namespace", team_ns, f"vkgate.io/team={team}")
    kubectl("apply", "-f", "-", input=team_configmap(tpl_ns, team))
    input_name = (
        f"template ConfigMaps in {tpl_ns}" if withheld == "configmaps" else "namespace team labels"
    )
    who = identity({"namespaces"} if withheld == "namespaces" else set())
    templates = templates_role(who.name, tpl_ns)
    labels = namespaces_role(f"{who.name}-namespaces")
    if withheld != "configmaps":
        who.grant(templates)

    gw = start_gateway(
        {
            # the team's priority 80 is within what this node allows a template
            # (docs/design/nomad.md, "Policy on the rendered job")
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_agent.backend_settings(), "max_priority": 80},
            },
            # the operator lets the team's namespace and ConfigMap choose their team by label
            # (docs/design/teams.md: by default no label does)
            "templates": {
                "configmap_namespace": tpl_ns,
                "team_label_namespaces": [team_ns],
                "team_label_configmaps": [f"{team}-templates"],
            },
            "kube": {"kubeconfig": str(who.kubeconfig)},
            "pods": {"inputs_timeout": 3},
        }
    )
    node = gw.node_name
    kubectl("apply", "-f", "-", input=pod(team_ns, "a", node))

    # the wait outlives its bound: the named error, in the log, /readyz and the Node
    wait_until(
        "InputsNotSynced in the log",
        lambda: "InputsNotSynced: not loaded after 3s" in gw.log_text(),
    )
    status, body = readyz(gw)
    assert status == 503 and input_name in body and "403" in body, body
    cond = ready_condition(control_plane, node)
    assert (cond.get("status"), cond.get("reason")) == ("False", "InputsNotSynced"), cond
    assert input_name in cond["message"]
    assert nomad_job(nomad_agent, team_ns, "a") is None  # held: never rendered without it
    assert f"pod {team_ns}/a submitted" not in gw.log_text()

    who.grant(templates if withheld == "configmaps" else labels)
    job = wait_until("the Nomad job of the team pod", lambda: nomad_job(nomad_agent, team_ns, "a"))
    assert job["Priority"] == 80 and job["Meta"]["team"] == team, job  # the team's template
    assert job["Meta"]["tag"] == "startup"
    wait_until("Ready=True", lambda: ready_condition(control_plane, node).get("status") == "True")
    assert readyz(gw)[0] == 200
    text = gw.log_text()
    assert f"{input_name} loaded after" in text and "inputs synced after" in text
    kubectl("delete", "pod", "a", "-n", team_ns, "--wait=false", check=False)


def test_a_team_pod_waits_for_the_template_configmaps(
    identity: Any, kubectl: Any, control_plane: Any, nomad_agent: Any, start_gateway: Any
) -> None:
    scenario(
        withheld="configmaps",
        identity=identity,
        kubectl=kubectl,
        control_plane=control_plane,
        nomad_agent=nomad_agent,
        start_gateway=start_gateway,
    )


def test_a_team_pod_waits_for_the_namespace_team_labels(
    identity: Any, kubectl: Any, control_plane: Any, nomad_agent: Any, start_gateway: Any
) -> None:
    scenario(
        withheld="namespaces",
        identity=identity,
        kubectl=kubectl,
        control_plane=control_plane,
        nomad_agent=nomad_agent,
        start_gateway=start_gateway,
    )
