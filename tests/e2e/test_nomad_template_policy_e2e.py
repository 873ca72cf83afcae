"""A team's template asks for more than the node allows — another Nomad namespace, a higher
priority, a privileged container, a host path — and the pod fails, its reason naming the field
and the setting that would allow it; on a node whose settings allow it, the same template runs
(docs/design/nomad.md, "Policy on the rendered job").

Real kube-apiserver + the e2e Nomad cluster (ACLs, mutual TLS).  The team templates are files
of a ``templates.dirs`` directory, and ``templates.teams`` maps the test's Kubernetes namespace
to the team, so its pods get ``teams/<team>/nomad/<the node's template>``.  Namespace and
priority run on raw_exec (no dockerd needed); privileged and the host path are the docker
tier's (client 1's docker driver; without a dockerd these skip, as every docker test does).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_for_event, wait_until

from devstack.agent import GatewayProcess
from devstack.nomad_cluster import POLICY_FILE, POLICY_NAME, NomadCluster

pytestmark = pytest.mark.e2e

REASON = "PolicyRefused"


def team_templates(root: Path, team: str, node_template: str, body: str) -> Path:
    """``teams/<team>/<node_template>``: the team's version of the node's template."""
    path = root / "teams" / team / node_template
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{{% extends "{node_template}" %}}\n{body}')
    return root


def gateway(
    start_gateway: Any,
    nomad_cluster: NomadCluster,
    templates: Path,
    ns: str,
    team: str,
    **nomad: Any,
) -> GatewayProcess:
    gw: GatewayProcess = start_gateway(
        {
            "backend": {"kind": "nomad", "nomad": {**nomad_cluster.backend_settings(), **nomad}},
            "templates": {"dirs": [str(templates)], "teams": {ns: team}},
        }
    )
    return gw


def pod(name: str, ns: str, node: str, *, command: list[str] | None = None) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 2,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox:1.36",
                        "command": command or ["sleep", "600"],
                    }
                ],
            },
        }
    )


def status(kubectl: Any, ns: str, name: str) -> dict[str, Any]:
    r = kubectl("get", "pod", "-n", ns, name, "-o", "json", check=False)
    if r.returncode != 0:
        return {}
    found: dict[str, Any] = json.loads(r.stdout).get("status") or {}
    return found


def refused(kubectl: Any, ns: str, name: str, *, field: str, setting: str, team: str) -> None:
    """The pod is Failed by the node's policy: reason, status message and Warning Event name
    the template, the field and the setting."""
    st = wait_until(
        f"{name} Failed",
        lambda: (s := status(kubectl, ns, name)).get("phase") == "Failed" and s,
    )
    assert st["reason"] == REASON, st
    message = st["message"]
    assert message.startswith(f"{field}: "), message
    assert f"teams/{team}/nomad/" in message and setting in message, message
    event = wait_for_event(f"{name} {REASON}", kubectl, ns, name, REASON, event_type="Warning")
    assert field in event["message"] and setting in event["message"], event


def running(kubectl: Any, ns: str, name: str) -> None:
    wait_until(
        f"{name} Running",
        lambda: status(kubectl, ns, name).get("phase") == "Running",
        timeout=90,
    )


def nomad_job(cluster: NomadCluster, ns: str, name: str) -> dict[str, Any]:
    """The job of pod ``ns/name`` as Nomad holds it (management token, any namespace)."""

    def find() -> dict[str, Any] | None:
        for stub in cluster.get("/v1/jobs?namespace=*&meta=true") or []:
            meta = stub.get("Meta") or {}
            if meta.get("k8s.namespace") == ns and meta.get("k8s.name") == name:
                job: dict[str, Any] = cluster.get(
                    f"/v1/job/{stub['ID']}?namespace={stub['Namespace']}"
                )
                return job
        return None

    found: dict[str, Any] = wait_until(f"the Nomad job of {ns}/{name}", find)
    return found


def test_a_higher_priority_needs_max_priority(
    kubectl: Any, nomad_cluster: NomadCluster, start_gateway: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    team, ns = f"t{tag}", f"prio-{tag}"
    kubectl("create", "namespace", ns)
    body = "{% set backend_info = dict(backend_info, priority=90) %}"
    templates = team_templates(tmp_path, team, "nomad/raw_exec.j2", body)
    raw = {"template": "nomad/raw_exec.j2"}

    strict = gateway(start_gateway, nomad_cluster, templates, ns, team, **raw)
    kubectl("apply", "-f", "-", input=pod("high", ns, strict.node_name))
    refused(
        kubectl, ns, "high", field="Job.Priority", setting="backend.nomad.max_priority", team=team
    )

    allowing = gateway(start_gateway, nomad_cluster, templates, ns, team, max_priority=90, **raw)
    kubectl("apply", "-f", "-", input=pod("allowed", ns, allowing.node_name))
    running(kubectl, ns, "allowed")
    assert nomad_job(nomad_cluster, ns, "allowed")["Priority"] == 90


def test_another_nomad_namespace_needs_namespaces(
    kubectl: Any, nomad_cluster: NomadCluster, start_gateway: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    team, ns, nomad_ns = f"t{tag}", f"nsp-{tag}", f"team-{tag}"
    kubectl("create", "namespace", ns)
    # the Nomad namespace, and a token of the shipped policy plus the same grants there
    nomad_cluster.request("POST", f"/v1/namespace/{nomad_ns}", {"Name": nomad_ns})
    rules = POLICY_FILE.read_text().replace('namespace "default"', f'namespace "{nomad_ns}"')
    extra = f"vkgate-{nomad_ns}"
    nomad_cluster.request(
        "POST", f"/v1/acl/policy/{extra}", {"Name": extra, "Description": "e2e", "Rules": rules}
    )
    token = nomad_cluster.request(
        "POST",
        "/v1/acl/token",
        {"Name": extra, "Type": "client", "Policies": [POLICY_NAME, extra]},
    )["SecretID"]
    body = f'{{% set backend_info = dict(backend_info, namespace="{nomad_ns}") %}}'
    templates = team_templates(tmp_path, team, "nomad/raw_exec.j2", body)
    raw = {"template": "nomad/raw_exec.j2", "token": token}

    strict = gateway(start_gateway, nomad_cluster, templates, ns, team, **raw)
    kubectl("apply", "-f", "-", input=pod("elsewhere", ns, strict.node_name))
    refused(
        kubectl,
        ns,
        "elsewhere",
        field="Job.Namespace",
        setting="backend.nomad.namespaces",
        team=team,
    )

    allowing = gateway(
        start_gateway, nomad_cluster, templates, ns, team, namespaces=[nomad_ns], **raw
    )
    kubectl("apply", "-f", "-", input=pod("allowed", ns, allowing.node_name))
    running(kubectl, ns, "allowed")
    assert nomad_job(nomad_cluster, ns, "allowed")["Namespace"] == nomad_ns


def with_config(**extra: Any) -> str:
    """A docker team template that adds keys to the task's driver Config."""
    return (
        "{% block config %}{{ super().strip()[:-1] }}, "
        + json.dumps(extra)[1:-1]
        + "}{% endblock %}"
    )


def test_a_host_path_and_privileged_need_allow_driver_config(
    kubectl: Any, docker_nomad: NomadCluster, start_gateway: Any, tmp_path: Path
) -> None:
    """Refused by default, each naming its key; with the keys allowed the job reaches Nomad as
    written.  The host path then runs (the e2e clients' docker plugin has ``volumes.enabled``);
    ``privileged`` is the client's own decision from there (its docker plugin's
    ``allow_privileged``, false on the e2e cluster), so that pod's end is not vkgate's."""
    tag = uuid.uuid4().hex[:6]
    team, ns = f"t{tag}", f"priv-{tag}"
    kubectl("create", "namespace", ns)
    host = with_config(volumes=["/etc/passwd:/host-passwd:ro"])
    privileged = with_config(privileged=True)
    templates = {
        "host": team_templates(tmp_path / "host", team, "nomad/job.j2", host),
        "privileged": team_templates(tmp_path / "privileged", team, "nomad/job.j2", privileged),
    }
    for key, setting_key in (("host", "volumes"), ("privileged", "privileged")):
        strict = gateway(start_gateway, docker_nomad, templates[key], ns, team)
        kubectl("apply", "-f", "-", input=pod(f"{key}-strict", ns, strict.node_name))
        refused(
            kubectl,
            ns,
            f"{key}-strict",
            field=f"Job.TaskGroups[pod].Tasks[app].Config.{setting_key}",
            setting=f'add "{setting_key}" to backend.nomad.allow_driver_config',
            team=team,
        )

    allowing = gateway(
        start_gateway, docker_nomad, templates["host"], ns, team, allow_driver_config=["volumes"]
    )
    reader = ["sh", "-c", "cat /host-passwd && sleep 600"]
    kubectl("apply", "-f", "-", input=pod("host-allowed", ns, allowing.node_name, command=reader))
    running(kubectl, ns, "host-allowed")
    config = nomad_job(docker_nomad, ns, "host-allowed")["TaskGroups"][0]["Tasks"][0]["Config"]
    assert config["volumes"] == ["/etc/passwd:/host-passwd:ro"]

    allowing = gateway(
        start_gateway,
        docker_nomad,
        templates["privileged"],
        ns,
        team,
        allow_driver_config=["privileged"],
    )
    kubectl("apply", "-f", "-", input=pod("privileged-allowed", ns, allowing.node_name))
    task = nomad_job(docker_nomad, ns, "privileged-allowed")["TaskGroups"][0]["Tasks"][0]
    assert task["Config"]["privileged"] is True
    assert status(kubectl, ns, "privileged-allowed").get("reason") != REASON
