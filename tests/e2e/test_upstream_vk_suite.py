"""The upstream virtual-kubelet e2e suite (v1.14.1, package ``test/e2e``) against vkgate.

The suite is compiled from its pinned Go module (devstack/gomod/vk-e2e) into a test
binary and run unmodified: 9 tests — env refs to missing ConfigMaps/Secrets (optional and
mandatory), ``/pods`` and ``/runningpods/`` through the node proxy, ``/stats/summary`` and
``/metrics/resource`` through the pod proxy, graceful and force delete.  How it reaches the node
and what that requires is in docs/design/upstream-e2e.md; in short:

* the node publishes a routable InternalIP (198.51.100.x on ``lo`` of the e2e network
  namespace), because the API server refuses to proxy to loopback;
* the stats/metrics tests call ``pods/https:<node>:10250/proxy/...`` — a *pod* named like the
  node, which the API server dials on port 10250 at its podIP **without credentials**.  vkgate
  never serves anonymous requests, so the harness creates that anchor pod (bound to a node that
  does not exist, status patched to Running at a second address) and runs a small TLS forwarder
  there that adds the API server's own kubelet-client certificate — exactly what the node proxy
  does — and passes the request to vkgate;
* the suite's pods use fake images ``foo``/``bar``/``baz`` with no command.  The simulated
  backend runs them as the Go mock does.  On Nomad the default docker template would fail them
  with ErrImagePull (the images do not exist) and raw_exec refuses a container without a
  command, so the Nomad run uses a conformance template that runs a stand-in ``sleep`` for every
  container (``VKE2E_TEMPLATE`` below): the suite tests the kubelet contract, not images.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import re
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack import build
from devstack.controlplane import ControlPlane
from devstack.process import BinaryUnavailable

pytestmark = pytest.mark.e2e

TESTS = (
    "TestCreatePodWithMandatoryInexistentConfigMap",
    "TestCreatePodWithMandatoryInexistentSecrets",
    "TestCreatePodWithOptionalInexistentConfigMap",
    "TestCreatePodWithOptionalInexistentSecrets",
    "TestGetMetricsResource",
    "TestGetPods",
    "TestGetStatsSummary",
    "TestPodLifecycleForceDelete",
    "TestPodLifecycleGracefulDelete",
)

#: Nomad conformance template: every container runs a stand-in process (see module doc).
VKE2E_TEMPLATE = """{#- vkgate:conformance — a stand-in process for the suite's fake images -#}
{%- extends "nomad/raw_exec.j2" -%}
{%- block config -%}{"command": "/bin/sleep", "args": ["3600"]}{%- endblock -%}
"""


@pytest.fixture(scope="module")
def suite_binary() -> Path:
    """The compiled suite; a missing one fails (``.ci/run`` and ``tox -e e2e`` build it first,
    and without Go the whole tier skips before getting here: see conftest)."""
    path = build.binary_path("vk-e2e")
    if not path.exists():
        raise BinaryUnavailable(f"{path} is not built (python -m devstack.build vk-e2e)")
    return path


class _Forwarder(http.server.ThreadingHTTPServer):
    """TLS on ``(ip, 10250)``; GETs go to vkgate with the API server's kubelet-client cert."""

    def __init__(self, ip: str, cp: ControlPlane, target: tuple[str, int]) -> None:
        super().__init__((ip, 10250), _ForwardHandler)
        serving = cp.pki.serving_cert(f"vke2e-forwarder-{ip}", dns=("localhost",), ips=(ip,))
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(str(serving.cert), str(serving.key))
        self.socket = server_ctx.wrap_socket(self.socket, server_side=True)
        client_ctx = ssl.create_default_context(cafile=str(cp.pki.kubelet_serving_ca.cert))
        client = cp.pki.apiserver_kubelet_client
        client_ctx.load_cert_chain(str(client.cert), str(client.key))
        self.client_ctx = client_ctx
        self.target = target
        self.requests: list[str] = []


class _ForwardHandler(http.server.BaseHTTPRequestHandler):
    server: _Forwarder

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        host, port = self.server.target
        conn = http.client.HTTPSConnection(host, port, context=self.server.client_ctx, timeout=30)
        try:
            conn.request("GET", self.path)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type") or "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _anchor_pod(kubectl: Any, ns: str, node_name: str, ip: str) -> None:
    """The pod the suite's pod proxy resolves: named like the node, bound elsewhere."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": node_name, "namespace": ns},
        "spec": {
            "nodeName": "vke2e-anchor-nowhere",
            "containers": [{"name": "anchor", "image": "pause"}],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(pod))
    patch = {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}
    kubectl(
        "patch",
        "pod",
        node_name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(patch),
    )


@pytest.fixture
def forwarder(control_plane: ControlPlane) -> Iterator[Any]:
    servers: list[_Forwarder] = []

    def start(ip: str, target: tuple[str, int]) -> _Forwarder:
        srv = _Forwarder(ip, control_plane, target)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def run_suite(
    binary: Path,
    cp: ControlPlane,
    kubectl: Any,
    forwarder: Any,
    gw: Any,
    *,
    node_ip: str,
    anchor_ip: str,
    explain: Callable[[], str] = str,
) -> tuple[dict[str, str], float]:
    """Anchor pod + forwarder for ``gw``'s node, then the suite in a fresh namespace; returns
    {test: PASS/FAIL/SKIP} and the run time, after asserting the proxies were really used."""
    ns = f"vke2e-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    _anchor_pod(kubectl, ns, gw.node_name, anchor_ip)
    fwd = forwarder(anchor_ip, (node_ip, int(gw.settings["kubelet"]["port"])))
    env = dict(
        os.environ,
        VKE2E_KUBECONFIG=str(cp.kubeconfig),
        VKE2E_NODE=gw.node_name,
        VKE2E_NAMESPACE=ns,
        VKE2E_WATCH_TIMEOUT="2m",
    )
    started = time.monotonic()
    proc = subprocess.run(
        [str(binary), "-test.v", "-test.count=1", "-test.timeout=12m"],
        env=env,
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    results = {
        m.group(2): m.group(1) for m in re.finditer(r"--- (PASS|FAIL|SKIP): TestVKE2E/(\w+)", out)
    }
    assert set(results) == set(TESTS), f"ran {sorted(results)}\n{out[-6000:]}"
    failed = {t: r for t, r in results.items() if r != "PASS"}
    assert not failed, f"{failed}\n{_agent_lines(gw, failed)}\n{explain()}\n{out[-8000:]}"
    assert proc.returncode == 0, out[-4000:]
    # the two pod-proxy tests really went through the anchor pod to vkgate
    assert any(p.startswith("/stats/summary") for p in fwd.requests), fwd.requests
    assert any(p.startswith("/metrics/resource") for p in fwd.requests), fwd.requests
    return results, took


def _agent_lines(gw: Any, failed: dict[str, str], most: int = 40) -> str:
    """What the agent logged about the failed tests' pods (``nginx-<test>-…``), the last
    ``most`` lines of each: a pod that never got Ready says why here."""
    log = gw.log_text().splitlines()
    parts = []
    for test in failed:
        prefix = f"nginx-{test.lower()}-"
        lines = [line for line in log if prefix in line and "HTTP Request" not in line]
        parts.append(f"--- the agent on {prefix}*:\n" + "\n".join(lines[-most:]))
    return "\n".join(parts)


def _failed_placements(nomad: Any, most: int = 5) -> str:
    """Nomad's latest evaluations that could not place everything, and why (a pod that waits
    for room shows here; its job is gone by now, its evaluations are not)."""
    evals = [e for e in nomad.get("/v1/evaluations?namespace=*") or [] if e.get("FailedTGAllocs")]
    evals.sort(key=lambda e: int(e.get("ModifyIndex") or 0))
    lines = [f"{e['JobID']} ({e['Status']}): {json.dumps(e['FailedTGAllocs'])}" for e in evals]
    return "--- Nomad's evaluations that could not place:\n" + (
        "\n".join(lines[-most:]) or "(none)"
    )


def test_upstream_suite_passes_on_the_simulated_backend(
    suite_binary: Path,
    control_plane: ControlPlane,
    kubectl: Any,
    start_gateway: Any,
    forwarder: Any,
    routable_ips: tuple[str, ...],
) -> None:
    node_ip, anchor_ip = routable_ips[0], routable_ips[1]
    gw = start_gateway(
        {
            "node": {"internal_ip": node_ip},
            "kubelet": {"address": node_ip},
            # like the Go mock's constant figures: every container uses this much
            "backend": {"simulated": {"usage": {"cpu": "100m", "memory": "16Mi"}}},
        },
        node_name=f"vk-upstream-sim-{uuid.uuid4().hex[:4]}",
    )
    results, took = run_suite(
        suite_binary, control_plane, kubectl, forwarder, gw, node_ip=node_ip, anchor_ip=anchor_ip
    )
    print(f"\nupstream vk suite on simulated: {len(results)}/9 passed in {took:.1f} s")


def test_upstream_suite_passes_on_nomad(
    suite_binary: Path,
    control_plane: ControlPlane,
    kubectl: Any,
    start_gateway: Any,
    forwarder: Any,
    nomad_agent: Any,
    routable_ips: tuple[str, ...],
    tmp_path: Path,
) -> None:
    node_ip, anchor_ip = routable_ips[0], routable_ips[2]
    (tmp_path / "nomad").mkdir()
    (tmp_path / "nomad" / "vke2e.j2").write_text(VKE2E_TEMPLATE)
    gw = start_gateway(
        {
            "node": {"internal_ip": node_ip},
            "kubelet": {"address": node_ip},
            "templates": {"dirs": [str(tmp_path)]},
            "backend": {
                "kind": "nomad",
                "nomad": {
                    **nomad_agent.backend_settings(),
                    "template": "nomad/vke2e.j2",
                    "drivers": ["raw_exec"],  # VKE2E_TEMPLATE extends raw_exec.j2
                },
            },
        },
        node_name=f"vk-upstream-nomad-{uuid.uuid4().hex[:4]}",
    )
    results, took = run_suite(
        suite_binary,
        control_plane,
        kubectl,
        forwarder,
        gw,
        node_ip=node_ip,
        anchor_ip=anchor_ip,
        explain=lambda: _failed_placements(nomad_agent),
    )
    print(f"\nupstream vk suite on nomad: {len(results)}/9 passed in {took:.1f} s")
