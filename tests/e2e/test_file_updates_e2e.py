"""A changed ConfigMap or Secret reaches the files of a running pod without restarting it, as
the kubelet's eventual file update does; env from them stays as started (real Nomad with ACLs:
the job's Variable is rewritten, the job is not re-registered — docs/backends/nomad.md,
"Secrets and Nomad Variables")."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from waiting import wait_until

pytestmark = pytest.mark.e2e


#: This file's waits: up to 90 s, polling every 0.5 s (waiting.wait_until: 60 s, every 0.3 s).
WAIT = 90.0
POLL = 0.5


def test_a_changed_configmap_and_secret_reach_the_running_files_not_the_env(
    kubectl: Any, nomad_agent: Any, start_gateway: Any
) -> None:
    tag = uuid.uuid4().hex[:6]
    ns = f"upd-{tag}"
    kubectl("create", "namespace", ns)
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_agent.backend_settings(), "template": "nomad/raw_exec.j2"},
            },
            "pods": {"config_refresh_interval": 2},
        }
    )

    def objects(version: str) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cfg", "namespace": ns},
                "data": {"app.conf": f"mode = {version} {{{{ not a template }}}}\n"},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "sec", "namespace": ns},
                "stringData": {"pw": f"pw-{version}"},
            },
        ]

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "app", "namespace": ns},
        "spec": {
            "nodeName": gw.node_name,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "sec", "secret": {"secretName": "sec"}},
            ],
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    "command": ["/bin/sh", "-c", "exec sleep 600"],
                    "env": [
                        {
                            "name": "PW",
                            "valueFrom": {"secretKeyRef": {"name": "sec", "key": "pw"}},
                        }
                    ],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/etc/cfg"},
                        {"name": "sec", "mountPath": "/etc/sec"},
                    ],
                }
            ],
        },
    }
    items = [*objects("one"), pod]
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )

    def get_pod() -> dict[str, Any]:
        out: dict[str, Any] = json.loads(
            kubectl("get", "pod", "-n", ns, "app", "-o", "json").stdout
        )
        return out

    wait_until(
        "Running", lambda: get_pod()["status"].get("phase") == "Running", timeout=WAIT, every=POLL
    )
    script = (
        # search this task's own directory (Nomad sets NOMAD_TASK_DIR = <task>/local): an
        # exec's working directory may hold other allocations' files
        'cd "$NOMAD_TASK_DIR/.." || exit 9; '
        'cat "$(find . -path "*vkgate/cfg/app.conf" | head -1)"; '
        'echo "pw=$(cat "$(find . -path "*vkgate/sec/pw" | head -1)")"; echo "env=$PW"'
    )

    def seen() -> str:
        r = kubectl("exec", "-n", ns, "app", "--", "/bin/sh", "-c", script, check=False)
        return str(r.stdout)

    assert seen() == "mode = one {{ not a template }}\npw=pw-one\nenv=pw-one\n"
    jobs = nomad_agent.request("GET", f"/v1/jobs?namespace=*&prefix={ns}-app-")
    assert len(jobs) == 1, jobs
    jid, q = jobs[0]["ID"], f"?namespace={jobs[0]['Namespace']}"
    version = nomad_agent.request("GET", f"/v1/job/{jid}{q}")["Version"]
    allocs = [a["ID"] for a in nomad_agent.request("GET", f"/v1/job/{jid}/allocations{q}")]

    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects("two")}),
    )
    want = "mode = two {{ not a template }}\npw=pw-two\nenv=pw-one\n"  # env: until a restart
    wait_until(
        "the new file contents in the running task", lambda: seen() == want, timeout=90, every=POLL
    )

    status = get_pod()["status"]["containerStatuses"][0]
    assert status["restartCount"] == 0
    assert nomad_agent.request("GET", f"/v1/job/{jid}{q}")["Version"] == version  # no re-register
    assert [a["ID"] for a in nomad_agent.request("GET", f"/v1/job/{jid}/allocations{q}")] == allocs
    kubectl("delete", "namespace", ns, "--wait=false", check=False)
