"""Pod strings and team templates against the node's policy, end to end on the Batch backend: a
real kube-apiserver, the real ``vkgate run`` and the stateful fake Batch service
(tests/contract/batch), as in tests/e2e/test_batch_e2e.py.

* an emptyDir ``mountPath: "/:/host"`` (it used to render as ``--volume /:/host``) leaves
  the pod Failed naming the field, and no task reaches the service;
* a team template that adds ``--privileged`` to ``containerRunOptions`` leaves the pod Failed
  with reason ``PolicyRefused`` naming the template, the field and the setting; with the option
  named in ``template_run_options`` the same template runs.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_for_event, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "contract" / "batch"))
from fake_batch import FakeBatch, LoopbackServer

pytestmark = pytest.mark.e2e

PRIVILEGED = (
    '{% extends "batch/task.j2" %}{% block container_settings %}"containerSettings": '
    "{{ dict(task.container_settings, containerRunOptions="
    'task.container_settings.containerRunOptions ~ " --privileged") | tojson }},'
    "{% endblock %}"
)


@pytest.fixture
def batch_service() -> Iterator[LoopbackServer]:
    fake = FakeBatch(start=dt.datetime.now(dt.UTC))
    fake.add_pool("pool-1", vm_size="standard_d4s_v3", slots=4, nodes=2)
    with LoopbackServer(fake, auto_step=0.3) as server:
        yield server


def settings(server: LoopbackServer, templates: Path, **batch: Any) -> dict[str, Any]:
    return {
        "backend": {
            "kind": "batch",
            "batch": {
                "endpoint": server.url,
                "account_name": server.fake.account,
                "account_key": server.fake.key,
                "pool_id": "pool-1",
                **batch,
            },
        },
        "templates": {
            "dirs": [str(templates)],
            "teams": {"default": "ml"},
            "namespace_labels": False,
        },
        "pods": {"reconcile_interval": 1.0},
    }


@pytest.fixture
def team_templates(tmp_path: Path) -> Path:
    team = tmp_path / "templates" / "teams" / "ml" / "batch"
    team.mkdir(parents=True)
    (team / "task.j2").write_text(PRIVILEGED)
    return tmp_path / "templates"


def manifest(name: str, node: str, **container: Any) -> str:
    c = {
        "name": "app",
        "image": "busybox:1.36",
        "command": ["echo"],
        "args": ["hello"],
        "env": [{"name": "FAKE_BATCH_RUN_STEPS", "value": "20"}],
        **container,
    }
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "tolerations": [{"operator": "Exists"}],
                "automountServiceAccountToken": False,
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [c],
            },
        }
    )


def phase_is(kubectl: Any, name: str, phase: str) -> Callable[[], Any]:
    def check() -> Any:
        out = kubectl("get", "pod", name, "-o", "json", check=False)
        pod = json.loads(out.stdout) if out.returncode == 0 else {}
        return pod if pod.get("status", {}).get("phase") == phase else None

    return check


def test_a_mount_path_that_would_bind_the_nodes_root_fails_the_pod(
    start_gateway: Any, kubectl: Any, batch_service: LoopbackServer, tmp_path: Path
) -> None:
    gw = start_gateway(settings(batch_service, tmp_path))
    name = f"esc-{uuid.uuid4().hex[:6]}"
    mounts = [{"name": "scratch", "mountPath": "/:/host"}]
    kubectl("apply", "-f", "-", input=manifest(name, gw.node_name, volumeMounts=mounts))

    failed = wait_until("pod Failed", phase_is(kubectl, name, "Failed"))
    assert "spec.containers[app].volumeMounts[0].mountPath" in failed["status"]["message"]
    wait_for_event("the refusal Event", kubectl, "default", name, event_type="Warning")
    assert batch_service.fake.all_tasks(f"vkgate-{gw.node_name}") == []


@pytest.mark.budget(90, "starts two agents: one refusing the template, one allowing it")
def test_a_team_template_adding_privileged_fails_the_pod_until_the_node_allows_it(
    start_gateway: Any, kubectl: Any, batch_service: LoopbackServer, team_templates: Path
) -> None:
    gw = start_gateway(settings(batch_service, team_templates))
    name = f"priv-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=manifest(name, gw.node_name))

    failed = wait_until("pod Failed", phase_is(kubectl, name, "Failed"))
    status = failed["status"]
    assert status["reason"] == "PolicyRefused"
    assert "template teams/ml/batch/task.j2" in status["message"]
    assert "containerSettings.containerRunOptions" in status["message"]
    assert "backend.batch.template_run_options" in status["message"]
    gw.stop()

    allowed = start_gateway(
        settings(batch_service, team_templates, template_run_options=["--privileged"])
    )
    name = f"priv-ok-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=manifest(name, allowed.node_name))
    wait_until("pod Running", phase_is(kubectl, name, "Running"))
    tasks = batch_service.fake.all_tasks(f"vkgate-{allowed.node_name}")
    assert any(
        t["containerSettings"]["containerRunOptions"].endswith("--privileged") for t in tasks
    )
