"""The Zun backend end to end: a real kube-apiserver, the real ``vkgate run`` process with
``backend.kind = "zun"``, and the stateful fake OpenStack (tests/contract/zun) on a 127.0.0.1
HTTP server — keystoneauth gets a real token from the fake Keystone, every Zun call carries
it and the negotiated microversion.

A pod goes Pending → Running → Succeeded; ``kubectl logs`` returns the fake container's log
text through the kubelet API; deleting a running pod stops and deletes the Zun container.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "contract" / "zun"))
from fake_zun import FakeOpenStack, LoopbackServer
from zun_upstream import zun_api_or_none

pytestmark = pytest.mark.e2e


@pytest.fixture
def openstack() -> Iterator[LoopbackServer]:
    fake = FakeOpenStack(upstream=zun_api_or_none())  # Zun's own API code, when installed
    fake.script("busybox:1.36", run_seconds=8, exit_code=0, logs=("hello from zun", "bye"))
    fake.script("nginx:1.27")  # runs until stopped
    with LoopbackServer(fake) as server:
        yield server
    assert fake.disagreements == [], "Zun's own API accepted what the fake rejected"
    assert fake.upstream is None or fake.upstream_answers, "no request went through Zun's API"


def zun_settings(fake: FakeOpenStack) -> dict[str, Any]:
    return {
        "backend": {
            "kind": "zun",
            "zun": {
                "auth_url": fake.auth_url,
                "username": fake.username,
                "password": fake.password,
                "project_name": fake.project_name,
                "user_domain_name": "Default",
                "project_domain_name": "Default",
                "region_name": fake.region,
                "delete_poll_interval": 0.5,
                "log_poll_interval": 0.5,
            },
        },
        "pods": {"reconcile_interval": 1.0},
    }


def pod_manifest(
    name: str, node: str, *, image: str = "busybox:1.36", restart: str = "Never"
) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "restartPolicy": restart,
                "tolerations": [{"operator": "Exists"}],
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {"name": "app", "image": image, "command": ["sh", "-c"], "args": ["echo hello"]}
                ],
            },
        }
    )


def get_pod(kubectl, name: str) -> dict[str, Any]:
    out = kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def phase_is(kubectl, name: str, phase: str) -> Callable[[], Any]:
    return lambda: (p := get_pod(kubectl, name)).get("status", {}).get("phase") == phase and p


def test_pod_runs_to_succeeded_with_the_zun_exit_code(
    start_gateway, kubectl, openstack: LoopbackServer
) -> None:
    fake = openstack.fake
    gw = start_gateway(zun_settings(fake))
    name = f"zun-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=pod_manifest(name, gw.node_name))

    running = wait_until("pod Running", phase_is(kubectl, name, "Running"))
    status = running["status"]
    assert status["podIP"].startswith("10.0.0.")
    assert status["containerStatuses"][0]["state"]["running"]["startedAt"]
    (c,) = [c for c in fake.containers.values() if c["labels"].get("k8s.name") == name]
    assert c["labels"]["k8s.uid"] == running["metadata"]["uid"]
    assert c["labels"]["vkgate.node"] == gw.node_name
    assert c["entrypoint"] == ["sh", "-c"] and c["command"] == ["echo hello"]
    assert fake.token_requests >= 1

    done = wait_until("pod Succeeded", phase_is(kubectl, name, "Succeeded"))
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert terminated["containerID"] == f"zun://{c['uuid']}"


def test_kubectl_logs_reads_the_zun_container_log(
    start_gateway, kubectl, openstack: LoopbackServer
) -> None:
    fake = openstack.fake
    gw = start_gateway(zun_settings(fake))
    name = f"logs-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=pod_manifest(name, gw.node_name))
    wait_until("pod Running", phase_is(kubectl, name, "Running"))
    logs = wait_until(
        "kubectl logs",
        lambda: (r := kubectl("logs", name, check=False)).returncode == 0 and r.stdout and r,
    )
    assert logs.stdout == "hello from zun\nbye\n"


def test_deleting_a_running_pod_stops_and_deletes_the_container(
    start_gateway, kubectl, openstack: LoopbackServer
) -> None:
    fake = openstack.fake
    gw = start_gateway(zun_settings(fake))
    name = f"web-{uuid.uuid4().hex[:6]}"
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_manifest(name, gw.node_name, image="nginx:1.27", restart="Always"),
    )
    wait_until(
        "pod Running",
        lambda: (
            json.loads(kubectl("get", "pod", name, "-o", "json").stdout)["status"].get("phase")
            == "Running"
        ),
    )
    (uuid_,) = [u for u, c in fake.containers.items() if c["labels"].get("k8s.name") == name]
    kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")

    def gone() -> bool:
        fake.sync()
        return uuid_ not in fake.containers

    wait_until("Zun container deleted", gone, timeout=30)
    stops = [q for m, p, q in fake.requests if p.endswith(f"/{uuid_}/stop")]
    assert stops and stops[0]["timeout"] == ["5"]
