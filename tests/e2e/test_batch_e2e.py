"""The Azure Batch backend end to end: a real kube-apiserver, the real ``vkgate run`` process
with ``backend.kind = "batch"``, and the stateful fake Batch service (tests/contract/batch) on a
127.0.0.1 HTTP server — the SDK signs every request and the fake verifies the SharedKey.

A pod goes Pending → Running → Succeeded; ``kubectl logs`` returns the task's stdout.txt through
the kubelet API.
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
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "contract" / "batch"))
from fake_batch import FakeBatch, LoopbackServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def batch_service() -> Iterator[LoopbackServer]:
    fake = FakeBatch(start=dt.datetime.now(dt.UTC))
    fake.add_pool("pool-1", vm_size="standard_d4s_v3", slots=4, nodes=2)
    with LoopbackServer(fake, auto_step=0.3) as server:
        yield server


def batch_settings(server: LoopbackServer) -> dict[str, Any]:
    return {
        "backend": {
            "kind": "batch",
            "batch": {
                "endpoint": server.url,
                "account_name": server.fake.account,
                "account_key": server.fake.key,
                "pool_id": "pool-1",
            },
        },
        "pods": {"reconcile_interval": 1.0},
    }


def pod_manifest(name: str, node: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox:1.36",
                        "command": ["echo"],
                        "args": ["hello from batch"],
                        # The fake keeps the task running for ~6 s so Running is observable.
                        "env": [{"name": "FAKE_BATCH_RUN_STEPS", "value": "20"}],
                    }
                ],
            },
        }
    )


def get_pod(kubectl: Any, name: str) -> dict[str, Any]:
    out = kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def phase_is(kubectl: Any, name: str, phase: str) -> Callable[[], Any]:
    def check() -> Any:
        pod = get_pod(kubectl, name)
        return pod if pod.get("status", {}).get("phase") == phase else None

    return check


def test_pod_goes_running_then_succeeded(start_gateway, kubectl, batch_service) -> None:
    gw = start_gateway(batch_settings(batch_service))
    fake = batch_service.fake
    name = f"batch-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=pod_manifest(name, gw.node_name))

    running = wait_until("pod Running", phase_is(kubectl, name, "Running"))
    status = running["status"]
    assert status["hostIP"] == "10.0.0.4"  # the compute node's IP
    assert status["containerStatuses"][0]["state"]["running"]["startedAt"]

    job_id = f"vkgate-{gw.node_name}"
    (task,) = fake.all_tasks(job_id)
    assert task["displayName"] == f"default/{name}/{running['metadata']['uid']}/app"
    assert task["containerSettings"]["containerRunOptions"] == "--entrypoint echo"
    assert task["commandLine"] == "'hello from batch'"
    assert task["constraints"]["maxTaskRetryCount"] == 0
    assert fake.jobs[job_id.lower()]["onAllTasksComplete"] == "noaction"

    done = wait_until("pod Succeeded", phase_is(kubectl, name, "Succeeded"))
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert terminated["containerID"] == f"batch://{job_id}/{task['id']}"
    assert fake.auth_failures == 0  # every request carried a valid SharedKey signature


def test_kubectl_logs_reads_stdout_txt(start_gateway, kubectl, batch_service) -> None:
    gw = start_gateway(batch_settings(batch_service))
    name = f"batch-logs-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=pod_manifest(name, gw.node_name))
    wait_until("pod Running", phase_is(kubectl, name, "Running"))
    logs = wait_until(
        "kubectl logs", lambda: (r := kubectl("logs", name, check=False)).returncode == 0 and r
    )
    assert logs.stdout == "hello from batch\n"
    wait_until("pod Succeeded", phase_is(kubectl, name, "Succeeded"))
    assert kubectl("logs", name).stdout == "hello from batch\n"  # still there after completion
