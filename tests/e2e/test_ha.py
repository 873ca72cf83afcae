"""Two ``vkgate run`` processes for one virtual node, on the real API server (docs/design/ha.md):
the standby takes over within 15 s of the leader's ``kill -9`` and adopts its Nomad jobs without
re-submitting any; a paused leader that resumes writes nothing and exits; without HA the second
instance refuses and names the holder."""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from typing import Any

import pytest
from waiting import wait_until

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
WRITE = re.compile(r"HTTP Request: (POST|PUT|PATCH|DELETE) (\S+)")


def holder(cp: Any, node: str) -> str:
    lease = cp.get(f"{LEASES}/vkgate-leader-{node}") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def nomad_jobs(agent: Any) -> dict[str, list[dict[str, Any]]]:
    with agent.http_client() as c:
        stubs = c.get("/v1/jobs", params={"meta": "true"}).json()
    by_uid: dict[str, list[dict[str, Any]]] = {}
    for stub in stubs:
        uid = (stub.get("Meta") or {}).get("k8s.uid")
        if uid and stub.get("Status") != "dead":
            by_uid.setdefault(uid, []).append(stub)
    return by_uid


def pod(name: str, node: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "app", "image": "busybox:1.36", "command": ["/bin/sh", "-c", "sleep 600"]}
            ],
        },
    }


def phases(kubectl: Any, ns: str) -> dict[str, str]:
    items = json.loads(kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    return {i["metadata"]["name"]: i["status"].get("phase", "") for i in items}


def writes_after(text: str, offset: int) -> list[str]:
    return [m.group(0) for m in WRITE.finditer(text[offset:])]


@pytest.fixture
def ns(kubectl: Any) -> Any:
    name = f"ha-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", check=False)


def test_standby_takes_over_within_15s_adopts_and_creates_no_duplicate(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_agent: Any, ns: str
) -> None:
    node = f"vk-ha-{uuid.uuid4().hex[:6]}"
    settings = {
        "ha": {"enabled": True},
        "backend": {
            "kind": "nomad",
            "nomad": {**nomad_agent.backend_settings(), "template": "nomad/raw_exec.j2"},
        },
    }
    a = start_gateway(settings, node_name=node)
    leader = wait_until("a leader", lambda: holder(control_plane, node))
    b = start_gateway(settings, node_name=node, wait=False)
    wait_until("the standby", lambda: "standing by" in b.log_text(), timeout=30)
    assert holder(control_plane, node) == leader

    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "kind": "List",
                "apiVersion": "v1",
                "items": [pod(f"p{i}", node, ns) for i in range(3)],
            }
        ),
    )
    wait_until("3 pods Running", lambda: list(phases(kubectl, ns).values()) == ["Running"] * 3)
    before = nomad_jobs(nomad_agent)
    uids = {
        i["metadata"]["uid"]
        for i in json.loads(kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    }
    assert all(len(before[u]) == 1 for u in uids)
    standby_log_before = len(b.log_text())

    a.kill()  # kill -9
    died = time.monotonic()
    new = wait_until(
        "a new leader",
        lambda: (h := holder(control_plane, node)) != leader and h,
        timeout=30,
        every=0.1,
    )
    took = time.monotonic() - died
    print(f"\ntakeover: Lease held by {new} {took:.1f}s after kill -9 of the leader")
    assert took <= 15, f"takeover took {took:.1f}s"
    # B adopted A's jobs: the same three jobs, none re-submitted, and the pods stay Running.
    wait_until("adoption", lambda: "adopted" in b.log_text()[standby_log_before:], timeout=30)
    # A re-submission after the adoption would be a mistake that has no moment to wait for:
    # give the new leader a few seconds to make it, then look (nothing to observe before).
    time.sleep(3)
    after = nomad_jobs(nomad_agent)
    for u in uids:
        assert len(after[u]) == 1, f"pod {u}: {len(after[u])} jobs"
        assert after[u][0]["CreateIndex"] == before[u][0]["CreateIndex"]
    assert list(phases(kubectl, ns).values()) == ["Running"] * 3
    # The new leader drives the node: a new pod runs.
    kubectl("apply", "-f", "-", input=json.dumps(pod("late", node, ns)))
    wait_until("late Running", lambda: phases(kubectl, ns).get("late") == "Running")


def test_a_paused_leader_that_resumes_writes_nothing_and_exits(
    start_gateway: Any, control_plane: Any
) -> None:
    node = f"vk-ha-{uuid.uuid4().hex[:6]}"
    a = start_gateway({"ha": {"enabled": True}}, node_name=node)
    leader = wait_until("a leader", lambda: holder(control_plane, node))
    b = start_gateway({"ha": {"enabled": True}}, node_name=node, wait=False)
    wait_until("the standby", lambda: "standing by" in b.log_text(), timeout=30)
    a.signal(signal.SIGSTOP)
    try:
        wait_until("takeover", lambda: holder(control_plane, node) not in ("", leader), timeout=30)
        mark = len(a.log_text())
    finally:
        a.signal(signal.SIGCONT)
    assert a.proc is not None
    wait_until("the old leader exits", lambda: not a.alive(), timeout=20)
    assert a.returncode == 1
    text = a.log_text()
    assert "lost leadership" in text[mark:]
    assert writes_after(text, mark) == [], "the deposed leader wrote after it resumed"
    assert holder(control_plane, node) not in ("", leader)


def test_without_ha_a_second_instance_refuses_and_names_the_holder(
    start_gateway: Any, control_plane: Any
) -> None:
    node = f"vk-solo-{uuid.uuid4().hex[:6]}"
    start_gateway(node_name=node)
    first = wait_until("the holder", lambda: holder(control_plane, node))
    second = start_gateway(node_name=node, wait=False)
    wait_until("the second instance exits", lambda: not second.alive(), timeout=30)
    assert second.returncode == 1
    text = second.log_text()
    assert f"node {node} is already driven by {first}" in text, text[-2000:]
    assert writes_after(text, 0) == [], "the refused instance wrote"
    assert holder(control_plane, node) == first
