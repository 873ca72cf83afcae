"""Scheduling intent through the real kube-scheduler and Nomad (docs/backends/nomad.md,
"Scheduling: affinity, spread and priority").

The whole ``cluster`` places each pod on the virtual node (a nodeSelector on its hostname, a key
outside the key map: not forwarded); the gateway's jobs use Nomad's ``all`` node pool, so both
e2e clients (``meta.vkgate-client`` c1 / c2; docs/design/nomad.md, "The e2e cluster") are
candidates and only the forwarded rule decides where each pod lands:

- required ``NotIn [c1]`` on ``meta.nomad.vkgate.io/vkgate-client`` → client 2 (the virtual node
  has no such label, so Kubernetes' own ``NotIn`` holds too);
- preferred ``In [c2]`` (weight 100) → Nomad scores client 2 up (a preference, not a rule);
- required ``NotIn [c1, c2]`` → no client: Pending, reason Unschedulable with Nomad's words;
- ``priorityClassName`` of value 10⁹ → the job's Priority is ``max_priority``;
- ``topologySpreadConstraints`` DoNotSchedule → refused naming the field.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from waiting import wait_until

from devstack.agent import GatewayProcess
from devstack.controlplane import ControlPlane
from devstack.nomad_cluster import NomadCluster

pytestmark = pytest.mark.e2e

CLIENT_KEY = "meta.nomad.vkgate.io/vkgate-client"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


def pod(name: str, node: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists"}],
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "app", "image": "busybox", "command": ["/bin/sh", "-c", "sleep 300"]}
            ],
            **spec,
        },
    }


def required(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}


def status(cp: ControlPlane, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (cp.get(f"/api/v1/namespaces/default/pods/{name}") or {}).get(
        "status", {}
    )
    return found


def job_of(nomad: NomadCluster, cp: ControlPlane, name: str) -> dict[str, Any] | None:
    uid = (cp.get(f"/api/v1/namespaces/default/pods/{name}") or {}).get("metadata", {}).get("uid")
    with nomad.http_client() as c:
        for stub in c.get("/v1/jobs", params={"namespace": "*", "meta": "true"}).json():
            if (stub.get("Meta") or {}).get("k8s.uid") == uid:
                job: dict[str, Any] = c.get(
                    f"/v1/job/{stub['ID']}", params={"namespace": stub["Namespace"]}
                ).json()
                return job
    return None


def running(cp: ControlPlane, name: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        st = status(cp, name)
        return st if st.get("phase") == "Running" else None

    return check


def client_ip(nomad: NomadCluster, job: dict[str, Any]) -> str:
    allocs = nomad.get(f"/v1/job/{job['ID']}/allocations?namespace={job['Namespace']}")
    running = [a for a in allocs if a["ClientStatus"] == "running"]
    ip: str = nomad.get(f"/v1/node/{running[0]['NodeID']}")["Attributes"][
        "unique.network.ip-address"
    ]
    return ip


def preference_scores(nomad: NomadCluster, job: dict[str, Any]) -> dict[str, float]:
    """Node ID → the "node-affinity" score Nomad gave it when placing the job's allocation."""
    allocs = nomad.get(f"/v1/job/{job['ID']}/allocations?namespace={job['Namespace']}")
    alloc = nomad.get(f"/v1/allocation/{allocs[0]['ID']}?namespace={job['Namespace']}")
    return {
        m["NodeID"]: float((m.get("Scores") or {}).get("node-affinity", 0.0))
        for m in (alloc.get("Metrics") or {}).get("ScoreMetaData") or []
    }


def test_scheduling_rules_place_pods_on_the_nomad_client_they_name(
    cluster: ControlPlane,
    cluster_kubectl: Any,
    start_cluster_gateway: Callable[..., GatewayProcess],
    nomad_cluster: NomadCluster,
) -> None:
    settings = {
        "backend": {
            "kind": "nomad",
            "nomad": {
                **nomad_cluster.backend_settings(),
                "template": "nomad/raw_exec.j2",
                "node_pool": "all",
                "priority": 50,
                "max_priority": 80,
            },
        }
    }
    gw = start_cluster_gateway(settings)
    wait_until(
        "the node schedulable",
        lambda: (
            not any(
                t["key"] == "node.kubernetes.io/not-ready"
                for t in (cluster.get(f"/api/v1/nodes/{gw.node_name}") or {})
                .get("spec", {})
                .get("taints")
                or []
            )
        ),
    )
    tag = uuid.uuid4().hex[:5]
    prio = f"vk-high-{tag}"
    cluster_kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": prio},
                "value": 1_000_000_000,
            }
        ),
    )
    not_c1 = {"key": CLIENT_KEY, "operator": "NotIn", "values": ["c1"]}
    pods = {
        f"req-c2-{tag}": pod(f"req-c2-{tag}", gw.node_name, affinity=required(not_c1)),
        f"pref-c2-{tag}": pod(
            f"pref-c2-{tag}",
            gw.node_name,
            priorityClassName=prio,
            affinity={
                "nodeAffinity": {
                    PREF: [
                        {
                            "weight": 100,
                            "preference": {
                                "matchExpressions": [
                                    {"key": CLIENT_KEY, "operator": "In", "values": ["c2"]}
                                ]
                            },
                        }
                    ]
                }
            },
        ),
        f"nowhere-{tag}": pod(
            f"nowhere-{tag}",
            gw.node_name,
            affinity=required({"key": CLIENT_KEY, "operator": "NotIn", "values": ["c1", "c2"]}),
        ),
        f"spread-{tag}": pod(
            f"spread-{tag}",
            gw.node_name,
            topologySpreadConstraints=[
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "x"}},
                }
            ],
        ),
    }
    for manifest in pods.values():
        cluster_kubectl("apply", "-f", "-", input=json.dumps(manifest))
    c2 = nomad_cluster.clients[1]
    try:
        for name in (f"req-c2-{tag}", f"pref-c2-{tag}"):
            st = wait_until(
                f"{name} Running",
                running(cluster, name),
                timeout=90,
            )
            job = job_of(nomad_cluster, cluster, name)
            assert job is not None
            assert job["NodePool"] == "all"
            assert st["hostIP"] == client_ip(nomad_cluster, job)
            if name.startswith("req-"):  # a rule: it must hold
                assert st["hostIP"] == c2.ip, (name, st)
        # A preference is a score, not a rule (in Kubernetes as in Nomad): Nomad's binpacking
        # may still favour the busier client 1.  What must hold is that Nomad scored it.
        job = job_of(nomad_cluster, cluster, f"pref-c2-{tag}")
        assert job is not None
        scores = preference_scores(nomad_cluster, job)
        c2_id = nomad_cluster.node_of(c2)["ID"]
        assert scores.get(c2_id, 0) > 0 and all(v <= 0 for k, v in scores.items() if k != c2_id)
        assert job["Priority"] == 80
        assert job["Affinities"][0]["Weight"] == 100
        req = job_of(nomad_cluster, cluster, f"req-c2-{tag}")
        assert req is not None and req["Priority"] == 50
        assert {"LTarget": "${meta.vkgate-client}", "RTarget": "c1", "Operand": "!="} in [
            {k: c[k] for k in ("LTarget", "RTarget", "Operand")} for c in req["Constraints"]
        ]
        st = wait_until(
            "nowhere Unschedulable",
            lambda: (s := status(cluster, f"nowhere-{tag}")).get("reason") == "Unschedulable" and s,
            timeout=90,
        )
        print(f"\nnowhere: {st['phase']} {st['reason']}: {st['message']}")
        assert st["phase"] == "Pending"
        assert "${meta.vkgate-client}" in st["message"] and "excluded by filter" in st["message"]
        st = wait_until(
            "spread refused",
            lambda: (s := status(cluster, f"spread-{tag}")).get("reason") and s,
            timeout=60,
        )
        print(f"spread: {st['phase']} {st['reason']}: {st['message']}")
        assert "spec.topologySpreadConstraints[0]" in st["message"]
        assert "DoNotSchedule" in st["message"]
    finally:
        cluster_kubectl("delete", "pod", *pods, "--wait=false")
        cluster_kubectl("delete", "priorityclass", prio, "--wait=false")
