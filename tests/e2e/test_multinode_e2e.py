"""One ``vkgate run`` serving two virtual nodes (docs/design/multinode.md) against the real
kube-apiserver: each node its own Node, Lease, leader Lease, kubelet port and simulated backend;
pods bound to each reach Running on their node's backend, ``kubectl logs`` reaches each node's
kubelet server through the API server, deletes go through, and both nodes use the one API
client of the process (its own ``vkgate_api_clients`` metric); one node's backend going down
leaves the other serving.  A second test mixes backends: a simulated and a Nomad node in one
process, each pod on its own backend."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from kubeletapi import kubelet_client
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def _pod(name: str, node: str, ns: str, *, script: str = "echo hi") -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {"name": "app", "image": "busybox:1.36", "command": ["sh", "-c", script]}
                ],
            },
        }
    )


def test_one_process_serves_two_nodes(
    start_gateway: Any, control_plane: Any, kubectl: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    names = [f"vk-mn-a-{tag}", f"vk-mn-b-{tag}"]
    states = {n: tmp_path / f"{n}.json" for n in names}
    down = tmp_path / "vk-b-down"  # while it exists, node b's backend fails every call
    entries = [
        {
            "name": n,
            "labels": {"vkgate.test/pool": n[-8:]},
            "backend": {"simulated": {"state_file": str(states[n])}},
        }
        for n in names
    ]
    # per-node settings: node b pings its backend fast and reports it down after one failure
    entries[1].update(ping_interval=0.5, ping_failures=1)
    entries[1]["backend"]["simulated"]["unreachable_file"] = str(down)
    gw = start_gateway({"nodes": entries})
    assert gw.node_names == names
    ports = {n: int(gw.kubelet_settings(n)["port"]) for n in names}
    assert len(set(ports.values())) == 2
    for n in names:
        node = control_plane.get(f"/api/v1/nodes/{n}")
        assert node["metadata"]["labels"]["vkgate.test/pool"] == n[-8:]
        # the API server reaches this node's own kubelet server at this port
        assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == ports[n]
        assert control_plane.get(f"{LEASES}/{n}")["spec"]["holderIdentity"] == n
        assert control_plane.get(f"{LEASES}/vkgate-leader-{n}")["spec"]["holderIdentity"]

    ns = f"mn-{tag}"
    kubectl("create", "namespace", ns)
    pods = {n: f"p-{i}" for i, n in enumerate(names)}
    for n, pod in pods.items():
        kubectl("apply", "-f", "-", input=_pod(pod, n, ns))

    def ready(node: str) -> str:
        conditions = control_plane.get(f"/api/v1/nodes/{node}")["status"]["conditions"]
        return str(next(c["status"] for c in conditions if c["type"] == "Ready"))

    def phase(pod: str) -> str:
        return str(kubectl("get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.phase}").stdout)

    for n, pod in pods.items():
        wait_until(f"{pod} Running on {n}", lambda pod=pod: phase(pod) == "Running")
    # each pod runs on its own node's backend, not the other's
    uids: dict[str, str] = {}
    for n, pod in pods.items():
        uid = uids[n] = kubectl(
            "get", "pod", "-n", ns, pod, "-o", "jsonpath={.metadata.uid}"
        ).stdout
        assert uid
        other = next(m for m in names if m != n)
        assert uid in wait_until(f"{n} state file", lambda n=n: states[n].read_text() or "")
        assert uid not in (states[other].read_text() if states[other].exists() else "")
        # logs: the API server dials the Node's daemonEndpoints port — this node's own
        # kubelet server, which finds the pod in its own cache and backend
        out = wait_until(f"logs of {pod}", lambda pod=pod: kubectl("logs", "-n", ns, pod).stdout)
        assert "hi" in out
        # this node's kubelet port (its own serving certificate) lists its own pod only
        with kubelet_client(gw, control_plane, port=ports[n]) as client:
            listed = client.get("/pods").raise_for_status().json()["items"]
        assert [p["metadata"]["name"] for p in listed] == [pod]

    # the process's own metrics: one API client for both nodes, per-node series labelled
    port = int(gw.settings["kubelet"]["metrics_address"].rsplit(":", 1)[1])
    base = f"http://127.0.0.1:{port}"
    wait_until("ready", lambda: httpx.get(base + "/readyz", trust_env=False).status_code == 200)
    text = httpx.get(base + "/metrics", timeout=5, trust_env=False).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert [s.value for s in fams["vkgate_api_clients"].samples] == [1.0]
    creates = {
        s.labels["node"]
        for s in fams["vkgate_backend_calls"].samples
        if s.labels["operation"] == "create" and s.labels["outcome"] == "ok" and s.value >= 1
    }
    assert creates == set(names)

    # node b's backend goes down: only node b turns NotReady and keeps its pod; node a and
    # the process go on, and new pods on node a still start
    down.touch()
    wait_until("node b NotReady", lambda: ready(names[1]) == "False")
    assert ready(names[0]) == "True"
    # the process's log says which node's backend failed
    failed = [line for line in gw.log_text().splitlines() if "unreachable" in line]
    assert failed and all(f"[{names[1]}]" in line for line in failed), failed[:5]
    probe = httpx.get(base + "/readyz", trust_env=False)
    assert probe.status_code == 503
    assert names[1] in probe.text and names[0] not in probe.text
    kubectl("apply", "-f", "-", input=_pod("p-late", names[0], ns))
    wait_until("p-late Running on node a", lambda: phase("p-late") == "Running")
    assert phase(pods[names[1]]) == "Running"  # kept, not failed or deleted
    assert gw.alive()
    down.unlink()
    wait_until("node b Ready again", lambda: ready(names[1]) == "True")
    wait_until("ready", lambda: httpx.get(base + "/readyz", trust_env=False).status_code == 200)

    kubectl("delete", "pod", "-n", ns, *pods.values(), "p-late", "--timeout=60s")
    for n in names:
        assert control_plane.get(f"/api/v1/namespaces/{ns}/pods/{pods[n]}") is None
        wait_until(
            f"{n}'s backend forgets its pod", lambda n=n: uids[n] not in states[n].read_text()
        )
    assert gw.alive()
    gw.stop()
    assert gw.returncode == 0
    for n in names:  # the clean stop hands every leader Lease over
        assert control_plane.get(f"{LEASES}/vkgate-leader-{n}")["spec"].get("holderIdentity") in (
            "",
            None,
        )
    kubectl("delete", "namespace", ns, "--wait=false")
    for n in names:
        kubectl("delete", "node", n, "--wait=false", check=False)


def _nomad_jobs(agent: Any) -> dict[str, str]:
    """k8s.uid → job ID of every job vkgate submitted to the Nomad agent."""
    with agent.http_client() as client:
        stubs = client.get("/v1/jobs", params={"meta": "true"}).raise_for_status().json()
    return {(s.get("Meta") or {}).get("k8s.uid", ""): s["ID"] for s in stubs}


def test_one_process_serves_a_simulated_and_a_nomad_node(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_agent: Any
) -> None:
    tag = uuid.uuid4().hex[:6]
    sim, nmd = f"vk-mn-sim-{tag}", f"vk-mn-nomad-{tag}"
    gw = start_gateway(
        {
            "nodes": [
                {"name": sim},
                {
                    "name": nmd,
                    "backend": {
                        "kind": "nomad",
                        "nomad": {
                            **nomad_agent.backend_settings(),
                            "template": "nomad/raw_exec.j2",
                        },
                    },
                },
            ]
        }
    )
    assert gw.node_names == [sim, nmd]
    taints = {
        n: control_plane.get(f"/api/v1/nodes/{n}")["spec"]["taints"][0]["value"] for n in (sim, nmd)
    }
    assert taints == {sim: "simulated", nmd: "nomad"}  # each node says which backend it runs on
    ns = f"mn-{tag}"
    kubectl("create", "namespace", ns)
    kubectl("apply", "-f", "-", input=_pod("on-sim", sim, ns))
    kubectl("apply", "-f", "-", input=_pod("on-nomad", nmd, ns))

    def field(pod: str, path: str) -> str:
        return str(kubectl("get", "pod", "-n", ns, pod, "-o", f"jsonpath={path}").stdout)

    for pod in ("on-sim", "on-nomad"):
        wait_until(f"{pod} Running", lambda pod=pod: field(pod, "{.status.phase}") == "Running")
    uid_sim, uid_nomad = field("on-sim", "{.metadata.uid}"), field("on-nomad", "{.metadata.uid}")
    jobs = _nomad_jobs(nomad_agent)
    assert uid_nomad in jobs and uid_sim not in jobs  # only the Nomad node's pod is a Nomad job
    out = wait_until("nomad logs", lambda: kubectl("logs", "-n", ns, "on-nomad").stdout)
    assert out.strip() == "hi"  # through the API server, node b's kubelet port, Nomad's logs API
    assert "hi" in wait_until("sim logs", lambda: kubectl("logs", "-n", ns, "on-sim").stdout)

    kubectl("delete", "pod", "-n", ns, "on-sim", "on-nomad", "--timeout=90s")
    wait_until("the Nomad job purged", lambda: uid_nomad not in _nomad_jobs(nomad_agent))
    gw.stop()
    assert gw.returncode == 0
    kubectl("delete", "namespace", ns, "--wait=false")
    for n in (sim, nmd):
        kubectl("delete", "node", n, "--wait=false", check=False)


def test_a_standby_process_takes_over_every_node_of_a_killed_leader(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_agent: Any
) -> None:
    """Leader election per node, all or nothing (docs/design/multinode.md): a second process
    for the same two Nomad nodes (one Nomad agent: each node owns only its own jobs) stands by;
    after ``kill -9`` of the first it takes every node's leader Lease, serves every node's
    kubelet API and adopts the jobs without re-submitting any."""
    tag = uuid.uuid4().hex[:6]
    names = [f"vk-mn-ha-a-{tag}", f"vk-mn-ha-b-{tag}"]
    backend = {
        "kind": "nomad",
        "nomad": {**nomad_agent.backend_settings(), "template": "nomad/raw_exec.j2"},
    }
    settings = {"ha": {"enabled": True}, "nodes": [{"name": n, "backend": backend} for n in names]}

    def holders() -> dict[str, str]:
        leases = {n: control_plane.get(f"{LEASES}/vkgate-leader-{n}") or {} for n in names}
        return {
            n: str((lease.get("spec") or {}).get("holderIdentity") or "")
            for n, lease in leases.items()
        }

    first = start_gateway(settings)
    leader = holders()
    assert len(set(leader.values())) == 1 and all(leader.values())  # one process leads both
    second = start_gateway(settings, wait=False)
    wait_until("the standby", lambda: "standing by" in second.log_text(), timeout=30)
    ns = f"mn-ha-{tag}"
    kubectl("create", "namespace", ns)
    pods = {n: f"p-{i}" for i, n in enumerate(names)}
    for n, pod in pods.items():
        kubectl("apply", "-f", "-", input=_pod(pod, n, ns, script="echo hi; sleep 600"))

    def field(pod: str, path: str) -> str:
        return str(kubectl("get", "pod", "-n", ns, pod, "-o", f"jsonpath={path}").stdout)

    for pod in pods.values():
        wait_until(f"{pod} Running", lambda pod=pod: field(pod, "{.status.phase}") == "Running")
    uids = {n: field(pods[n], "{.metadata.uid}") for n in names}
    jobs = _nomad_jobs(nomad_agent)
    before = {n: jobs[uids[n]] for n in names}
    assert holders() == leader

    first.kill()
    new = wait_until(
        "the standby leads both nodes",
        lambda: (h := holders()) and all(v and v not in leader.values() for v in h.values()) and h,
        timeout=40,
    )
    assert len(set(new.values())) == 1  # the same (second) process leads both
    for n in names:
        port = int(second.kubelet_settings(n)["port"])

        def endpoint(n: str = n) -> int:
            status = control_plane.get(f"/api/v1/nodes/{n}")["status"]
            return int(status["daemonEndpoints"]["kubeletEndpoint"]["Port"])

        wait_until(
            f"{n} served by the standby's kubelet port", lambda port=port: endpoint() == port
        )
        out = wait_until(
            f"logs of {pods[n]}", lambda n=n: kubectl("logs", "-n", ns, pods[n], check=False).stdout
        )
        assert out.strip() == "hi"
    # adopted: the same job per pod, none re-submitted, and still Running
    after = _nomad_jobs(nomad_agent)
    assert {n: after.get(uids[n]) for n in names} == before
    assert all(field(p, "{.status.phase}") == "Running" for p in pods.values())
    kubectl("delete", "pod", "-n", ns, *pods.values(), "--timeout=90s")
    second.stop()
    assert second.returncode == 0
    kubectl("delete", "namespace", ns, "--wait=false")
    for n in names:
        kubectl("delete", "node", n, "--wait=false", check=False)
