"""Volume files and Secret env through the job's Nomad Variable on the docker driver: the
``nomadVar`` templates render into the task directory that the docker template bind-mounts at
``mountPath``, and the process sees each value byte for byte while the job carries none of them
(docs/backends/nomad.md, "Secrets and Nomad Variables").  The private dockerd and busybox image
are those of test_kubectl_nomad_docker.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from devstack.agent import GatewayProcess

pytestmark = pytest.mark.e2e

FILE = 'line one\n{{ env "HOME" }} ${NOMAD_TASK_DIR} [[vkgate .f0 vkgate]]\n'
ENV = 'secret "quoted" \\ ${HOME} $(NOT) {{ .e0 }}'


@pytest.fixture(scope="module")
def docker_gateway(
    control_plane: Any, docker_nomad: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        control_plane,
        tmp_path_factory.mktemp("gateway-docker-variables"),
        {"backend": {"kind": "nomad", "nomad": docker_nomad.backend_settings()}},
    )
    try:
        yield gw.start()
    finally:
        gw.stop(timeout=15)
        print(f"----- {gw!r} log (tail) -----\n{gw.log_text()[-6000:]}")


def test_files_and_secret_env_arrive_from_the_variable_at_mount_path(
    docker_gateway: GatewayProcess, kubectl: Any, docker_nomad: Any
) -> None:
    name = f"d-var-{uuid.uuid4().hex[:5]}"
    objs = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": "default"},
            "stringData": {"file.txt": FILE, "pw": ENV},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": docker_gateway.node_name,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 2,
                "tolerations": [{"operator": "Exists"}],
                "volumes": [{"name": "creds", "secret": {"secretName": name}}],
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox:1.36",
                        "command": ["sleep", "600"],
                        "env": [
                            {
                                "name": "PW",
                                "valueFrom": {"secretKeyRef": {"name": name, "key": "pw"}},
                            }
                        ],
                        "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}],
                    }
                ],
            },
        },
    ]
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    )

    def phase() -> str:
        r = kubectl("get", "pod", name, "-o", "json", check=False)
        return str(json.loads(r.stdout)["status"].get("phase")) if r.returncode == 0 else ""

    wait_until(f"{name} Running", lambda: phase() == "Running")
    out = kubectl("exec", name, "--", "cat", "/etc/creds/file.txt").stdout
    assert out == FILE
    env = kubectl("exec", name, "--", "sh", "-c", 'printf %s "$PW"').stdout
    assert env == ENV
    jobs = docker_nomad.request("GET", f"/v1/jobs?namespace=*&prefix=default-{name}-")
    assert len(jobs) == 1, jobs
    job = json.dumps(docker_nomad.request("GET", f"/v1/job/{jobs[0]['ID']}?namespace=default"))
    assert "line one" not in job and "quoted" not in job
    kubectl(
        "delete",
        "-f",
        "-",
        "--wait=false",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}),
    )
