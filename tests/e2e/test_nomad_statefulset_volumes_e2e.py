"""A StatefulSet on Nomad host volumes (docs/backends/nomad.md, "Persistent volumes").

The whole ``cluster`` (StatefulSet controller, PV binder, scheduler) and the e2e Nomad cluster,
whose client 1 has the host volumes ``HOST_VOLUMES`` (docs/design/nomad.md, "The e2e cluster").
Two ``local`` PersistentVolumes of StorageClass ``nomad-host`` (Immediate binding), annotated
with one host volume each and pre-bound by ``claimRef`` to ``data-<set>-0`` / ``-1``, so replica
N gets host volume N.  On the docker template: stable names, replica 1 created only once
replica 0 runs, and what replica 0 wrote is read back by the pod that replaces it.
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
from devstack.nomad_cluster import HOST_VOLUMES, NomadCluster

pytestmark = pytest.mark.e2e

SCRIPT = (
    'if [ -f /data/first ]; then echo "found $(cat /data/first)"; '
    'else echo "$(date +%s)-$RANDOM" > /data/first; echo "wrote $(cat /data/first)"; fi; '
    "exec sleep 3600"
)


def manifests(name: str, ns: str, node: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "nomad-host"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        }
    ]
    for i, hv in enumerate(HOST_VOLUMES):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "name": f"{name}-{i}",
                    "annotations": {"nomad.vkgate.io/host-volume": hv},
                },
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "nomad-host",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "local": {"path": f"/nomad/host-volume/{hv}"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": [node],
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                    "claimRef": {"namespace": ns, "name": f"data-{name}-{i}"},
                },
            }
        )
    out.append(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": 2,
                "serviceName": name,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "tolerations": [
                            {"key": "virtual-kubelet.io/provider", "operator": "Exists"}
                        ],
                        "terminationGracePeriodSeconds": 2,
                        "containers": [
                            {
                                "name": "db",
                                "image": "busybox:1.36",
                                "command": ["/bin/sh", "-c", SCRIPT],
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            }
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "nomad-host",
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }
                ],
            },
        }
    )
    return out


def pod(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cp.get(f"/api/v1/namespaces/{ns}/pods/{name}") or {}
    return found


def running(cp: ControlPlane, ns: str, name: str, *, not_uid: str = "") -> Callable[[], Any]:
    def check() -> Any:
        p = pod(cp, ns, name)
        ok = (p.get("status") or {}).get("phase") == "Running"
        return ok and (p.get("metadata") or {}).get("uid") != not_uid and p

    return check


def test_statefulset_on_host_volumes_keeps_replica_data_across_a_replacement(
    cluster: ControlPlane,
    cluster_kubectl: Any,
    start_cluster_gateway: Callable[..., GatewayProcess],
    nomad_cluster: NomadCluster,
) -> None:
    tag = uuid.uuid4().hex[:5]
    # Mounting a host volume needs host_volume write (mount-readwrite): the shipped policy's
    # token has it (deploy/nomad/vkgate-policy.hcl, docs/backends/nomad.md "The ACL policy").
    gw = start_cluster_gateway(
        {"backend": {"kind": "nomad", "nomad": nomad_cluster.backend_settings()}}
    )
    wait_until(
        "the node schedulable",
        lambda: (
            not any(
                t["key"] == "node.kubernetes.io/not-ready"
                for t in (
                    (cluster.get(f"/api/v1/nodes/{gw.node_name}") or {}).get("spec") or {}
                ).get("taints")
                or []
            )
        ),
    )
    ns, name = f"sts-{tag}", f"db{tag}"
    cluster_kubectl("create", "namespace", ns)
    wait_until(
        "default SA", lambda: cluster.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default")
    )
    docs = manifests(name, ns, gw.node_name)
    try:
        for doc in docs:
            cluster_kubectl("apply", "-f", "-", input=json.dumps(doc))
        # ordered start: replica 1 exists only once replica 0 runs
        first = wait_until(f"{name}-0 Running", running(cluster, ns, f"{name}-0"), timeout=120)
        assert not pod(cluster, ns, f"{name}-1") or (
            pod(cluster, ns, f"{name}-1")["metadata"]["creationTimestamp"]
            >= first["status"]["startTime"]
        )
        wait_until(f"{name}-1 Running", running(cluster, ns, f"{name}-1"), timeout=120)
        for i in (0, 1):
            claim = (
                cluster.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data-{name}-{i}") or {}
            )
            assert claim["spec"]["volumeName"] == f"{name}-{i}", claim
        logs0 = wait_until(
            "replica 0 wrote",
            lambda: (
                (
                    out := cluster_kubectl("logs", "-n", ns, f"{name}-0", check=False).stdout
                ).startswith("wrote")
                and out
            ),
        )
        written = logs0.split()[1]
        c1 = nomad_cluster.clients[0]
        on_disk = nomad_cluster.workdir / c1.name / "hv" / HOST_VOLUMES[0] / "first"
        assert on_disk.read_text().strip() == written
        logs1 = cluster_kubectl("logs", "-n", ns, f"{name}-1").stdout
        assert logs1.startswith("wrote") and logs1.split()[1] != written
        # replica 0 replaced: same name, new pod, same data
        old_uid = first["metadata"]["uid"]
        cluster_kubectl("delete", "pod", "-n", ns, f"{name}-0", "--wait=true", timeout=90)
        wait_until(
            f"{name}-0 back", running(cluster, ns, f"{name}-0", not_uid=old_uid), timeout=120
        )
        logs = wait_until(
            "replica 0 read its data",
            lambda: (
                (out := cluster_kubectl("logs", "-n", ns, f"{name}-0", check=False).stdout).strip()
                and out
            ),
        )
        print(f"\n{name}-0 after replacement: {logs.strip()}")
        assert logs.strip() == f"found {written}"
    finally:
        cluster_kubectl("delete", "namespace", ns, "--wait=false")
        for i in range(len(HOST_VOLUMES)):
            cluster_kubectl("delete", "pv", f"{name}-{i}", "--wait=false")
