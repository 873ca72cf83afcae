"""vkgate in a whole cluster: the real scheduler, controller-manager and metrics-server.

What a platform engineer does with a virtual node, against real binaries only: a Deployment the
scheduler places on the node, scaled up and to zero; a Job that completes on the real Nomad; a
pod with the default ServiceAccount token volume reading its token on Nomad; the node lifecycle
controller reacting when the gateway dies (Unknown, ``unreachable`` taints, evictions) and
recovering when it returns; ``kubectl top`` through metrics-server and the aggregation layer.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from devstack.agent import GatewayProcess
from devstack.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

PROVIDER_TAINT = "virtual-kubelet.io/provider"
TOLERATE_PROVIDER = {"key": PROVIDER_TAINT, "operator": "Exists"}


def nomad_gateway(start: Callable[..., GatewayProcess], agent: Any) -> GatewayProcess:
    return start(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**agent.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )


def script_pod(name: str, ns: str, node_name: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node_name,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "app", "image": "busybox", "command": ["/bin/sh", "-c", script]}
            ],
        },
    }


def owned_jobs(agent: Any, node: str) -> list[dict[str, Any]]:
    """The Nomad jobs vkgate's node ``node`` owns that are not stopped."""
    with agent.http_client() as c:
        stubs = c.get("/v1/jobs", params={"namespace": "*", "meta": "true"}).json()
    return [
        s
        for s in stubs
        if (s.get("Meta") or {}).get("vkgate.node") == node
        and not s.get("Stop")
        and s.get("Status") != "dead"
    ]


def pods(cp: ControlPlane, ns: str, selector: str = "") -> list[dict[str, Any]]:
    q = f"?labelSelector={selector}" if selector else ""
    found = cp.get(f"/api/v1/namespaces/{ns}/pods{q}") or {}
    return list(found.get("items") or [])


def node(cp: ControlPlane, name: str) -> dict[str, Any]:
    found = cp.get(f"/api/v1/nodes/{name}")
    assert found is not None, f"node {name} missing"
    return found


def ready_status(n: dict[str, Any]) -> str:
    for cond in n.get("status", {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return str(cond["status"])
    return ""


def taints(n: dict[str, Any]) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in n.get("spec", {}).get("taints") or []}


@pytest.fixture
def ns(cluster: ControlPlane) -> str:
    name = f"c-{uuid.uuid4().hex[:6]}"
    cluster.api().create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    # pods are admitted once the ServiceAccount controller made `default` here
    wait_until(
        f"ServiceAccount {name}/default",
        lambda: cluster.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
    )
    return name


def deployment(name: str, ns: str, node_name: str, replicas: int, script: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node_name},
                    "tolerations": [TOLERATE_PROVIDER],
                    "terminationGracePeriodSeconds": 3,
                    "containers": [
                        {"name": "app", "image": "busybox", "command": ["/bin/sh", "-c", script]}
                    ],
                },
            },
        },
    }


def test_deployment_is_scheduled_onto_the_node_and_scales_to_zero_on_nomad(
    cluster: ControlPlane,
    cluster_kubectl: Any,
    start_cluster_gateway: Any,
    nomad_agent: Any,
    ns: str,
) -> None:
    gw = nomad_gateway(start_cluster_gateway, nomad_agent)
    # the node lifecycle controller lifts not-ready once the node reports Ready
    wait_until(
        "not-ready taint lifted",
        lambda: (
            ("node.kubernetes.io/not-ready", "NoSchedule")
            not in taints(node(cluster, gw.node_name))
        ),
        timeout=60,
    )
    dep = deployment("web", ns, gw.node_name, 3, "echo started; exec sleep 600")
    cluster_kubectl("apply", "-f", "-", input=json.dumps(dep))

    def three_running() -> bool:
        items = pods(cluster, ns, "app%3Dweb")
        return len(items) == 3 and all(p["status"].get("phase") == "Running" for p in items)

    wait_until("3 replicas Running", three_running, timeout=120)
    for p in pods(cluster, ns, "app%3Dweb"):
        assert p["spec"]["nodeName"] == gw.node_name  # set by kube-scheduler, not by the test
        scheduled = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert scheduled and scheduled[0]["status"] == "True"
    assert len(owned_jobs(nomad_agent, gw.node_name)) == 3

    cluster_kubectl("scale", "deployment/web", "-n", ns, "--replicas=0")
    wait_until("pods gone", lambda: not pods(cluster, ns, "app%3Dweb"), timeout=90)
    wait_until("Nomad jobs gone", lambda: not owned_jobs(nomad_agent, gw.node_name), timeout=30)


def test_job_runs_to_complete_on_nomad(
    cluster: ControlPlane,
    cluster_kubectl: Any,
    start_cluster_gateway: Any,
    nomad_agent: Any,
    ns: str,
) -> None:
    gw = nomad_gateway(start_cluster_gateway, nomad_agent)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once", "namespace": ns},
        "spec": {
            "backoffLimit": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": gw.node_name},
                    "tolerations": [TOLERATE_PROVIDER],
                    "containers": [
                        {
                            "name": "work",
                            "image": "busybox",
                            "command": ["/bin/sh", "-c", "echo computing; sleep 1; echo done"],
                        }
                    ],
                }
            },
        },
    }
    cluster_kubectl("apply", "-f", "-", input=json.dumps(job))

    def complete() -> bool:
        found = cluster.get(f"/apis/batch/v1/namespaces/{ns}/jobs/once") or {}
        conds = found.get("status", {}).get("conditions") or []
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)

    wait_until("Job Complete", complete, timeout=120)
    (pod,) = pods(cluster, ns, "job-name%3Donce")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["nodeName"] == gw.node_name
    logs = cluster_kubectl("logs", "-n", ns, pod["metadata"]["name"]).stdout
    assert logs.splitlines() == ["computing", "done"]


def test_default_service_account_token_volume_is_readable_on_nomad(
    cluster: ControlPlane,
    cluster_kubectl: Any,
    start_cluster_gateway: Any,
    nomad_agent: Any,
    ns: str,
) -> None:
    """ServiceAccount admission adds ``kube-api-access-*`` (token via TokenRequest, ca.crt from
    ``kube-root-ca.crt``, namespace via the downward API), exactly as in a real cluster; raw_exec
    writes volume files under the task's secrets dir (templates/nomad/raw_exec.j2)."""
    gw = nomad_gateway(start_cluster_gateway, nomad_agent)
    script = (
        "d=$(ls -d $NOMAD_SECRETS_DIR/vkgate/kube-api-access-*); "
        "echo token=$(cat $d/token); echo ns=$(cat $d/namespace); "
        "grep -c 'BEGIN CERTIFICATE' $d/ca.crt; exec sleep 600"
    )
    pod = script_pod("reader", ns, gw.node_name, script)
    cluster_kubectl("apply", "-f", "-", input=json.dumps(pod))
    got = cluster.get(f"/api/v1/namespaces/{ns}/pods/reader") or {}
    vols = [v["name"] for v in got["spec"]["volumes"]]
    assert any(v.startswith("kube-api-access-") for v in vols), vols  # admission added it
    logs = wait_until(
        "token in the logs",
        lambda: (
            r.stdout
            if "token=" in (r := cluster_kubectl("logs", "-n", ns, "reader", check=False)).stdout
            else ""
        ),
        timeout=90,
    )
    token = re.search(r"token=(\S+)", logs)
    assert token and token.group(1).count(".") == 2, logs  # a JWT
    claims = json.loads(_b64url(token.group(1).split(".")[1]))
    assert claims["kubernetes.io"]["namespace"] == ns
    assert claims["kubernetes.io"]["serviceaccount"]["name"] == "default"
    assert claims["kubernetes.io"]["pod"]["name"] == "reader"
    assert f"ns={ns}" in logs
    assert re.search(r"^[1-9]\d*$", logs, re.M), logs  # ca.crt holds certificates
    # the token authenticates as the pod's ServiceAccount
    review = cluster.api().request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token.group(1)},
        },
    )
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == f"system:serviceaccount:{ns}:default"
    cluster_kubectl("delete", "pod", "reader", "-n", ns, "--grace-period=0", "--force")
    wait_until("Nomad job gone", lambda: not owned_jobs(nomad_agent, gw.node_name), timeout=60)


def _b64url(part: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _sim_workloads(gw: GatewayProcess) -> dict[str, Any]:
    path = Path(gw.config_path).parent / "simulated-state.json"
    data: dict[str, Any] = json.loads(path.read_text() or "{}") if path.exists() else {}
    return data


@pytest.mark.budget(
    120,
    "the node lifecycle controller's grace period before it marks the node NotReady (~37 s alone)",
)
def test_node_lifecycle_with_the_real_controller(
    cluster: ControlPlane, cluster_kubectl: Any, start_cluster_gateway: Any, ns: str
) -> None:
    # A bystander node stays Ready, as the rest of a real cluster does: with every node of a
    # zone NotReady the controller assumes a control-plane partition ("full disruption") and
    # stops tainting and evicting (docs/design/control-plane.md, "Node lifecycle").
    bystander = start_cluster_gateway()
    gw = start_cluster_gateway()
    name = gw.node_name
    for n in (name, bystander.node_name):
        wait_until(f"{n} Ready", lambda n=n: ready_status(node(cluster, n)) == "True")
    wait_until(
        "only the provider taint left",
        lambda: taints(node(cluster, name)) == {(PROVIDER_TAINT, "NoSchedule")},
        timeout=60,
    )

    def pod(pod_name: str, tolerate_seconds: int | None) -> dict[str, Any]:
        tol: dict[str, Any] = {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
        }
        if tolerate_seconds is not None:
            tol["tolerationSeconds"] = tolerate_seconds
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": ns},
            "spec": {
                "nodeName": name,
                "tolerations": [tol, TOLERATE_PROVIDER],
                "containers": [{"name": "app", "image": "busybox"}],
            },
        }

    for obj in (pod("evicted", 3), pod("stays", None)):
        cluster_kubectl("apply", "-f", "-", input=json.dumps(obj))
    for pod_name in ("evicted", "stays"):
        wait_until(
            f"{pod_name} Running",
            lambda n=pod_name: (
                (cluster.get(f"/api/v1/namespaces/{ns}/pods/{n}") or {})
                .get("status", {})
                .get("phase")
                == "Running"
            ),
        )
    stays_uid = cluster.get(f"/api/v1/namespaces/{ns}/pods/stays")["metadata"]["uid"]  # type: ignore[index]

    gw.kill()  # the agent dies; its Lease stops
    t0 = time.monotonic()
    wait_until("node Unknown", lambda: ready_status(node(cluster, name)) == "Unknown", timeout=90)
    unknown_after = time.monotonic() - t0
    unreachable = {
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoSchedule"),
    }
    seen = wait_until(
        "unreachable taints",
        lambda: (t := taints(node(cluster, name))) >= unreachable and t,
        timeout=30,
    )
    print(f"taints while the gateway is down: {sorted(seen)}")
    wait_until(
        "evicted pod marked for deletion",
        lambda: (
            (cluster.get(f"/api/v1/namespaces/{ns}/pods/evicted") or {})
            .get("metadata", {})
            .get("deletionTimestamp")
        ),
        timeout=60,
    )
    stays = cluster.get(f"/api/v1/namespaces/{ns}/pods/stays") or {}
    assert not stays["metadata"].get("deletionTimestamp")

    gw.start()
    wait_until("node Ready again", lambda: ready_status(node(cluster, name)) == "True", timeout=60)
    wait_until(
        "unreachable taints removed",
        lambda: taints(node(cluster, name)) == {(PROVIDER_TAINT, "NoSchedule")},
        timeout=60,
    )
    wait_until(
        "evicted pod finished",
        lambda: cluster.get(f"/api/v1/namespaces/{ns}/pods/evicted") is None,
        timeout=60,
    )
    state = _sim_workloads(gw)
    pod_uids = {uid for uid, w in state.items() if w["ref"][0] == ns}
    assert stays_uid in state
    assert state[stays_uid]["extra"].get("duplicate_creates") is None
    assert pod_uids == {stays_uid}, "one workload for the surviving pod, none for the evicted"
    print(f"\nnode Unknown {unknown_after:.1f} s after the gateway died")


def test_kubectl_top_shows_numbers_for_idle_and_busy_nomad_pods(
    cluster: ControlPlane,
    cluster_kubectl: Any,
    start_cluster_gateway: Any,
    nomad_agent: Any,
    ns: str,
) -> None:
    gw = nomad_gateway(start_cluster_gateway, nomad_agent)
    scripts = {
        "idle": "exec sleep 600",
        # bounded, so that a failed run cannot leave a core busy for the rest of the tier
        "busy": "end=$(( $(date +%s) + 150 )); while [ $(date +%s) -lt $end ]; do :; done",
    }
    for pod_name, script in scripts.items():
        obj = script_pod(pod_name, ns, gw.node_name, script)
        cluster_kubectl("apply", "-f", "-", input=json.dumps(obj))

    def top_pods() -> dict[str, tuple[int, int]]:
        res = cluster_kubectl("top", "pod", "-n", ns, "--no-headers", check=False)
        found: dict[str, tuple[int, int]] = {}
        for line in res.stdout.splitlines():
            m = re.match(r"^(\S+)\s+(\d+)m\s+(\d+)Mi\s*$", line)
            if m:
                found[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        return found if set(found) == set(scripts) else {}

    found = wait_until("kubectl top pod lists both pods", top_pods, timeout=150, every=3)
    assert found["idle"][1] >= 0 and found["busy"][1] >= 0
    # busy burns CPU (a shell loop): it reads clearly above the idle pod, whose counter only
    # holds its start floor.  The bar is low because a loaded 2-core CI machine shares the core.
    busy = wait_until(
        "busy pod's CPU measured above idle",
        lambda: (t := top_pods()) and t["busy"][0] >= 20 and t["busy"][0] > t["idle"][0],
        timeout=90,
        every=3,
    )
    assert busy
    node_line = wait_until(
        "kubectl top node",
        lambda: next(
            (
                ln
                for ln in cluster_kubectl(
                    "top", "node", gw.node_name, "--no-headers", check=False
                ).stdout.splitlines()
                if ln.startswith(gw.node_name)
            ),
            "",
        ),
        timeout=90,
        every=3,
    )
    assert re.match(rf"^{re.escape(gw.node_name)}\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%", node_line), (
        node_line
    )
    # the Nomad agent is shared by the session: stop the burner before the next test
    cluster_kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force")
    wait_until("Nomad jobs gone", lambda: not owned_jobs(nomad_agent, gw.node_name), timeout=60)
