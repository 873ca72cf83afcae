"""Every probe handler for readiness and for liveness, on both Nomad drivers the e2e cluster
runs (docs/design/probes.md): the docker driver in bridge mode (the pod's own address, routable
from vkgate inside the test's network namespace) and raw_exec in host mode.

* readiness: ``httpGet`` (named port), ``tcpSocket`` and ``exec`` that pass make their pod Ready;
  one of each that fails keeps its pod Running and not Ready, with the kubelet's Warning
  ``Unhealthy`` Event naming the probe.
* liveness: ``httpGet``, ``exec`` and ``tcpSocket`` that fail have the container killed and
  restarted (``restartCount`` ≥ 1, ``lastState.terminated``, a ``Killing`` Event); a liveness
  probe that passes leaves its container alone.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from conftest import Kubectl, unavailable
from hostports import host_port_base
from podjson import pod_with
from waiting import events_about, wait_for_event, wait_until

from devstack.nomad_cluster import NomadCluster, bridge_unavailable_reason

pytestmark = pytest.mark.e2e

#: busybox httpd serving a page from a directory of the container.
HTTPD = "mkdir -p /tmp/www && echo ok > /tmp/www/index.html && exec httpd -f -p {port} -h /tmp/www"


def _pod(name: str, node: str, container: dict[str, Any]) -> str:
    return pod_with(name, node, container)


def _status(kubectl: Kubectl, name: str) -> dict[str, Any]:
    r = kubectl("get", "pod", name, "-o", "json", check=False)
    return dict(json.loads(r.stdout).get("status") or {}) if r.returncode == 0 else {}


def _cond(st: dict[str, Any], kind: str) -> str:
    return next((c["status"] for c in st.get("conditions") or [] if c["type"] == kind), "")


def _restarted(kubectl: Kubectl, name: str) -> dict[str, Any] | None:
    cs = (_status(kubectl, name).get("containerStatuses") or [{}])[0]
    return (
        cs if cs.get("restartCount", 0) >= 1 and "terminated" in cs.get("lastState", {}) else None
    )


def _run_handler_matrix(
    kubectl: Kubectl, node: str, tag: str, *, serve: str, port: int, host: bool
) -> None:
    """Seven pods: three readiness probes that pass, three that fail (one per handler), and
    liveness probes (three failing, one passing); then the verdicts."""
    p = port

    def web(probe_kind: str, probe: dict[str, Any], listen: int) -> dict[str, Any]:
        c: dict[str, Any] = {
            "name": "app",
            "command": ["/bin/sh", "-c", serve.format(port=listen)],
            "ports": [{"name": "http", "containerPort": listen}],
            # small: ten pods at the default 100m / 300Mi each take a good share of the e2e
            # client's CPU, and the tests after this one need room on it
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
            probe_kind: {"periodSeconds": 1, "failureThreshold": 2, **probe},
        }
        if host:  # raw_exec: the host's busybox, a path of the client's filesystem
            c.pop("image", None)
        return c

    ready = {
        f"rd-http-{tag}": web(
            "readinessProbe", {"httpGet": {"path": "/index.html", "port": "http"}}, p
        ),
        f"rd-tcp-{tag}": web("readinessProbe", {"tcpSocket": {"port": p + 1}}, p + 1),
        f"rd-exec-{tag}": web("readinessProbe", {"exec": {"command": ["/bin/true"]}}, p + 2),
    }
    unready = {
        f"ur-http-{tag}": web(
            "readinessProbe", {"httpGet": {"path": "/missing", "port": "http"}}, p + 3
        ),
        f"ur-tcp-{tag}": web("readinessProbe", {"tcpSocket": {"port": p + 40}}, p + 4),
        f"ur-exec-{tag}": web("readinessProbe", {"exec": {"command": ["/bin/false"]}}, p + 5),
    }
    dying = {
        f"lv-http-{tag}": web(
            "livenessProbe", {"httpGet": {"path": "/missing", "port": "http"}}, p + 6
        ),
        f"lv-tcp-{tag}": web("livenessProbe", {"tcpSocket": {"port": p + 41}}, p + 7),
        f"lv-exec-{tag}": web("livenessProbe", {"exec": {"command": ["/bin/false"]}}, p + 8),
    }
    alive = {
        f"lv-ok-{tag}": web(
            "livenessProbe",
            {"httpGet": {"path": "/index.html", "port": "http"}, "initialDelaySeconds": 5},
            p + 9,
        ),
    }  # fmt: skip
    pods = {**ready, **unready, **dying, **alive}
    for name, c in pods.items():
        kubectl("apply", "-f", "-", input=_pod(name, node, c))
    try:
        for name in ready:
            wait_until(
                f"{name} Ready", lambda n=name: _cond(_status(kubectl, n), "Ready") == "True", 120
            )  # type: ignore[misc]
        for name in dying:
            cs = wait_until(
                f"{name} restarted by liveness", lambda n=name: _restarted(kubectl, n), 120
            )  # type: ignore[misc]
            assert "terminated" in cs["lastState"], cs
            killing = wait_for_event(
                f"{name} Killing", kubectl, "default", name, "Killing", timeout=30
            )
            assert killing["message"] == "Container app failed liveness probe, will be restarted"
            # Events go out through several queues: the Unhealthy may land after the Killing
            unhealthy = wait_for_event(
                f"{name} Unhealthy", kubectl, "default", name, "Unhealthy", timeout=30
            )
            assert unhealthy["message"].startswith("Liveness probe failed"), unhealthy
        # the failing readiness probes: Running, never Ready, an Unhealthy Event each
        for name in unready:
            st = _status(kubectl, name)
            assert st.get("phase") == "Running", st
            assert _cond(st, "Ready") == "False" and _cond(st, "ContainersReady") == "False", st
            assert st["containerStatuses"][0]["ready"] is False
            ev = wait_for_event(
                f"{name} Unhealthy", kubectl, "default", name, "Unhealthy", timeout=30
            )
            assert ev["type"] == "Warning" and ev["message"].startswith("Readiness probe failed")
            assert ev["involvedObject"]["fieldPath"] == "spec.containers{app}"
        # the passing liveness probe: running all along, never restarted
        for name in alive:
            cs = _status(kubectl, name)["containerStatuses"][0]
            assert cs["restartCount"] == 0 and "running" in cs["state"], cs
            assert not events_about(kubectl, "default", name, "Killing")
    finally:
        # gone before the next test: their allocations hold the client's resources
        kubectl("delete", "pod", *pods, "--timeout=90s", check=False, timeout=120)


@pytest.mark.timeout(600)
def test_every_handler_on_docker_in_bridge_mode(
    start_cluster_gateway: Any, nomad_cluster: NomadCluster, cluster_kubectl: Kubectl
) -> None:
    why = bridge_unavailable_reason()
    if why:
        unavailable(f"Nomad bridge networking: {why}")
    nomad = {**nomad_cluster.backend_settings(), "network_mode": "bridge"}
    gw = start_cluster_gateway({"backend": {"kind": "nomad", "nomad": nomad}})
    tag = uuid.uuid4().hex[:5]
    # bridge mode: one network namespace per pod, so every pod may listen on the same ports
    _run_handler_matrix(cluster_kubectl, gw.node_name, tag, serve=HTTPD, port=8080, host=False)


@pytest.mark.timeout(600)
def test_every_handler_on_raw_exec_in_host_mode(
    start_cluster_gateway: Any, nomad_cluster: NomadCluster, cluster_kubectl: Kubectl
) -> None:
    gw = start_cluster_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:5]
    # host mode: each containerPort is a static port on the client; the host's busybox
    serve = (
        "mkdir -p www && echo ok > www/index.html && exec /bin/busybox httpd -f -p {port} -h www"
    )
    port = host_port_base(tag, 42)
    _run_handler_matrix(cluster_kubectl, gw.node_name, tag, serve=serve, port=port, host=True)
