"""The kubelet's restart backoff and a stalled rollout on Nomad (raw_exec; docs/design/probes.md,
"Restart backoff"):

* a container that crashes at once restarts in place with the default restart block — 10 s
  (+ Nomad's jitter) twice, then a wait no longer than the kubelet's 5 min cap — and shows
  ``CrashLoopBackOff`` with the kubelet's message and Nomad's real delay in between, a
  ``restartCount`` counting the restarts made and the last exit in ``lastState``;
* a Deployment (2 replicas, readinessProbe) rolled to a version whose probe always fails
  stalls: ``kubectl rollout status`` times out, the old ReplicaSet keeps its 2 ready pods (and
  the Service's EndpointSlice lists them ready), the new pod is ``Ready=False``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Kubectl
from waiting import wait_for_event, wait_until

from devstack.agent import GatewayProcess
from devstack.controlplane import ControlPlane
from devstack.nomad_cluster import NomadCluster

pytestmark = pytest.mark.e2e

NS = 1e9
_BACKOFF = re.compile(r"^back-off (?:(\d+)m)?(\d+)s restarting failed container=app pod=(.+)$")


def _raw_exec(cluster: NomadCluster) -> dict[str, Any]:
    return {
        "backend": {
            "kind": "nomad",
            "nomad": {**cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
        }
    }


def _seconds(message: str) -> tuple[int, str] | None:
    """(delay seconds, pod words) of the kubelet's CrashLoopBackOff message."""
    m = _BACKOFF.match(message)
    return (int(m[1] or 0) * 60 + int(m[2]), m[3]) if m else None


def test_a_crashing_container_backs_off_in_crashloopbackoff(
    start_gateway: Any, control_plane: ControlPlane, kubectl: Kubectl, nomad_cluster: NomadCluster
) -> None:
    gw = start_gateway(_raw_exec(nomad_cluster))
    name = f"crashloop-{uuid.uuid4().hex[:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": gw.node_name,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "app", "image": "busybox:1.36", "command": ["/bin/sh", "-c", "exit 3"]}
            ],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(pod))
    t0 = time.monotonic()
    #: every distinct (restartCount, state, waiting message) vkgate wrote, with its time
    seen: list[tuple[float, int, str, str]] = []
    phases: set[str] = set()

    def look() -> dict[str, Any] | None:
        found = control_plane.get(f"/api/v1/namespaces/default/pods/{name}") or {}
        st = found.get("status") or {}
        phases.add(str(st.get("phase")))
        for cs in st.get("containerStatuses") or []:
            state = cs.get("state") or {}
            kind = next(iter(state), "")
            msg = str((state.get("waiting") or {}).get("message", ""))
            row = (round(time.monotonic() - t0, 1), int(cs.get("restartCount", 0)), kind, msg)
            if not seen or seen[-1][1:] != row[1:]:
                seen.append(row)
            parsed = _seconds(msg)
            # the stall: after the 2 quick restarts Nomad waits for the interval's end
            if cs.get("restartCount", 0) >= 2 and parsed and parsed[0] > 60:
                return {"pod": found, "status": cs}
        return None

    try:
        got = wait_until(f"{name}: 2 restarts, then the long back-off", look, 120, every=0.3)
    finally:
        print("\nvkgate wrote (s, restartCount, state, waiting message):")
        print("\n".join(map(str, seen)))
    uid = got["pod"]["metadata"]["uid"]
    cs = got["status"]
    try:
        assert phases <= {"Pending", "Running", "None"}, phases  # never Failed
        assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert cs["lastState"]["terminated"]["exitCode"] == 3
        assert cs["lastState"]["terminated"]["reason"] == "Error"
        # restartCount counts the restarts made (the kubelet's), never going back
        counts = [r[1] for r in seen]
        assert counts == sorted(counts) and counts[-1] == 2, seen
        waits = [(r[1], _seconds(r[3])) for r in seen if r[2] == "waiting" and _seconds(r[3])]
        assert {p for _, (_, p) in waits} == {f"{name}_default({uid})"}, waits
        quick = [s for c, (s, _) in waits if c < 2]
        (stall,) = [s for c, (s, _) in waits if c == 2]
        # 10 s + Nomad's jitter (< 25 %) twice, written as the kubelet writes durations
        assert quick and all(10 <= s <= 12 for s in quick), waits
        # then a wait no longer than the kubelet's cap (320 s interval, minus what has run)
        assert 240 < stall <= 300, waits
        backoff = wait_for_event(
            "BackOff Event", control_plane, "default", name, "BackOff", timeout=30
        )
        assert backoff["type"] == "Warning", backoff

        # Nomad's own record of the same runs: restarted in place, 10-12.5 s after each exit
        alloc_id = cs["containerID"].removeprefix("nomad://").split("/")[0]
        alloc = nomad_cluster.get(f"/v1/allocation/{alloc_id}")
        events = alloc["TaskStates"]["app"]["Events"]
        times = [(e["Type"], e["Time"] / NS) for e in events]
        starts = [t for k, t in times if k == "Started"]
        ends = [t for k, t in times if k == "Terminated"]
        delays = [e["StartDelay"] / NS for e in events if e["Type"] == "Restarting"]
        assert len(starts) == 3 and len(ends) == 3 and len(delays) == 3, times
        gaps = [round(s - e, 2) for e, s in zip(ends, starts[1:], strict=False)]
        print(f"Nomad: Restarting delays {[round(d, 2) for d in delays]} s, exit→start {gaps} s")
        assert all(10 <= d < 12.5 for d in delays[:2]), delays
        assert all(10 <= g < 12.5 + 1.5 for g in gaps), gaps
        assert 240 < delays[2] <= 300, delays
        assert len(nomad_cluster.get(f"/v1/job/{alloc['JobID']}/allocations")) == 1
    finally:
        kubectl("delete", "pod", name, "--wait=false", check=False)


# --------------------------------------------------------------------------- rollout stall


def _node_ready_for_scheduling(
    cp: ControlPlane, start: Callable[..., GatewayProcess], s: Any
) -> Any:
    gw = start(s)

    def untainted() -> bool:
        node = cp.get(f"/api/v1/nodes/{gw.node_name}") or {}
        taints = {(t["key"], t["effect"]) for t in (node.get("spec") or {}).get("taints") or []}
        return ("node.kubernetes.io/not-ready", "NoSchedule") not in taints

    wait_until(f"{gw.node_name}: not-ready taint lifted", untainted, timeout=60)
    return gw


def _deployment(name: str, ns: str, node: str, probe: list[str], version: str) -> str:
    labels = {"app": name}
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "tolerations": [
                            {"key": "virtual-kubelet.io/provider", "operator": "Exists"}
                        ],
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "web",
                                "image": "busybox:1.36",
                                "command": ["/bin/sh", "-c", "exec sleep 3600"],
                                "env": [{"name": "VERSION", "value": version}],
                                "readinessProbe": {
                                    "exec": {"command": probe},
                                    "periodSeconds": 1,
                                    "failureThreshold": 1,
                                },
                            }
                        ],
                    },
                },
            },
        }
    )


def _ready(pod: dict[str, Any]) -> dict[str, Any]:
    return next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {}
    )


def test_a_rollout_to_a_never_ready_version_stalls_while_the_old_pods_serve(
    cluster: ControlPlane,
    cluster_kubectl: Kubectl,
    start_cluster_gateway: Any,
    nomad_cluster: NomadCluster,
) -> None:
    kubectl = cluster_kubectl
    ns = f"r-{uuid.uuid4().hex[:6]}"
    cluster.api().create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    gw = _node_ready_for_scheduling(cluster, start_cluster_gateway, _raw_exec(nomad_cluster))
    name = "web"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }

    def pods() -> list[dict[str, Any]]:
        found = cluster.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{name}") or {}
        return list(found.get("items") or [])

    def replicasets() -> dict[str, dict[str, Any]]:
        found = cluster.get(f"/apis/apps/v1/namespaces/{ns}/replicasets") or {}
        return {
            rs["metadata"]["labels"]["pod-template-hash"]: rs for rs in found.get("items") or []
        }

    def endpoints() -> dict[str, bool]:
        """Pod name → ready, as the Service's EndpointSlices list them."""
        sel = urllib.parse.quote(f"kubernetes.io/service-name={name}")
        found = cluster.get(
            f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector={sel}"
        )
        return {
            e["targetRef"]["name"]: bool((e.get("conditions") or {}).get("ready"))
            for s in (found or {}).get("items") or []
            for e in s.get("endpoints") or []
            if e.get("targetRef")
        }

    try:
        kubectl("apply", "-f", "-", input=json.dumps(service))
        kubectl("apply", "-f", "-", input=_deployment(name, ns, gw.node_name, ["/bin/true"], "1"))
        kubectl("rollout", "status", f"deployment/{name}", "-n", ns, "--timeout=150s", timeout=160)
        old = {p["metadata"]["name"]: p for p in pods()}
        assert len(old) == 2 and all(_ready(p)["status"] == "True" for p in old.values()), old
        (old_hash,) = replicasets()
        became_ready = {n: _ready(p)["lastTransitionTime"] for n, p in old.items()}
        wait_until("both old pods ready endpoints", lambda: endpoints() == dict.fromkeys(old, True))

        # v2: its readinessProbe always fails
        kubectl("apply", "-f", "-", input=_deployment(name, ns, gw.node_name, ["/bin/false"], "2"))

        def new_pod() -> dict[str, Any] | None:
            for p in pods():
                if (
                    p["metadata"]["name"] not in old
                    and (p.get("status") or {}).get("phase") == "Running"
                ):
                    return p
            return None

        new = wait_until("the v2 pod Running", new_pod, timeout=90)
        new_name = new["metadata"]["name"]
        started = time.monotonic()
        out = kubectl(
            "rollout",
            "status",
            f"deployment/{name}",
            "-n",
            ns,
            "--timeout=25s",
            check=False,
            timeout=60,
        )
        took = time.monotonic() - started
        print(
            f"\nkubectl rollout status (exit {out.returncode}, {took:.1f} s):\n{out.stdout}{out.stderr}"
        )
        assert out.returncode != 0 and "timed out" in out.stderr, out
        assert took >= 25, took
        assert "1 out of 2 new replicas have been updated" in out.stdout, out.stdout

        # the new pod: Running, never Ready
        new = next(p for p in pods() if p["metadata"]["name"] == new_name)
        assert _ready(new)["status"] == "False", new["status"]
        (cs,) = new["status"]["containerStatuses"]
        assert cs["ready"] is False and "running" in cs["state"], cs
        unhealthy = wait_for_event(
            "Unhealthy Event of the v2 pod", cluster, ns, new_name, "Unhealthy", timeout=30
        )
        assert unhealthy["message"].startswith("Readiness probe failed"), unhealthy
        # the old ReplicaSet keeps its 2 ready replicas; the old pods never left Ready
        sets = replicasets()
        assert sets[old_hash]["status"].get("readyReplicas") == 2, sets[old_hash]["status"]
        (new_hash,) = set(sets) - {old_hash}
        assert not sets[new_hash]["status"].get("readyReplicas"), sets[new_hash]["status"]
        now = {p["metadata"]["name"]: p for p in pods()}
        for n, at in became_ready.items():
            assert _ready(now[n]) == {**_ready(now[n]), "status": "True", "lastTransitionTime": at}
        # and the Service sends traffic to the old pods only
        wanted = {**dict.fromkeys(old, True), new_name: False}
        wait_until("endpoints: old ready, new not ready", lambda: endpoints() == wanted, 30)
        deployment = cluster.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
        dst = deployment["status"]
        assert (dst.get("readyReplicas"), dst.get("updatedReplicas")) == (2, 1), dst
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
