"""securityContext on Nomad's docker driver, proven inside the container through kubectl exec.

A pod that passes Pod Security "restricted" (plus a read-only root filesystem) runs as its
runAsUser, cannot write ``/``, holds no effective capabilities and has no_new_privs set — seen
from a ``kubectl exec`` in the running container.  A restriction the backend cannot enforce
(``runAsNonRoot`` without ``runAsUser``: vkgate cannot read the image's user before the
container runs) fails the pod with ``UnsupportedPodFeature`` naming the field, never submitted;
a ``capabilities.add`` outside the client's docker ``allow_caps`` fails the container with
``CreateContainerConfigError`` and the driver's words.
The private dockerd and busybox image are those of test_kubectl_nomad_docker.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from devstack.agent import GatewayProcess

pytestmark = pytest.mark.e2e

RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 3000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def manifest(name: str, node: str, *, pod_sc: Any, container_sc: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 2,
                "tolerations": [{"operator": "Exists"}],
                "securityContext": pod_sc,
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox:1.36",
                        "command": ["sleep", "600"],
                        "securityContext": container_sc,
                    }
                ],
            },
        }
    )


def pod(kubectl: Any, name: str) -> dict[str, Any]:
    r = kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else {}


@pytest.fixture(scope="module")
def docker_gateway(
    control_plane: Any, docker_nomad: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        control_plane,
        tmp_path_factory.mktemp("gateway-docker-security"),
        {"backend": {"kind": "nomad", "nomad": docker_nomad.backend_settings()}},
    )
    try:
        yield gw.start()
    finally:
        gw.stop(timeout=15)
        print(f"----- {gw!r} log (tail) -----\n{gw.log_text()[-6000:]}")


def test_a_restricted_pod_runs_as_its_user_read_only_without_capabilities(
    docker_gateway: GatewayProcess, kubectl: Any
) -> None:
    name = f"d-restricted-{uuid.uuid4().hex[:5]}"
    body = manifest(
        name, docker_gateway.node_name, pod_sc=RESTRICTED, container_sc=CONTAINER_RESTRICTED
    )
    kubectl("apply", "-f", "-", input=body)
    wait_until(f"{name} Running", lambda: pod(kubectl, name)["status"]["phase"] == "Running")

    def sh(script: str) -> Any:
        return kubectl("exec", name, "--", "sh", "-c", script, check=False)

    assert sh("id -u; id -g").stdout == "1000\n3000\n"
    # the image's root fs is read-only: not even root's directories take a file
    touch = sh("touch /x 2>&1; echo rc=$?")
    assert "Read-only file system" in touch.stdout and "rc=1" in touch.stdout, touch.stdout
    status = sh("grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status").stdout
    fields = dict(line.split(":\t") for line in status.splitlines())
    assert fields == {
        "CapPrm": "0000000000000000",
        "CapEff": "0000000000000000",
        "NoNewPrivs": "1",
    }, status
    kubectl("delete", "pod", name, "--wait=false")


def test_run_as_non_root_without_a_user_is_refused_naming_the_field(
    docker_gateway: GatewayProcess, kubectl: Any
) -> None:
    name = f"d-nonroot-{uuid.uuid4().hex[:5]}"
    body = manifest(name, docker_gateway.node_name, pod_sc={"runAsNonRoot": True}, container_sc={})
    kubectl("apply", "-f", "-", input=body)
    wait_until(f"{name} Failed", lambda: pod(kubectl, name)["status"]["phase"] == "Failed")
    status = pod(kubectl, name)["status"]
    assert status["reason"] == "UnsupportedPodFeature"
    assert status["message"].startswith("spec.securityContext.runAsNonRoot: "), status
    assert "set a non-zero runAsUser" in status["message"]
    kubectl("delete", "pod", name, "--wait=false")


def test_a_capability_the_client_does_not_allow_fails_with_a_config_error(
    docker_gateway: GatewayProcess, kubectl: Any
) -> None:
    # NET_ADMIN is outside the docker plugin's default allow_caps: Nomad's driver refuses the
    # container — a config error of the pod (not an image pull), in the driver's words
    name = f"d-capadd-{uuid.uuid4().hex[:5]}"
    body = manifest(
        name,
        docker_gateway.node_name,
        pod_sc={},
        container_sc={"capabilities": {"add": ["NET_ADMIN"]}},
    )
    kubectl("apply", "-f", "-", input=body)
    wait_until(f"{name} Failed", lambda: pod(kubectl, name)["status"]["phase"] == "Failed")
    (app,) = pod(kubectl, name)["status"]["containerStatuses"]
    done = app["state"]["terminated"]
    assert done["reason"] == "CreateContainerConfigError", done
    assert done["message"].endswith("does not allow the following capabilities: net_admin")
    kubectl("delete", "pod", name, "--wait=false")
