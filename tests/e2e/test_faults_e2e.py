"""Fault injection on the real stack (kube-apiserver + etcd + a Nomad dev agent of its own):
each fault ends with Kubernetes semantics intact — no pod Failed while its workload lives or
must run again, exactly one workload per pod — and prints how long convergence took
(docs/design/backend-faults.md has the measured numbers).  Bounded: ≤ 40 pods per test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from waiting import wait_until

from devstack.agent import GatewayProcess
from devstack.controlplane import launch_control_plane
from devstack.nomad import NomadAgent, launch_nomad

pytestmark = pytest.mark.e2e


#: This file's waits: up to 90 s, polling every 0.5 s (waiting.wait_until: 60 s, every 0.3 s).
WAIT = 90.0
POLL = 0.5


def pod(
    ns: str, name: str, node: str, policy: str = "Always", seconds: int = 3600
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node,
            "restartPolicy": policy,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "app", "image": "busybox:1.36", "command": ["sleep", str(seconds)]}
            ],
        },
    }


def apply(kubectl: Any, *objs: dict[str, Any]) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}),
    )


def pods(kubectl: Any, ns: str) -> dict[str, dict[str, Any]]:
    out = kubectl("get", "pods", "-n", ns, "-o", "json", check=False)
    if out.returncode != 0:
        return {}
    return {p["metadata"]["name"]: p for p in json.loads(out.stdout)["items"]}


def running_and_ready(p: dict[str, Any]) -> bool:
    st = p.get("status") or {}
    return st.get("phase") == "Running" and all(
        c.get("ready") for c in st.get("containerStatuses") or [{}]
    )


def jobs_per_uid(agent: NomadAgent) -> Counter[str]:
    """Live (not stopped) Nomad jobs per pod UID."""
    with httpx.Client(base_url=agent.address, timeout=10) as c:
        stubs = c.get("/v1/jobs", params={"namespace": "*", "meta": "true"}).json()
    return Counter(
        (s.get("Meta") or {}).get("k8s.uid", "")
        for s in stubs
        if not s.get("Stop") and (s.get("Meta") or {}).get("k8s.uid")
    )


@pytest.fixture
def own_nomad() -> Iterator[NomadAgent]:
    """A Nomad dev agent for this test alone: it is frozen, killed and restarted."""
    agent = launch_nomad()
    try:
        yield agent
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(agent.pid, signal.SIGCONT)
        agent.stop()


@pytest.fixture
def ns(kubectl: Any) -> Iterator[str]:
    name = f"faults-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def nomad_gateway(start_gateway: Any, agent: NomadAgent, **pods_settings: Any) -> GatewayProcess:
    gw: GatewayProcess = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {
                    "address": agent.address,
                    "template": "nomad/raw_exec.j2",
                    # small tasks: the dev node's CPU must hold every pod of a burst
                    "default_cpu": "10m",
                    "default_memory": "16Mi",
                },
            },
            "pods": {"reconcile_interval": 1.0, **pods_settings},
            "node": {"ping_interval": 1.0, "ping_timeout": 1.0, "ping_failures": 2},
        }
    )
    return gw


def test_nomad_state_loss_reruns_always_and_onfailure_fails_never(
    start_gateway: Any, kubectl: Any, ns: str, own_nomad: NomadAgent
) -> None:
    """kill -9 of the dev agent and a restart: every job is gone.  Always and OnFailure pods run
    again (one new job each, restartCount 1, still Running); the Never pod ends Failed."""
    gw = nomad_gateway(start_gateway, own_nomad)
    policies = {"a0": "Always", "a1": "Always", "a2": "Always", "f0": "OnFailure", "n0": "Never"}
    apply(kubectl, *[pod(ns, n, gw.node_name, p) for n, p in policies.items()])
    wait_until(
        "all Running",
        lambda: (
            all(running_and_ready(p) for p in pods(kubectl, ns).values())
            and len(pods(kubectl, ns)) == 5
        ),
        timeout=WAIT,
        every=POLL,
    )
    uids = {n: p["metadata"]["uid"] for n, p in pods(kubectl, ns).items()}
    t0 = time.monotonic()
    back = own_nomad.restart_after_crash()

    def converged() -> bool:
        now = pods(kubectl, ns)
        rerun = all(
            running_and_ready(now[n])
            and now[n]["status"]["containerStatuses"][0]["restartCount"] == 1
            for n in ("a0", "a1", "a2", "f0")
        )
        never = now["n0"]["status"]
        return rerun and never.get("phase") == "Failed" and never.get("reason") == "NotFound"

    try:
        wait_until(
            "Always/OnFailure Running again, Never Failed", converged, timeout=120, every=POLL
        )
    except AssertionError as exc:
        seen = {
            n: (
                p["status"].get("phase"),
                p["status"].get("reason"),
                [
                    (c.get("restartCount"), c.get("ready"), c.get("state"))
                    for c in p["status"].get("containerStatuses") or []
                ],
            )
            for n, p in pods(kubectl, ns).items()
        }
        raise AssertionError(
            f"{exc}; pods: {seen}; jobs per pod: {jobs_per_uid(own_nomad)}"
        ) from None
    took = time.monotonic() - t0
    jobs = jobs_per_uid(own_nomad)
    assert {uids[n]: jobs[uids[n]] for n in ("a0", "a1", "a2", "f0")} == {
        uids[n]: 1 for n in ("a0", "a1", "a2", "f0")
    }
    assert jobs[uids["n0"]] == 0
    never = pods(kubectl, ns)["n0"]["status"]
    assert "restartPolicy Never" in never["message"]

    def lost() -> set[str]:
        events = json.loads(kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
        return {e["involvedObject"].get("name") for e in events if e["reason"] == "WorkloadLost"}

    # Events are written after the status (their own queue and budget): wait for all four
    wait_until(
        "WorkloadLost on a0, a1, a2, f0", lambda: lost() >= {"a0", "a1", "a2", "f0"}, 15, every=POLL
    )
    assert lost() == {"a0", "a1", "a2", "f0"}
    print(
        f"\nnomad kill -9 + restart (state lost): nomad ready after {back:.1f}s, "
        f"pods converged {took:.1f}s after the kill"
    )


@pytest.mark.budget(
    150,
    "Nomad frozen long enough for vkgate's backend calls to time out and back off (~55 s alone)",
)
def test_nomad_freeze_never_fails_a_pod_whose_job_lives(
    start_gateway: Any, kubectl: Any, ns: str, own_nomad: NomadAgent
) -> None:
    """SIGSTOP the agent long enough for the node to go NotReady and its allocations to be
    lost; after SIGCONT Nomad reschedules.  No Always pod is ever Failed, all end Running."""
    gw = nomad_gateway(start_gateway, own_nomad)
    names = [f"s{i}" for i in range(6)]
    apply(kubectl, *[pod(ns, n, gw.node_name) for n in names])
    wait_until(
        "all Running",
        lambda: (
            len(pods(kubectl, ns)) == 6
            and all(running_and_ready(p) for p in pods(kubectl, ns).values())
        ),
        timeout=WAIT,
        every=POLL,
    )
    failed: set[str] = set()
    not_ready_at: float | None = None
    os.kill(own_nomad.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 40:
            failed |= {
                n for n, p in pods(kubectl, ns).items() if p["status"].get("phase") == "Failed"
            }
            node = json.loads(kubectl("get", "node", gw.node_name, "-o", "json").stdout)
            ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
            if ready["status"] != "True" and not_ready_at is None:
                not_ready_at = time.monotonic() - t0
            time.sleep(1)
    finally:
        os.kill(own_nomad.pid, signal.SIGCONT)
    resumed = time.monotonic()

    def settled() -> bool:
        nonlocal failed
        now = pods(kubectl, ns)
        failed |= {n for n, p in now.items() if p["status"].get("phase") == "Failed"}
        return all(running_and_ready(p) for p in now.values())

    wait_until("all Running and Ready after the resume", settled, timeout=150, every=1)
    took = time.monotonic() - resumed
    # a few more reconciles: nothing flips to Failed later either
    end = time.monotonic() + 10
    while time.monotonic() < end:
        settled()
        time.sleep(1)
    assert failed == set()
    uids = {p["metadata"]["uid"] for p in pods(kubectl, ns).values()}
    jobs = jobs_per_uid(own_nomad)
    assert {u: jobs[u] for u in uids} == dict.fromkeys(uids, 1)
    print(
        f"\nnomad SIGSTOP 40s: node NotReady after "
        f"{not_ready_at if not_ready_at is None else round(not_ready_at, 1)}s; "
        f"all pods Running+Ready {took:.1f}s after SIGCONT; none Failed"
    )


def test_gateway_kill_mid_burst_on_nomad_one_job_per_pod(
    start_gateway: Any, kubectl: Any, ns: str, own_nomad: NomadAgent
) -> None:
    gw = nomad_gateway(start_gateway, own_nomad, workers=5)
    n = 24
    apply(kubectl, *[pod(ns, f"b{i:02d}", gw.node_name) for i in range(n)])
    wait_until(
        "some jobs exist",
        lambda: sum(jobs_per_uid(own_nomad).values()) >= 6,
        every=0.1,
        timeout=WAIT,
    )
    at_crash = sum(jobs_per_uid(own_nomad).values())
    gw.kill()
    t0 = time.monotonic()
    gw.start()
    wait_until(
        "all Running",
        lambda: (
            len(pods(kubectl, ns)) == n
            and all(running_and_ready(p) for p in pods(kubectl, ns).values())
        ),
        timeout=180,
        every=1,
    )
    took = time.monotonic() - t0
    uids = {p["metadata"]["uid"] for p in pods(kubectl, ns).values()}
    jobs = jobs_per_uid(own_nomad)
    assert set(jobs) >= uids
    assert {u: jobs[u] for u in uids} == dict.fromkeys(uids, 1)
    print(
        f"\ngateway kill -9 mid-burst (nomad): {at_crash}/{n} jobs at the crash; "
        f"all Running {took:.1f}s after the restart; one job per pod"
    )


def compact_etcd(etcd_url: str) -> None:
    """Compact etcd at its current revision (what kube-apiserver does every 5 minutes), so a
    watch from an older resourceVersion gets 410 Gone."""
    with httpx.Client(base_url=etcd_url, timeout=10) as c:
        head = c.post("/v3/kv/range", json={"key": "Lw=="}).json()["header"]
        c.post(
            "/v3/kv/compaction", json={"revision": head["revision"], "physical": True}
        ).raise_for_status()


def simulated_workloads(gw: GatewayProcess) -> dict[str, Any]:
    path = Path(gw.config_path).parent / "simulated-state.json"
    data: dict[str, Any] = json.loads(path.read_text() or "{}") if path.exists() else {}
    return data


def test_apiserver_kill_mid_burst_and_watch_expiry_with_deletes(
    tmp_path: Path, kubectl_path: Path
) -> None:
    """A control plane of its own.  kill -9 of kube-apiserver mid-burst: every pod ends
    Running with exactly one workload.  Then the gateway is frozen, pods are deleted, and the
    API server restarts (its watch cache starts over: the gateway's resourceVersion is too old,
    410): after the resume the gateway relists and removes exactly the deleted pods' workloads."""
    from conftest import make_kubectl  # the e2e conftest, on sys.path under pytest

    cp = launch_control_plane(workdir=tmp_path / "cp")
    gw = GatewayProcess(cp, tmp_path / "gw", {"pods": {"reconcile_interval": 1.0}})
    try:
        kubectl = make_kubectl(cp, kubectl_path)
        kubectl("create", "namespace", "burst")
        gw.start()
        n = 40
        apply(kubectl, *[pod("burst", f"p{i:02d}", gw.node_name) for i in range(n)])
        wait_until(
            "some workloads", lambda: len(simulated_workloads(gw)) >= 8, every=0.05, timeout=WAIT
        )
        at_crash = len(simulated_workloads(gw))
        t0 = time.monotonic()
        back = cp.restart_apiserver_after_crash(down=3.0)
        wait_until(
            "all Running",
            lambda: (
                len(pods(kubectl, "burst")) == n
                and all(running_and_ready(p) for p in pods(kubectl, "burst").values())
            ),
            timeout=180,
            every=1,
        )
        took = time.monotonic() - t0
        uids = {p["metadata"]["uid"] for p in pods(kubectl, "burst").values()}
        state = simulated_workloads(gw)
        assert set(state) == uids
        assert not any(r["extra"].get("duplicate_creates") for r in state.values())

        # watch expiry with deletes while disconnected
        gone = {n: p["metadata"]["uid"] for n, p in pods(kubectl, "burst").items() if n < "p10"}
        assert gw.proc is not None
        os.kill(gw.proc.pid, signal.SIGSTOP)
        try:
            kubectl("delete", "pod", "-n", "burst", *gone, "--grace-period=0", "--force")
            for i in range(30):  # move resourceVersions on
                kubectl("create", "configmap", f"churn-{i}", "-n", "burst")
            compact_etcd(cp.etcd_url)  # the gateway's resourceVersion is history now
            cp.restart_apiserver_after_crash()
        finally:
            os.kill(gw.proc.pid, signal.SIGCONT)
        t1 = time.monotonic()
        wait_until(
            "the deleted pods' workloads removed",
            lambda: not (set(gone.values()) & set(simulated_workloads(gw))),
            timeout=120,
            every=POLL,
        )
        took_watch = time.monotonic() - t1
        assert set(simulated_workloads(gw)) == uids - set(gone.values())
        # whether the re-watch met a 410 depends on when the watch came back (seen both ways)
        relisted = "resourceVersion too old" in gw.log_text()
        print(
            f"\nkube-apiserver kill -9 mid-burst: {at_crash}/{n} workloads at the crash, "
            f"API server ready {back:.1f}s after the restart, all {n} Running {took:.1f}s after "
            f"the kill, one workload each; watch expiry (etcd compacted; 410 and relist: {relisted}) with {len(gone)} deletes "
            f"while frozen: "
            f"workloads removed {took_watch:.1f}s after the resume"
        )
    finally:
        gw.stop(timeout=15)
        print(gw.log_text()[-3000:])
        cp.stop()
