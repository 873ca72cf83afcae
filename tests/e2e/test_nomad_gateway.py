"""vkgate with the Nomad backend, end to end: real kube-apiserver + real Nomad + ``vkgate run``.

Pods are created with kubectl (``nodeName`` set: the devstack has no scheduler) and observed
only through the API server — phases, container states, restart counts, the node's capacity,
``kubectl logs``/``kubectl exec`` — plus Nomad's own API to check what happened there.  The
raw_exec template runs the container command directly on the dev agent.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from nomadfree import free_for
from waiting import wait_for_event, wait_until

from vkgate_core.quantity import cpu_millis, parse_quantity

pytestmark = pytest.mark.e2e


#: This file's waits: polling every 0.2 s (waiting.wait_until: 60 s, every 0.3 s).
POLL = 0.2


def pod_manifest(
    name: str,
    node: str,
    script: str,
    *,
    namespace: str = "default",
    policy: str = "Never",
    cpu: str | None = None,
) -> str:
    container: dict[str, Any] = {
        "name": "app",
        "image": "busybox:1.36",
        "command": ["/bin/sh", "-c", script],
    }
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeName": node,
                "restartPolicy": policy,
                "terminationGracePeriodSeconds": 3,
                "tolerations": [{"operator": "Exists"}],
                "containers": [container],
            },
        }
    )


def nomad(agent: Any, path: str, **params: Any) -> Any:
    with agent.http_client() as c:
        r = c.get("/v1" + path, params=params)
        return r.json() if r.status_code == 200 else None


def job_of(agent: Any, uid: str) -> dict[str, Any] | None:
    for stub in nomad(agent, "/jobs", meta="true") or []:
        if (stub.get("Meta") or {}).get("k8s.uid") == uid:
            found: dict[str, Any] = stub
            return found
    return None


@pytest.fixture
def gateway(start_gateway: Any, nomad_agent: Any) -> Any:
    return start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {
                    **nomad_agent.backend_settings(),
                    "template": "nomad/raw_exec.j2",
                    "restart_delay": "1s",
                    "restart_attempts": 5,
                    "restart_interval": "1m",
                },
            },
        }
    )


def get_pod(cp: Any, name: str, namespace: str = "default") -> dict[str, Any]:
    found: dict[str, Any] = cp.get(f"/api/v1/namespaces/{namespace}/pods/{name}") or {}
    return found


def test_pod_lifecycle_through_the_gateway(
    control_plane: Any, kubectl: Any, nomad_agent: Any, gateway: Any
) -> None:
    node = gateway.node_name
    tag = uuid.uuid4().hex[:5]
    ok, bad, loop = f"ok-{tag}", f"bad-{tag}", f"loop-{tag}"
    kubectl("apply", "-f", "-", input=pod_manifest(ok, node, "echo hello from nomad; exit 0"))
    kubectl("apply", "-f", "-", input=pod_manifest(bad, node, "echo failing; exit 3"))
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_manifest(loop, node, "echo again; sleep 0.3; exit 1", policy="Always"),
    )

    # exit 0 → Succeeded
    p = wait_until(
        f"{ok} Succeeded",
        lambda: (
            (q := get_pod(control_plane, ok)).get("status", {}).get("phase") == "Succeeded" and q
        ),
        every=POLL,
    )
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert p["status"]["containerStatuses"][0]["containerID"].startswith("nomad://")
    # hostIP is the address of the Nomad client the allocation runs on (one of two).
    job = job_of(nomad_agent, p["metadata"]["uid"])
    assert job is not None
    alloc = nomad(nomad_agent, f"/job/{job['ID']}/allocations")[0]
    client = nomad(nomad_agent, f"/node/{alloc['NodeID']}")
    assert p["status"]["hostIP"] == client["Attributes"]["unique.network.ip-address"]
    assert p["status"]["hostIP"] in {c.ip for c in nomad_agent.clients}

    # exit 3 under Never → Failed with exit code 3
    p = wait_until(
        f"{bad} Failed",
        lambda: (q := get_pod(control_plane, bad)).get("status", {}).get("phase") == "Failed" and q,
        every=POLL,
    )
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3

    # Always → restarts, restartCount grows, the pod stays Running
    def restarts() -> int:
        st = get_pod(control_plane, loop).get("status", {})
        cs = (st.get("containerStatuses") or [{}])[0]
        return int(cs.get("restartCount", 0)) if st.get("phase") == "Running" else 0

    wait_until(f"{loop} restartCount >= 2", lambda: restarts() >= 2, timeout=60, every=POLL)
    first = restarts()
    wait_until(f"{loop} restartCount grows", lambda: restarts() > first, timeout=60, every=POLL)

    # deleting the pod stops and purges the job
    job = job_of(nomad_agent, get_pod(control_plane, loop)["metadata"]["uid"])
    assert job is not None
    kubectl("delete", "pod", loop, "--wait=false")
    wait_until(
        f"{loop} gone from the API",
        lambda: not get_pod(control_plane, loop),
        timeout=60,
        every=POLL,
    )
    wait_until(
        f"job {job['ID']} purged",
        lambda: nomad(nomad_agent, f"/job/{job['ID']}") is None,
        timeout=60,
        every=POLL,
    )
    kubectl("delete", "pod", ok, bad, "--wait=true", timeout=90)


def test_a_deleted_pod_stays_terminating_while_its_purged_jobs_task_handles_sigterm(
    control_plane: Any, kubectl: Any, nomad_agent: Any, gateway: Any
) -> None:
    """A delete purges the job at once (one Nomad request), but the kubelet's order holds:
    the task gets SIGTERM and takes 2 s to exit, and for those seconds the job is gone from
    Nomad while the pod is still there, Terminating, its container not yet terminated; the
    pod goes only once the task ended (docs/design/nomad.md, "Delete")."""
    name = f"sigterm-{uuid.uuid4().hex[:6]}"
    script = "trap 'sleep 2; exit 0' TERM; while true; do sleep 0.2; done"
    kubectl("apply", "-f", "-", input=pod_manifest(name, gateway.node_name, script))
    p = wait_until(
        f"{name} Running",
        lambda: (
            (q := get_pod(control_plane, name)).get("status", {}).get("phase") == "Running" and q
        ),
        every=POLL,
    )
    job = job_of(nomad_agent, p["metadata"]["uid"])
    assert job is not None
    t0 = time.monotonic()
    kubectl("delete", "pod", name, "--wait=false")
    wait_until(
        f"job {job['ID']} purged",
        lambda: nomad(nomad_agent, f"/job/{job['ID']}") is None,
        10,
        every=POLL,
    )
    purged = time.monotonic() - t0
    # Nomad still lists the stopping allocation under the purged job's ID; the deregister's
    # evaluation marks it ``stop`` a moment after the purge answered (CI once read ``run``)
    wait_until(
        f"job {job['ID']}'s allocation desired stop",
        lambda: (
            [a["DesiredStatus"] for a in nomad(nomad_agent, f"/job/{job['ID']}/allocations") or []]
            == ["stop"]
        ),
        10,
        every=POLL,
    )
    p = get_pod(control_plane, name)
    assert p and p["metadata"].get("deletionTimestamp"), p
    state = p["status"]["containerStatuses"][0]["state"]
    assert "terminated" not in state, (purged, state)  # the SIGTERM handler still runs
    wait_until(f"{name} gone", lambda: not get_pod(control_plane, name), timeout=30, every=POLL)
    took = time.monotonic() - t0
    print(f"\njob purged after {purged:.1f}s, pod gone after {took:.1f}s")
    assert took >= 2.0, took  # not before the task's SIGTERM handler ended


def test_unschedulable_pod_shows_nomads_placement_reason(
    control_plane: Any, kubectl: Any, gateway: Any, nomad_agent: Any
) -> None:
    """More CPU than any Nomad client has (3 cores; each client of the e2e cluster has 2)."""
    name = f"huge-{uuid.uuid4().hex[:5]}"
    kubectl("apply", "-f", "-", input=pod_manifest(name, gateway.node_name, "echo", cpu="3"))

    def unschedulable() -> Any:
        st = get_pod(control_plane, name).get("status", {})
        return st.get("reason") == "Unschedulable" and st

    try:
        st = wait_until(f"{name} Unschedulable", unschedulable, every=POLL)
    except AssertionError as exc:
        # what Nomad did with the job: its evaluations (status, blocked, FailedTGAllocs)
        evals = [
            {k: e.get(k) for k in ("ID", "Status", "TriggeredBy", "BlockedEval", "FailedTGAllocs")}
            for e in nomad_agent.get("/v1/evaluations?namespace=default") or []
            if str(e.get("JobID", "")).startswith(f"default-{name}-")
        ]
        pod = get_pod(control_plane, name).get("status", {})
        raise AssertionError(f"{exc}; pod status: {pod}; nomad evaluations: {evals}") from None
    print(f"\n{name}: {st['phase']} {st['reason']}: {st['message']}")
    assert st["phase"] == "Pending"
    assert 'Dimension "cpu" exhausted' in st["message"]
    kubectl("delete", "pod", name, "--wait=false")


def test_node_capacity_equals_nomad(control_plane: Any, nomad_agent: Any, gateway: Any) -> None:
    """The Node advertises what Nomad leaves free for it: the default pool's clients minus
    reserved minus what other jobs hold (tests/e2e/nomadfree.py)."""

    def agreed() -> Any:
        cap = (
            (control_plane.get(f"/api/v1/nodes/{gateway.node_name}") or {})
            .get("status", {})
            .get("capacity")
        )
        free = free_for(nomad_agent, gateway.node_name)
        if not cap:
            return None
        want = int(free.shares * 1000 // (free.total_shares / free.cores))
        ok = cpu_millis(cap["cpu"]) == want and parse_quantity(cap["memory"]) == (
            free.memory_mb * 2**20
        )
        return (cap, free) if ok else None

    cap, free = wait_until(
        "node capacity equal to what Nomad leaves free", agreed, timeout=60, every=POLL
    )
    print(f"\nNomad {free} → node capacity {cap}")
    assert cap["pods"] == "110"


def test_kubectl_logs_and_exec_reach_the_nomad_task(
    control_plane: Any, kubectl: Any, gateway: Any
) -> None:
    name = f"talk-{uuid.uuid4().hex[:5]}"
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_manifest(name, gateway.node_name, "echo hello from nomad; exec sleep 300"),
    )
    wait_until(
        f"{name} Running",
        lambda: get_pod(control_plane, name).get("status", {}).get("phase") == "Running",
        every=POLL,
    )
    # the kubelet API is served: a refused connection fails here (KubectlError, with stderr)
    logs = kubectl("logs", name, timeout=30)
    assert logs.stdout == "hello from nomad\n"
    out = kubectl(
        "exec", name, "--", "/bin/sh", "-c", "echo inside; exit 5", check=False, timeout=30
    )
    assert out.stdout == "inside\n"
    assert out.returncode == 5
    kubectl("delete", "pod", name, "--wait=false")


def test_status_latency_via_the_event_stream(
    control_plane: Any, kubectl: Any, nomad_agent: Any, gateway: Any
) -> None:
    """From Nomad's change (task exit stamped by the Nomad client; the server's commit of the
    allocation update) to the pod status in the API server, observed with a 20 ms poll."""
    samples = []
    for _ in range(3):
        name = f"lat-{uuid.uuid4().hex[:5]}"
        kubectl("apply", "-f", "-", input=pod_manifest(name, gateway.node_name, "sleep 2; exit 0"))

        def phase(n: str = name) -> str:
            return str(get_pod(control_plane, n).get("status", {}).get("phase", ""))

        def succeeded_at() -> float | None:
            return time.time() if phase() == "Succeeded" else None

        wait_until(f"{name} Running", lambda: phase() == "Running", every=0.05)
        seen = wait_until(f"{name} Succeeded", succeeded_at, every=0.02)
        uid = get_pod(control_plane, name)["metadata"]["uid"]
        job = job_of(nomad_agent, uid)
        assert job is not None
        alloc = nomad(nomad_agent, f"/job/{job['ID']}/allocations")[0]
        exited = (
            next(
                e["Time"] for e in alloc["TaskStates"]["app"]["Events"] if e["Type"] == "Terminated"
            )
            / 1e9
        )
        samples.append((seen - exited, seen - alloc["ModifyTime"] / 1e9))
        kubectl("delete", "pod", name, "--wait=false")
    for end_to_end, from_server in samples:
        print(
            f"\nlatency to the pod status in the API server: task exit → {end_to_end * 1000:.0f} ms,"
            f" Nomad server commit → {from_server * 1000:.0f} ms"
        )
    assert max(e for e, _ in samples) < 2.0


def test_a_job_purged_outside_vkgate_is_run_again_without_waiting_for_a_list(
    control_plane: Any, kubectl: Any, nomad_agent: Any, start_gateway: Any
) -> None:
    """With the event stream up the agent lists Nomad only every
    ``pods.streamed_reconcile_interval``; a job purged by someone else still comes back within
    seconds: Nomad 1.6.3 reports the purge only as a ``job-deregister`` evaluation on the
    stream, which vkgate checks with one job read (docs/design/nomad.md, "Change feed at
    rest").  Both list intervals are 60 s here, so only the stream can be this quick."""
    gw = start_gateway(
        {
            "pods": {"reconcile_interval": 60, "streamed_reconcile_interval": 60},
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_agent.backend_settings(), "template": "nomad/raw_exec.j2"},
            },
        }
    )
    name = f"purged-{uuid.uuid4().hex[:5]}"
    kubectl(
        "apply", "-f", "-", input=pod_manifest(name, gw.node_name, "sleep 3600", policy="Always")
    )
    wait_until(
        f"{name} Running",
        lambda: get_pod(control_plane, name).get("status", {}).get("phase") == "Running",
        every=POLL,
    )
    uid = get_pod(control_plane, name)["metadata"]["uid"]
    job = job_of(nomad_agent, uid)
    assert job is not None
    # Past VANISH_GRACE (5 s, gateway/pods/controller.py): a deletion right after a create is
    # left to the list.  That grace runs on the agent's clock from its own submission and
    # nothing it exposes says when it is over, so: the time, with a second to spare.
    time.sleep(6)
    with nomad_agent.http_client() as c:
        assert c.delete(f"/v1/job/{job['ID']}", params={"purge": "true"}).status_code == 200
    purged = time.monotonic()
    again = wait_until(
        "a new job for the pod",
        lambda: (j := job_of(nomad_agent, uid)) and j["CreateIndex"] > job["CreateIndex"] and j,
        timeout=30,
        every=POLL,
    )
    took = time.monotonic() - purged
    assert again["ID"] == job["ID"]
    assert took < 15, f"run again after {took:.1f} s: that was a list, not the stream"
    # Events are written after the status (their own queue and budget): wait for it
    wait_for_event(
        "the pod's WorkloadLost Event",
        control_plane,
        "default",
        name,
        "WorkloadLost",
        timeout=15,
        every=POLL,
    )
    # one loss, one restart: the purged job's allocation, still listed under the job's ID, is
    # not a run of the new job (docs/design/nomad.md, "Run again")
    status = wait_until(
        f"{name} Running again",
        lambda: (
            (s := get_pod(control_plane, name).get("status", {})).get("phase") == "Running"
            and all(c.get("ready") for c in s.get("containerStatuses") or [{}])
            and s
        ),
        every=POLL,
    )
    assert [c["restartCount"] for c in status["containerStatuses"]] == [1]
    print(f"\npurged job run again after {took:.1f} s")
    kubectl("delete", "pod", name, "--wait=true", timeout=90)
