"""Readiness probes on Nomad (raw_exec, host networking; docs/design/probes.md): a pod is as
ready as its probe says — httpGet and tcpSocket to the pod's address, exec through Nomad exec."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from hostports import host_port_base
from podjson import pod_with
from probing import condition, pod_status
from waiting import wait_for_event, wait_until

from devstack.nomad_cluster import NomadCluster
from vkgate_core.timeparse import parse_rfc3339

pytestmark = pytest.mark.e2e


def _pod(name: str, node: str, command: str, probe: dict[str, Any], port: int) -> str:
    return pod_with(
        name,
        node,
        {
            "name": "app",
            "command": ["/bin/sh", "-c", command],
            "ports": [{"name": "http", "containerPort": port}],
            "readinessProbe": {"periodSeconds": 1, **probe},
        },
    )


_status, _cond = pod_status, condition


def test_readiness_follows_each_handler_kind(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:5]
    base = host_port_base(tag, 8)
    www = "mkdir -p www && echo ok > www/index.html"
    pods = {
        # serves only after 8 s: ready late
        f"late-http-{tag}": (
            f"{www} && sleep 8 && exec busybox httpd -f -p {base} -h www",
            {"httpGet": {"path": "/index.html", "port": "http"}},
            base,
        ),
        # nothing listens: never ready
        f"never-tcp-{tag}": ("exec sleep 300", {"tcpSocket": {"port": base + 1}}, base + 1),
        f"ok-exec-{tag}": ("exec sleep 300", {"exec": {"command": ["/bin/true"]}}, base + 2),
        f"bad-exec-{tag}": (
            "exec sleep 300",
            {"exec": {"command": ["/bin/sh", "-c", "echo not yet; exit 1"]}},
            base + 3,
        ),
    }
    for name, (command, probe, port) in pods.items():
        kubectl("apply", "-f", "-", input=_pod(name, gw.node_name, command, probe, port))
    late, never, ok, bad = pods
    try:
        for name in pods:
            wait_until(
                f"{name} Running",
                lambda n=name: _status(control_plane, n).get("phase") == "Running",
                90,
            )  # type: ignore[misc]
        # Running is not Ready: the never-ready pods stay unready, with the kubelet's Events
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            for name in (never, bad):
                st = _status(control_plane, name)
                assert _cond(st, "Ready") == "False" and _cond(st, "ContainersReady") == "False", st
                assert st["containerStatuses"][0]["ready"] is False
            time.sleep(0.5)
        tcp = wait_for_event(
            f"{never} Unhealthy", control_plane, "default", never, "Unhealthy", timeout=60
        )
        assert tcp["type"] == "Warning"
        assert tcp["message"].startswith("Readiness probe failed: dial tcp ")
        assert tcp["involvedObject"]["fieldPath"] == "spec.containers{app}"
        ex = wait_for_event(
            f"{bad} Unhealthy", control_plane, "default", bad, "Unhealthy", timeout=60
        )
        assert ex["message"] == "Readiness probe failed: not yet\n"
        # the exec probe that passes makes its pod Ready
        wait_until(f"{ok} Ready", lambda: _cond(_status(control_plane, ok), "Ready") == "True", 30)
        # the late server: unready first, Ready once it serves (8 s after its start)
        st = wait_until(
            f"{late} Ready",
            lambda: (s := _status(control_plane, late)) and _cond(s, "Ready") == "True" and s,
            60,
        )
        started = parse_rfc3339(st["containerStatuses"][0]["state"]["running"]["startedAt"])
        became = parse_rfc3339(
            next(c for c in st["conditions"] if c["type"] == "Ready")["lastTransitionTime"]
        )
        assert (became - started).total_seconds() >= 8, st
        # the failed attempts before it served (Events are written after the status)
        wait_for_event(f"{late} Unhealthy", control_plane, "default", late, "Unhealthy", timeout=15)
    finally:
        kubectl("delete", "pod", *pods, "--wait=false", check=False)


def test_a_hung_process_is_restarted_by_its_liveness_probe(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:5]
    port = host_port_base(tag, 1)
    name = f"hung-{tag}"
    doc = json.loads(_pod(name, gw.node_name, "echo started; exec sleep 300", {}, port))
    app = doc["spec"]["containers"][0]
    del app["readinessProbe"]
    # nothing ever listens: the "hung" process fails its liveness probe
    app["livenessProbe"] = {
        "tcpSocket": {"port": "http"},
        "periodSeconds": 1,
        "failureThreshold": 2,
    }
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    try:
        st = wait_until(
            f"{name} restarted",
            lambda: (
                (s := _status(control_plane, name)).get("containerStatuses")
                and s["containerStatuses"][0]["restartCount"] >= 1
                and s
            ),
            90,
        )
        cs = st["containerStatuses"][0]
        assert "terminated" in cs["lastState"], cs
        killing = wait_for_event(
            f"{name} Killing", control_plane, "default", name, "Killing", timeout=60
        )
        assert killing["message"] == "Container app failed liveness probe, will be restarted"
        # Events go out through several queues: the Unhealthy may land after the Killing
        unhealthy = wait_for_event(
            f"{name} Unhealthy", control_plane, "default", name, "Unhealthy", timeout=15
        )
        assert unhealthy["message"].startswith("Liveness probe failed: dial tcp")
        # it runs again (and is restarted again: the probe keeps failing)
        wait_until(
            f"{name} running again",
            lambda: "running" in (_status(control_plane, name)["containerStatuses"][0]["state"]),
            60,
        )
    finally:
        kubectl("delete", "pod", name, "--wait=false", check=False)


def test_an_onfailure_pod_that_keeps_failing_restarts_on_in_crashloopbackoff(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    """The restart defaults (2 restarts 10 s apart, then a wait of at most 5 min; Mode delay
    for OnFailure too; docs/design/probes.md, "Restart backoff"): past the 2 restarts after
    which OnFailure pods used to go Failed, the pod waits in CrashLoopBackOff, still Running."""
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:5]
    name = f"crashing-{tag}"
    doc = json.loads(_pod(name, gw.node_name, "echo crashing; exit 1", {}, 20000))
    doc["spec"]["restartPolicy"] = "OnFailure"
    app = doc["spec"]["containers"][0]
    del app["readinessProbe"], app["ports"]
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    seen: set[str] = set()
    phases: set[str] = set()

    def waiting_after_two_restarts() -> dict[str, Any] | None:
        st = _status(control_plane, name)
        phases.add(str(st.get("phase")))
        for cs in st.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            seen.add(str(waiting.get("reason", "")))
            if cs.get("restartCount", 0) >= 2 and waiting.get("reason") == "CrashLoopBackOff":
                return cs
        return None

    try:
        started = time.monotonic()
        cs = wait_until(f"{name} backing off after 2 restarts", waiting_after_two_restarts, 120)
        took = time.monotonic() - started
        assert "Failed" not in phases, phases
        assert cs["lastState"]["terminated"]["exitCode"] == 1
        # restartCount counts the restarts made: the second after two delays of 10 s (plus
        # Nomad's jitter), not at once
        assert took >= 19, took
        # and a third wait follows, no longer than the kubelet's 5 min cap
        assert cs["state"]["waiting"]["message"].startswith("back-off 4m"), cs
        # and the pod is not failed during the long back-off: a phase that must not change
        # has no moment to wait for, so a few seconds pass before it is looked at again
        time.sleep(3)
        assert _status(control_plane, name)["phase"] == "Running"
    finally:
        kubectl("delete", "pod", name, "--wait=false", check=False)


def test_a_probe_header_holding_crlf_is_refused_at_admission(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    """A readiness probe whose header value holds CR/LF would smuggle a second request to
    whatever the probe dials (docs/design/probes.md, "What a probe may send, and where"): the
    API server accepts the value (it checks header names only), vkgate refuses the pod at
    admission naming the field — Failed, a Warning Event, no Nomad job."""
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:5]
    port = host_port_base(tag, 1)
    name = f"smuggle-{tag}"
    header = {"name": "X-Probe", "value": "x\r\n\r\nDELETE /v1/job/victim HTTP/1.1\r\nX: y"}
    probe = {"httpGet": {"path": "/", "port": "http", "httpHeaders": [header]}}
    kubectl("apply", "-f", "-", input=_pod(name, gw.node_name, "exec sleep 300", probe, port))
    field = "spec.containers[app].readinessProbe.httpGet.httpHeaders[0].value"
    try:
        st = wait_until(
            f"{name} Failed",
            lambda: (s := _status(control_plane, name)).get("phase") == "Failed" and s,
            60,
        )
        assert st["reason"] == "InvalidProbeRequest", st
        assert st["message"].startswith(f"{field}: the control character U+000D"), st
        event = wait_for_event(
            f"{name} InvalidProbeRequest",
            control_plane,
            "default",
            name,
            "InvalidProbeRequest",
            timeout=15,
        )
        assert event["type"] == "Warning" and event["message"].startswith(field)
        with nomad_cluster.http_client() as c:
            stubs = c.get("/v1/jobs", params={"namespace": "*", "meta": "true"}).json()
        assert not [j for j in stubs if (j.get("Meta") or {}).get("k8s.name") == name], stubs
    finally:
        kubectl("delete", "pod", name, "--wait=false", check=False)
