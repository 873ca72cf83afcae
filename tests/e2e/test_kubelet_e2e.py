"""The kubelet API end to end: real kubectl → real kube-apiserver (kubelet client cert,
serving CA) → ``vkgate run`` (simulated backend, exec as local subprocesses) and straight
against :10250 for authentication/authorization.

What this proves: the API server's log proxy and exec upgrade reach us and work — kubectl's
default WebSocket v5 path (which the API server translates to SPDY toward the kubelet), the
plain SPDY path (``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false``), a WebSocket v4 client going
through unchanged — with output, stdin and exit codes; 401/403 for strangers; the metrics and
summary shapes through the API server's node proxy.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

pytestmark = pytest.mark.e2e


#: This file's waits: polling every 0.2 s (waiting.wait_until: 60 s, every 0.3 s).
POLL = 0.2


def manifest(
    name: str, node: str, *, annotations: dict[str, str] | None = None, policy: str = "Always"
) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
            "spec": {
                "nodeName": node,
                "restartPolicy": policy,
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", "echo started"],
                        "env": [{"name": "GREETING", "value": "hello"}],
                    }
                ],
            },
        }
    )


@pytest.fixture
def gateway(start_gateway: Any) -> Any:
    return start_gateway({"backend": {"simulated": {"exec_local": True}}})


@pytest.fixture
def running_pod(gateway: Any, kubectl: Any) -> Iterator[str]:
    name = f"kl-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=manifest(name, gateway.node_name))
    wait_until(
        f"pod {name} Running",
        lambda: kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running",
        every=POLL,
    )
    yield name
    kubectl("delete", "pod", name, "--wait=false", check=False)


def run_kubectl(
    control_plane: Any,
    kubectl_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl_path), f"--kubeconfig={control_plane.kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


# --------------------------------------------------------------------------- logs


def test_kubectl_logs_and_tail_timestamps_limit(running_pod: str, kubectl: Any) -> None:
    out = kubectl("logs", running_pod).stdout
    lines = out.splitlines(keepends=True)
    assert lines[:2] == ["app: sh -c echo started\n", "GREETING=hello\n"]
    assert len(lines) > 2  # service env vars follow (KUBERNETES_SERVICE_HOST, ...)
    assert kubectl("logs", running_pod, "--tail=1").stdout == lines[-1]
    assert kubectl("logs", running_pod, "--tail=0").stdout == ""
    assert kubectl("logs", running_pod, "--limit-bytes=5").stdout == "app: "
    stamped = kubectl("logs", running_pod, "--timestamps").stdout.splitlines()
    assert len(stamped) == len(lines)
    assert all(line[:4].isdigit() and "Z " in line for line in stamped)
    assert stamped[1].endswith("Z GREETING=hello")
    assert kubectl("logs", running_pod, "--since=1h").stdout == out
    bad = kubectl("logs", running_pod, "-c", "nope", check=False)
    assert bad.returncode != 0 and "nope" in bad.stderr


def test_kubectl_logs_follow_ends_when_container_ends(gateway: Any, kubectl: Any) -> None:
    name = f"kf-{uuid.uuid4().hex[:6]}"
    kubectl(
        "apply",
        "-f",
        "-",
        input=manifest(
            name,
            gateway.node_name,
            annotations={"vkgate.io/sim-exit-code": "0", "vkgate.io/sim-run-seconds": "6"},
            policy="Never",
        ),
    )
    wait_until(
        f"pod {name} Running",
        lambda: kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running",
        every=POLL,
    )
    t0 = time.monotonic()
    follow = kubectl("logs", "-f", name, timeout=60)
    elapsed = time.monotonic() - t0
    assert follow.stdout.startswith("app: sh -c echo started\n")
    assert 0.5 < elapsed < 30, f"follow returned after {elapsed:.1f}s"
    kubectl("delete", "pod", name, "--wait=false", check=False)


# --------------------------------------------------------------------------- exec


@pytest.mark.parametrize("websockets", ["true", "false"])
def test_kubectl_exec_output_and_exit_code(
    running_pod: str, gateway: Any, control_plane: Any, kubectl_path: Path, websockets: str
) -> None:
    r = run_kubectl(
        control_plane,
        kubectl_path,
        "exec",
        running_pod,
        "--",
        "sh",
        "-c",
        "echo hi; echo oops >&2; exit 7",
        env={"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets},
    )
    assert r.stdout == "hi\n"
    assert "oops" in r.stderr
    assert r.returncode == 7, r.stderr
    ok = run_kubectl(
        control_plane,
        kubectl_path,
        "exec",
        running_pod,
        "--",
        "true",
        env={"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets},
    )
    assert ok.returncode == 0, ok.stderr

    # What reached the kubelet: both kubectl paths arrive as SPDY (the API server translates
    # kubectl's WebSocket v5 to SPDY toward a node that does not declare ExtendWebSocketsToKubelet).
    def exec_lines() -> list[str]:
        lines = [
            line
            for line in gateway.log_text().splitlines()
            if "kubelet: POST /exec/" in line or "kubelet: GET /exec/" in line
        ]
        return lines if len(lines) >= 2 else []

    execs = wait_until("both execs in the kubelet's access log", exec_lines, timeout=15, every=POLL)
    assert all("upgrade=spdy/3.1" in line for line in execs), execs[-3:]


@pytest.mark.parametrize("websockets", ["true", "false"])
def test_kubectl_exec_stdin_large(
    running_pod: str, control_plane: Any, kubectl_path: Path, websockets: str
) -> None:
    payload = "".join(f"line {i:06d}\n" for i in range(30_000))  # 360 KB: well past SPDY windows
    r = run_kubectl(
        control_plane,
        kubectl_path,
        "exec",
        "-i",
        running_pod,
        "--",
        "cat",
        env={"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets},
        input=payload,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == payload


def test_exec_disabled_backend_gives_a_clear_error(start_gateway: Any, kubectl: Any) -> None:
    gw = start_gateway()  # exec_local unset: the simulated backend refuses exec
    name = f"kx-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=manifest(name, gw.node_name))
    wait_until(
        f"pod {name} Running",
        lambda: kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running",
        every=POLL,
    )
    r = kubectl("exec", name, "--", "true", check=False, timeout=60)
    assert r.returncode != 0
    assert "exec is disabled in the simulated backend" in r.stderr
    kubectl("delete", "pod", name, "--wait=false", check=False)


async def test_websocket_v4_client_through_the_api_server(
    running_pod: str, control_plane: Any, gateway: Any
) -> None:
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    ctx = ssl.create_default_context(cafile=str(control_plane.ca_file))
    ctx.load_cert_chain(str(control_plane.admin_cert), str(control_plane.admin_key))
    base = control_plane.url.replace("https://", "wss://")
    url = (
        f"{base}/api/v1/namespaces/default/pods/{running_pod}/exec"
        "?command=sh&command=-c&command=echo+ws%3B+exit+3&stdout=true&stderr=true"
    )
    frames: list[bytes] = []
    v4 = Subprotocol("v4.channel.k8s.io")
    async with connect(url, ssl=ctx, subprotocols=[v4], proxy=None, compression=None) as ws:
        assert ws.subprotocol == "v4.channel.k8s.io"
        async for msg in ws:
            frames.append(msg if isinstance(msg, bytes) else msg.encode())
    out = b"".join(f[1:] for f in frames if f[:1] == b"\x01")
    assert out == b"ws\n"
    status = json.loads(b"".join(f[1:] for f in frames if f[:1] == b"\x03"))
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    # v4 is not translated: it reaches the kubelet as a WebSocket GET
    execs = wait_until(
        "the exec in the kubelet's access log",
        lambda: [ln for ln in gateway.log_text().splitlines() if "kubelet: GET /exec/" in ln],
        timeout=15,
        every=POLL,
    )
    assert all("upgrade=websocket" in ln for ln in execs), execs


# --------------------------------------------------------------------------- direct :10250


def _kubelet_url(gateway: Any) -> str:
    return f"https://127.0.0.1:{gateway.settings['kubelet']['port']}"


def _serving_ctx(control_plane: Any) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(control_plane.kubelet_serving_ca.cert))


def test_unauthenticated_is_401(gateway: Any, control_plane: Any) -> None:
    with httpx.Client(verify=_serving_ctx(control_plane), trust_env=False, timeout=10) as c:
        r = c.get(_kubelet_url(gateway) + "/pods")
    assert r.status_code == 401
    assert "anonymous access is disabled" in r.text


def test_tokens_without_and_with_rights(gateway: Any, control_plane: Any, kubectl: Any) -> None:
    sa = f"kl-{uuid.uuid4().hex[:6]}"
    kubectl("create", "serviceaccount", sa)
    token = kubectl("create", "token", sa).stdout.strip()
    url = _kubelet_url(gateway)
    with httpx.Client(
        verify=_serving_ctx(control_plane),
        trust_env=False,
        timeout=10,
        headers={"authorization": f"Bearer {token}"},
    ) as c:
        r = c.get(url + "/containerLogs/default/x/app")
        assert r.status_code == 403
        assert f"user=system:serviceaccount:default:{sa}" in r.text
        assert "subresource(s)=[proxy]" in r.text
        # grant get on nodes/metrics (what metrics-server has), as RBAC does it
        role = f"{sa}-metrics"
        kubectl("create", "clusterrole", role, "--verb=get", "--resource=nodes/metrics")
        kubectl(
            "create",
            "clusterrolebinding",
            role,
            f"--clusterrole={role}",
            f"--serviceaccount=default:{sa}",
        )
        # RBAC changes reach the authorizer's informers after a moment: poll briefly
        r = wait_until(
            "nodes/metrics allowed",
            lambda: (resp := c.get(url + "/metrics/resource")).status_code == 200 and resp,
            timeout=45,
            every=2,
        )
        assert "resource_scrape_error 0" in r.text
        assert c.get(url + "/containerLogs/default/x/app").status_code == 403


def test_metrics_and_summary_as_the_api_server_sees_them(
    gateway: Any, control_plane: Any, running_pod: str
) -> None:
    # The API server refuses to proxy to a loopback node address ("address not allowed"), so
    # scrape :10250 directly with the API server's own kubelet client certificate.
    ctx = _serving_ctx(control_plane)
    client_cert = control_plane.pki.apiserver_kubelet_client
    ctx.load_cert_chain(str(client_cert.cert), str(client_cert.key))
    node = gateway.node_name
    with httpx.Client(base_url=_kubelet_url(gateway), verify=ctx, trust_env=False, timeout=10) as c:
        r = c.get("/metrics/resource")
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        fams = {f.name: f for f in text_string_to_metric_families(r.text)}
        assert fams["resource_scrape_error"].samples[0].value == 0
        assert {"node_cpu_usage_seconds", "container_memory_working_set_bytes"} <= fams.keys()
        # the simulated backend measures nothing: no samples rather than fake zeros
        assert fams["node_cpu_usage_seconds"].samples == []
        summary = c.get("/stats/summary").json()
        assert summary["node"]["nodeName"] == node
        assert set(summary["node"]) >= {"nodeName", "startTime", "cpu", "memory"}
        assert isinstance(summary["pods"], list)
        pods = c.get("/pods").json()
        assert running_pod in [p["metadata"]["name"] for p in pods["items"]]
        assert c.get("/healthz").text == "ok"


def test_own_metrics_port(gateway: Any, running_pod: str, kubectl: Any) -> None:
    kubectl("logs", running_pod)
    addr = gateway.settings["kubelet"]["metrics_address"]
    with httpx.Client(trust_env=False, timeout=10) as c:
        text = c.get(f"http://{addr}/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    reqs = fams["vkgate_kubelet_requests"].samples
    assert any(s.labels["path"] == "containerLogs" and s.labels["code"] == "200" for s in reqs)
    assert "vkgate_api_writes" in fams


def test_resource_metrics_values_from_a_measuring_backend(
    start_gateway: Any, control_plane: Any, kubectl: Any
) -> None:
    gw = start_gateway({"backend": {"simulated": {"usage": {"cpu": "250m", "memory": "64Mi"}}}})
    name = f"km-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=manifest(name, gw.node_name))
    wait_until(
        f"pod {name} Running",
        lambda: kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running",
        every=POLL,
    )
    time.sleep(1.0)
    ctx = _serving_ctx(control_plane)
    client_cert = control_plane.pki.apiserver_kubelet_client
    ctx.load_cert_chain(str(client_cert.cert), str(client_cert.key))
    with httpx.Client(base_url=_kubelet_url(gw), verify=ctx, trust_env=False, timeout=10) as c:
        text = c.get("/metrics/resource").text
        summary = c.get("/stats/summary").json()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    labels = {"container": "app", "namespace": "default", "pod": name}
    (cpu,) = fams["container_cpu_usage_seconds"].samples
    assert cpu.labels == labels and cpu.value > 0 and cpu.timestamp is not None
    (mem,) = fams["container_memory_working_set_bytes"].samples
    assert mem.labels == labels and mem.value == 64 * 2**20
    (start,) = fams["container_start_time_seconds"].samples
    assert start.labels == labels and start.timestamp is None
    assert abs(start.value - time.time()) < 120
    (pod_mem,) = fams["pod_memory_working_set_bytes"].samples
    assert pod_mem.labels == {"namespace": "default", "pod": name}
    assert fams["node_memory_working_set_bytes"].samples[0].value == 64 * 2**20
    assert fams["node_cpu_usage_seconds"].samples[0].value >= cpu.value
    (p,) = summary["pods"]
    assert p["podRef"]["name"] == name
    assert p["containers"][0]["cpu"]["usageNanoCores"] == 250_000_000
    assert p["memory"]["workingSetBytes"] == 64 * 2**20
    kubectl("delete", "pod", name, "--wait=false", check=False)


@pytest.mark.parametrize("websockets", ["true", "false"])
def test_exec_returns_when_the_command_exits_with_stdin_still_open(
    running_pod: str, control_plane: Any, kubectl_path: Path, websockets: str
) -> None:
    cmd = [
        str(kubectl_path),
        f"--kubeconfig={control_plane.kubeconfig}",
        "exec",
        "-i",
        running_pod,
        "--",
        "sh",
        "-c",
        "read x; echo got $x; exit 3",
    ]
    env = {**os.environ, "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets}
    with subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as p:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(b"a\n")
        p.stdin.flush()  # and keep stdin open: the exit alone must end the session
        try:
            rc = p.wait(timeout=20)
        finally:
            p.kill()
        assert rc == 3
        assert p.stdout.read() == b"got a\n"
