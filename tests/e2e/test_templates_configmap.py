"""Per-team templates from a ConfigMap, live, against a real kube-apiserver and Nomad.

A ConfigMap template for team "ml" changes the Nomad job's Meta and priority for pods in the ml
namespace only; updating the ConfigMap changes the next pod's job; a broken version is rejected
with an Event and the previous template keeps working.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from waiting import wait_for_event, wait_until

pytestmark = pytest.mark.e2e

SYSTEM_NS = "vkgate-templates"


def configmap(template: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "ml-templates",
                "namespace": SYSTEM_NS,
                "labels": {"vkgate.io/templates": "true", "vkgate.io/team": "ml"},
            },
            "data": {"nomad__job.j2": template},
        }
    )


def team_template(priority: int, tag: str) -> str:
    return (
        '{% extends "nomad/job.j2" %}\n'
        f"{{% set backend_info = dict(backend_info, priority={priority}) %}}\n"
        '{% block meta %}{{ dict(n.meta, **{"team": team, "tag": "'
        + tag
        + '"}) | tojson }}{% endblock %}\n'
    )


def pod(namespace: str, name: str, node: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}
                ],
            },
        }
    )


def nomad_job(agent: Any, namespace: str, name: str) -> dict[str, Any] | None:
    with agent.http_client() as c:
        for stub in c.get("/v1/jobs", params={"namespace": "*"}).json():
            job = c.get(
                f"/v1/job/{stub['ID']}", params={"namespace": stub.get("Namespace", "default")}
            ).json()
            meta = job.get("Meta") or {}
            if meta.get("k8s.namespace") == namespace and meta.get("k8s.name") == name:
                return job
    return None


def test_configmap_templates_per_team_live(
    control_plane: Any, kubectl: Any, nomad_agent: Any, start_gateway: Any
) -> None:
    suffix = uuid.uuid4().hex[:6]
    ml, other = f"ml-{suffix}", f"other-{suffix}"
    kubectl("create", "namespace", SYSTEM_NS, check=False)
    kubectl("create", "namespace", ml)
    kubectl("label", "namespace", ml, "vkgate.io/team=ml")
    kubectl("create", "namespace", other)
    kubectl("apply", "-f", "-", input=configmap(team_template(80, "v1")))

    gw = start_gateway(
        {
            # the team's priorities (80, 70) are within what this node allows a template
            # (docs/design/nomad.md, "Policy on the rendered job")
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_agent.backend_settings(), "max_priority": 80},
            },
            # the operator lets namespace ml and ConfigMap ml-templates choose their team by
            # label (docs/design/teams.md: by default no label does)
            "templates": {
                "configmap_namespace": SYSTEM_NS,
                "team_label_namespaces": [ml],
                "team_label_configmaps": ["ml-templates"],
            },
        }
    )
    node = gw.node_name

    def job_of(namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = wait_until(
            f"the Nomad job of {namespace}/{name}",
            lambda: nomad_job(nomad_agent, namespace, name),
        )
        return found

    # team ml gets the ConfigMap template, another namespace the default
    kubectl("apply", "-f", "-", input=pod(ml, "a", node))
    kubectl("apply", "-f", "-", input=pod(other, "b", node))
    job_a, job_b = job_of(ml, "a"), job_of(other, "b")
    assert (
        job_a["Priority"] == 80 and job_a["Meta"]["team"] == "ml" and job_a["Meta"]["tag"] == "v1"
    )
    assert job_b["Priority"] == 50 and "team" not in job_b["Meta"]

    # an update applies to the next pod (once the agent says it loaded one more version than
    # before: how often it said so at start-up is not this test's business)
    loads = gw.log_text().count("templates loaded")
    kubectl("apply", "-f", "-", input=configmap(team_template(70, "v2")))
    wait_until(
        "v2 loaded",
        lambda: (
            "teams/ml/nomad/job.j2" in gw.log_text()
            and gw.log_text().count("templates loaded") > loads
        ),
    )
    kubectl("apply", "-f", "-", input=pod(ml, "c", node))
    job_c = job_of(ml, "c")
    assert job_c["Priority"] == 70 and job_c["Meta"]["tag"] == "v2", (
        job_c["Priority"],
        job_c["Meta"],
    )

    # a broken version is rejected with an Event; v2 keeps serving
    kubectl(
        "apply",
        "-f",
        "-",
        input=configmap('{% extends "nomad/job.j2" %}\n{% block meta %}{{ }}{% endblock %}'),
    )

    event = wait_for_event(
        "a TemplateRejected event",
        kubectl,
        SYSTEM_NS,
        "ml-templates",
        "TemplateRejected",
        timeout=60,
    )
    assert event["type"] == "Warning"
    assert (
        "teams/ml/nomad/job.j2:2" in event["message"]
        and "previous version keeps serving" in event["message"]
    )
    kubectl("apply", "-f", "-", input=pod(ml, "d", node))
    job_d = job_of(ml, "d")
    assert job_d["Priority"] == 70 and job_d["Meta"]["tag"] == "v2"
