"""The virtual Node against a real kube-apiserver, with the real CLI and real kubectl."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from waiting import wait_until

from devstack.agent import run_cli

SEMVER = r"^v\d+\.\d+\.\d+-vkgate(\.[0-9A-Za-z-]+)+$"


#: This file's waits: up to 30 s, polling every 0.2 s (waiting.wait_until: 60 s, every 0.3 s).
WAIT = 30.0
POLL = 0.2


def condition(node: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in (node or {}).get("status", {}).get("conditions", []):
        if c["type"] == ctype:
            return c
    return {}


def ready_is(cp: Any, name: str, status: str, reason: str | None = None) -> Callable[[], Any]:
    def check() -> Any:
        node = cp.get(f"/api/v1/nodes/{name}")
        c = condition(node, "Ready")
        return node if c.get("status") == status and reason in (None, c.get("reason")) else None

    return check


def lease_path(name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"


def test_node_appears_with_labels_taint_capacity_conditions(start_gateway, control_plane):
    gw = start_gateway({"node": {"labels": {"team": "e2e"}, "capacity": {"pods": "42"}}})
    node = wait_until(
        "Ready=True",
        ready_is(control_plane, gw.node_name, "True", "KubeletReady"),
        timeout=WAIT,
        every=POLL,
    )
    labels = node["metadata"]["labels"]
    for key, value in {
        "kubernetes.io/hostname": gw.node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "type": "virtual-kubelet",
        "vkgate.io/backend": "simulated",
        "team": "e2e",
    }.items():
        assert labels.get(key) == value, key
    assert {"key": "virtual-kubelet.io/provider", "value": "simulated", "effect": "NoSchedule"} in [
        {k: t.get(k, "") for k in ("key", "value", "effect")} for t in node["spec"]["taints"]
    ]
    status = node["status"]
    assert status["capacity"]["cpu"] == "16"
    assert status["capacity"]["memory"] == "64Gi"
    assert status["capacity"]["pods"] == "42"  # config override
    assert status["allocatable"] == status["capacity"]
    conds = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conds == {
        "Ready": ("True", "KubeletReady"),
        "MemoryPressure": ("False", "KubeletHasSufficientMemory"),
        "DiskPressure": ("False", "KubeletHasNoDiskPressure"),
        "PIDPressure": ("False", "KubeletHasSufficientPID"),
        "NetworkUnavailable": ("False", "NetworkProvidedByBackend"),
    }
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert {"type": "Hostname", "address": gw.node_name} in status["addresses"]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == gw.settings["kubelet"]["port"]
    import re

    assert re.match(SEMVER, status["nodeInfo"]["kubeletVersion"]), status["nodeInfo"]
    assert status["nodeInfo"]["operatingSystem"] == "linux"
    assert status["nodeInfo"]["containerRuntimeVersion"] == "simulated://0.1"


def test_lease_renew_time_advances(start_gateway, control_plane):
    gw = start_gateway({"node": {"lease_renew_interval": 1.0}})
    lease = wait_until(
        "the Lease", lambda: control_plane.get(lease_path(gw.node_name)), timeout=WAIT, every=POLL
    )
    node = control_plane.get(f"/api/v1/nodes/{gw.node_name}")
    assert lease["spec"]["holderIdentity"] == gw.node_name
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": gw.node_name, "uid": node["metadata"]["uid"]}
    ]
    first = lease["spec"]["renewTime"]
    later = wait_until(
        "renewTime to advance",
        lambda: (
            (control_plane.get(lease_path(gw.node_name)) or {}).get("spec", {}).get("renewTime", "")
            > first
            and control_plane.get(lease_path(gw.node_name))
        ),
        timeout=10,
        every=POLL,
    )
    assert later["spec"]["renewTime"] > first


def test_restart_patches_the_same_node(start_gateway, control_plane, kubectl):
    gw = start_gateway()
    node = wait_until(
        "Ready=True", ready_is(control_plane, gw.node_name, "True"), timeout=WAIT, every=POLL
    )
    uid = node["metadata"]["uid"]
    kubectl("label", "node", gw.node_name, "owner=someone-else")
    kubectl("taint", "node", gw.node_name, "dedicated=gpu:NoExecute")
    assert gw.stop() == 0  # SIGTERM → clean exit 0
    left = control_plane.get(f"/api/v1/nodes/{gw.node_name}")
    assert left is not None and left["metadata"]["uid"] == uid  # left in place on shutdown
    gw.start()
    node = wait_until(
        "Ready=True", ready_is(control_plane, gw.node_name, "True"), timeout=WAIT, every=POLL
    )
    assert node["metadata"]["uid"] == uid
    assert node["metadata"]["labels"]["owner"] == "someone-else"
    keys = [t["key"] for t in node["spec"]["taints"]]
    # ours once, the admin's kept (the API server's TaintNodesByCondition admission also adds
    # node.kubernetes.io/not-ready at creation; without a controller-manager it stays)
    assert keys.count("virtual-kubelet.io/provider") == 1
    assert "dedicated" in keys
    assert "exists" in gw.log_text() and "updated it in place" in gw.log_text()


def test_backend_unreachable_turns_ready_false_and_back(
    start_gateway, control_plane, tmp_path: Path
):
    flag = tmp_path / "backend-down"
    gw = start_gateway(
        {
            "node": {"ping_interval": 0.5, "ping_timeout": 1.0, "ping_failures": 2},
            "backend": {"simulated": {"unreachable_file": str(flag)}},
        }
    )
    wait_until(
        "Ready=True", ready_is(control_plane, gw.node_name, "True"), timeout=WAIT, every=POLL
    )
    flag.write_text("down")
    node = wait_until(
        "Ready=False/BackendUnreachable",
        ready_is(control_plane, gw.node_name, "False", "BackendUnreachable"),
        timeout=15,
        every=POLL,
    )
    ready = condition(node, "Ready")
    assert "simulated backend unreachable" in ready["message"]
    assert str(flag) in ready["message"]
    flag.unlink()
    node = wait_until(
        "Ready=True again",
        ready_is(control_plane, gw.node_name, "True", "KubeletReady"),
        timeout=15,
        every=POLL,
    )
    assert condition(node, "Ready")["lastTransitionTime"] >= ready["lastTransitionTime"]


def test_kubectl_get_node_wide_shows_ready(start_gateway, control_plane, kubectl):
    gw = start_gateway()
    wait_until(
        "Ready=True", ready_is(control_plane, gw.node_name, "True"), timeout=WAIT, every=POLL
    )
    out = kubectl("get", "node", gw.node_name, "-o", "wide").stdout
    header, row = out.strip().splitlines()
    cols = dict(zip(header.split(), row.split(), strict=False))
    assert cols["NAME"] == gw.node_name
    assert cols["STATUS"] == "Ready"
    assert cols["VERSION"].startswith("v1.36.0-vkgate.")
    assert cols["INTERNAL-IP"] == "127.0.0.1"


def test_malformed_config_exits_1_naming_the_key(tmp_path: Path):
    cfg = tmp_path / "vkgate.toml"
    cfg.write_text('[node]\nname = "vk-bad"\n\n[kubelet]\nport = "not-a-port"\n')
    proc = run_cli(["run", "-c", str(cfg)], timeout=30)
    assert proc.returncode == 1
    assert "kubelet.port" in proc.stderr
    cfg.write_text('[node]\nname = "vk-bad"\nlease_duraton = 40\n')
    proc = run_cli(["run", "-c", str(cfg)], timeout=30)
    assert proc.returncode == 1
    assert "node.lease_duraton" in proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_api_server_retries_with_backoff_and_clear_log(tmp_path: Path):
    port = _free_port()  # nothing listens here
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{token: not-a-real-token}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"""
    )
    cfg = tmp_path / "vkgate.toml"
    cfg.write_text(f'[node]\nname = "vk-unreachable"\n\n[kube]\nkubeconfig = "{kubeconfig}"\n')
    log_path = tmp_path / "gateway.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "run", "-c", str(cfg)], stdout=log, stderr=log
        )
    try:
        # A fixed observation window: the assertions count the retries made in it (3-5 in
        # 8 s with backoff 1, 2, 4 s) and that the process is still alive at its end, so no
        # condition can end it early.
        time.sleep(8)
        assert proc.poll() is None, log_path.read_text()  # still running: no crash loop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    lines = [line for line in text.splitlines() if "cannot check the Lease API" in line]
    # backoff 1, 2, 4 s (jitter shortens ≤20 %): 3-5 attempts in 8 s, one line each, no spam
    assert 3 <= len(lines) <= 5, text
    assert f"https://127.0.0.1:{port}" in lines[0] and "unreachable" in lines[0]
    assert "attempt 1," in lines[0] and "attempt 3," in lines[2]
    assert "Traceback" not in text


def test_node_identity_under_node_restriction(start_gateway, control_plane, kubectl):
    """As ``system:node:<name>`` (Node authorizer + NodeRestriction) registration, status,
    Lease and a restart all work: we only set labels a node may set and never touch taints of
    an existing Node unless they need to change."""
    name = "vk-e2e-noderestr"
    gw = start_gateway(
        {
            "kube": {"kubeconfig": str(control_plane.node_kubeconfig(name))},
            # nodes may not list namespaces (deploy/README.md, "Running as the node identity")
            "templates": {"namespace_labels": False},
        },
        node_name=name,
    )
    node = wait_until(
        "Ready=True",
        ready_is(control_plane, name, "True", "KubeletReady"),
        timeout=WAIT,
        every=POLL,
    )
    assert node["metadata"]["labels"]["type"] == "virtual-kubelet"
    lease = wait_until(
        "the Lease", lambda: control_plane.get(lease_path(name)), timeout=WAIT, every=POLL
    )
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    uid = node["metadata"]["uid"]
    assert gw.restart() is gw
    node = wait_until("Ready=True", ready_is(control_plane, name, "True"), timeout=WAIT, every=POLL)
    assert node["metadata"]["uid"] == uid
    text = gw.log_text()
    assert "Forbidden" not in text and "startup failed" not in text, text[-3000:]
