"""Lifecycle hooks on Nomad, raw_exec and docker (docs/design/probes.md, "Lifecycle hooks"):
postStart and preStop exec hooks run through Nomad exec and append to a file the main process
follows (``tail -f``), so the container's own output shows the order — main starts,
postStart, (Running, Ready), preStop, SIGTERM — and the deletion finishes within the grace
period, the preStop time included."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from waiting import events_about, wait_for_event, wait_until

from devstack.nomad_cluster import NomadCluster
from vkgate_core.timeparse import parse_rfc3339

pytestmark = pytest.mark.e2e

GRACE = 20
#: What the postStart hook takes: the pod may not be Running (nor Ready) before.
POST_START = 3


def _pod(name: str, node: str, marker: str) -> dict[str, Any]:
    main = (
        f"F={marker}; : >> $F; tail -n +1 -f $F & T=$!; "
        "trap 'echo main: SIGTERM; kill $T; exit 0' TERM; "
        "echo main: running; while :; do sleep 0.2; done"
    )
    post = f"echo postStart: begin >> {marker}; sleep {POST_START}; echo postStart: end >> {marker}"
    # the sleep lets the tail (which polls once a second) print it before the SIGTERM line
    pre = f"echo preStop >> {marker}; sleep 2"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": GRACE,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "app",
                    "image": "busybox:1.36",
                    "command": ["/bin/sh", "-c", main],
                    "lifecycle": {
                        "postStart": {"exec": {"command": ["/bin/sh", "-c", post]}},
                        "preStop": {"exec": {"command": ["/bin/sh", "-c", pre]}},
                    },
                }
            ],
        },
    }


def _get(cp: Any, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = cp.get(f"/api/v1/namespaces/default/pods/{name}")
    return found


@pytest.mark.parametrize(
    "template", ["nomad/raw_exec.j2", "nomad/job.j2"], ids=["raw_exec", "docker"]
)
def test_post_start_then_running_then_pre_stop_then_sigterm_within_the_grace_period(
    start_gateway: Any,
    control_plane: Any,
    kubectl: Any,
    kubectl_path: Path,
    nomad_cluster: NomadCluster,
    template: str,
    tmp_path: Path,
) -> None:
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": template},
            }
        }
    )
    tag = uuid.uuid4().hex[:6]
    name = f"hooks-{tag}"
    marker = f"/tmp/vkgate-hooks-{tag}"
    kubectl("apply", "-f", "-", input=json.dumps(_pod(name, gw.node_name, marker)))

    def running() -> dict[str, Any] | None:
        st = (_get(control_plane, name) or {}).get("status") or {}
        return st if st.get("phase") == "Running" else None

    logs: subprocess.Popen[bytes] | None = None
    out = (tmp_path / "logs").open("w+b")
    try:
        st = wait_until(f"{name} Running", running, 120, every=0.2)
        # Running and Ready only once the postStart hook returned, POST_START s after the start
        cs = st["containerStatuses"][0]
        started = parse_rfc3339(cs["state"]["running"]["startedAt"])
        ready = next(c for c in st["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", st
        became = parse_rfc3339(ready["lastTransitionTime"])
        ready_after = (became - started).total_seconds()
        assert ready_after >= POST_START, st
        logs = subprocess.Popen(
            [str(kubectl_path), f"--kubeconfig={control_plane.kubeconfig}", "logs", "-f", name],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        # the follow is connected once it printed what came before (the main's first line)
        wait_until(
            f"kubectl logs -f {name} connected",
            lambda: b"main: running" in (tmp_path / "logs").read_bytes(),
            timeout=30,
            every=0.2,
        )
        t0 = time.monotonic()
        kubectl("delete", "pod", name, "--wait=false")
        wait_until(f"{name} deleted", lambda: _get(control_plane, name) is None, GRACE + 10)
        took = time.monotonic() - t0
        logs.wait(timeout=20)  # the follow ends by itself once the container is dead
        out.seek(0)
        text = out.read().decode(errors="replace")
        lines = [line for line in text.splitlines() if line]
        print(
            f"\n{template}: Ready {ready_after:.0f}s after the start (postStart {POST_START}s), "
            f"deletion took {took:.1f}s (preStop 2s); container output: {lines}"
        )
        order = ["main: running", "postStart: begin", "postStart: end", "preStop", "main: SIGTERM"]
        assert [line for line in lines if line in order] == order, text
        # the preStop (2 s) and the stop fit in the grace period
        assert 2 <= took < GRACE, took
        wait_for_event(
            f"{name} Killing",
            control_plane,
            "default",
            name,
            "Killing",
            match=lambda e: e["message"] == "Stopping container app",
            timeout=10,
        )
        assert not events_about(control_plane, "default", name, "FailedPostStartHook")
        assert not events_about(control_plane, "default", name, "FailedPreStopHook")
    finally:
        if logs is not None and logs.poll() is None:
            logs.kill()
            logs.wait()
        out.close()
        kubectl("delete", "pod", name, "--wait=false", check=False)
        Path(marker).unlink(missing_ok=True)  # raw_exec wrote it on this host


def test_a_failing_post_start_restarts_the_container_and_a_long_grace_is_called_capped(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    """raw_exec: a postStart that fails is a Warning with its output, then Killing and a
    restart through Nomad's alloc restart (restartCount + 1); the container is never reported
    running meanwhile.  A 60 s grace on clients that kill after 30 s (the e2e clients run Nomad's
    default max_kill_timeout) gets a Normal GracePeriodCapped Event at creation."""
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:6]
    name = f"hookfail-{tag}"
    doc = _pod(name, gw.node_name, f"/tmp/vkgate-hooks-{tag}")
    doc["spec"]["terminationGracePeriodSeconds"] = 60
    app = doc["spec"]["containers"][0]
    app["command"] = ["/bin/sh", "-c", "echo main: running; exec sleep 300"]
    app["lifecycle"] = {
        "postStart": {"exec": {"command": ["/bin/sh", "-c", "echo no config here; exit 3"]}}
    }
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    states: set[str] = set()

    def restarted() -> dict[str, Any] | None:
        st = (_get(control_plane, name) or {}).get("status") or {}
        for cs in st.get("containerStatuses") or []:
            states.update(cs.get("state") or {})
            states.update(["ready"] if cs.get("ready") else [])
            if cs.get("restartCount", 0) >= 1:
                return dict(cs)
        return None

    try:
        failed = wait_for_event(
            f"{name} FailedPostStartHook",
            control_plane,
            "default",
            name,
            "FailedPostStartHook",
            timeout=90,
        )
        assert failed["type"] == "Warning"
        assert failed["involvedObject"]["fieldPath"] == "spec.containers{app}"
        assert "no config here" in failed["message"], failed["message"]
        assert failed["message"].startswith("Exec lifecycle hook ([/bin/sh -c "), failed
        cs = wait_until(f"{name} restarted", restarted, 60, every=0.3)
        assert "terminated" in cs["lastState"], cs
        # the hook never passed: the container never ran as far as the pod says, nor was ready
        # (the pod's phase may say Running after the restart, as the kubelet's does for a
        # container restarting under restartPolicy Always)
        assert "waiting" in states, states
        assert "running" not in states and "ready" not in states, states
        killing = wait_for_event(
            f"{name} Killing",
            control_plane,
            "default",
            name,
            "Killing",
            match=lambda e: e["message"] == "FailedPostStartHook",
            timeout=10,
        )
        assert killing["type"] == "Normal"
        capped = wait_for_event(
            f"{name} GracePeriodCapped",
            control_plane,
            "default",
            name,
            "GracePeriodCapped",
            timeout=10,
        )
        assert capped["type"] == "Normal"
        assert capped["message"] == (
            "terminationGracePeriodSeconds 60 s exceeds the Nomad client's max_kill_timeout "
            "30 s: when stopped, the containers get SIGKILL 30 s after SIGTERM"
        )
    finally:
        kubectl("delete", "pod", name, "--wait=false", check=False)


def test_a_failing_post_start_of_a_never_restarted_pod_kills_the_container_for_good(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    """raw_exec, restartPolicy Never: the kubelet kills the container and does not restart
    it — vkgate SIGTERMs the task (Nomad's signal API), the job's restart policy keeps it
    dead, the pod ends Failed with restartCount 0."""
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:6]
    name = f"hooknever-{tag}"
    doc = _pod(name, gw.node_name, f"/tmp/vkgate-hooks-{tag}")
    doc["spec"]["restartPolicy"] = "Never"
    app = doc["spec"]["containers"][0]
    app["command"] = ["/bin/sh", "-c", "echo main: running; exec sleep 300"]
    app["lifecycle"] = {"postStart": {"exec": {"command": ["/bin/sh", "-c", "exit 3"]}}}
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    try:
        st = wait_until(
            f"{name} Failed",
            lambda: (
                (s := (_get(control_plane, name) or {}).get("status") or {}).get("phase")
                == "Failed"
                and s
            ),
            90,
            every=0.3,
        )
        cs = st["containerStatuses"][0]
        assert cs["restartCount"] == 0, cs
        assert cs["state"]["terminated"]["exitCode"] != 0, cs
        # Events are written after the status (their own queue and budget): wait for it
        wait_for_event(
            f"{name} FailedPostStartHook",
            control_plane,
            "default",
            name,
            "FailedPostStartHook",
            timeout=10,
        )
        # and it stays so: no restart follows.  A restart that does not come has no moment to
        # wait for; only time passing can show it, so: a few seconds, then look again.
        time.sleep(3)
        cs = ((_get(control_plane, name) or {}).get("status") or {})["containerStatuses"][0]
        assert cs["restartCount"] == 0 and "terminated" in cs["state"], cs
    finally:
        kubectl("delete", "pod", name, "--wait=false", check=False)
