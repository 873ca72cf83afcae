"""vkgate on Nomad as production runs it (docs/design/nomad.md, "The e2e cluster"): two clients,
ACLs with the shipped policy, mutual TLS, namespaces.

Every test here runs a real gateway against the e2e cluster — one server, clients
198.51.100.21 (default pool, class-a) and 198.51.100.22 (pool-b, class-b) — with the token
minted from deploy/nomad/vkgate-policy.hcl.  The management token is used only by the test to
set up and to check.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from waiting import wait_until

from devstack.nomad_cluster import POLICY_FILE, NomadCluster, apply_policy
from vkgate_core.quantity import cpu_millis, parse_quantity


def _pod(
    name: str,
    node: str,
    *,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    command: str = "exec sleep 300",
) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": annotations or {},
            },
            "spec": {
                "nodeName": node,
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 2,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c", command],
                        "env": [
                            {
                                "name": "MY_POD_IP",
                                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                            }
                        ],
                    }
                ],
            },
        }
    )


def _gateway(start_gateway: Any, cluster: NomadCluster, **nomad: Any) -> Any:
    return start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {
                    **cluster.backend_settings(),
                    "template": "nomad/raw_exec.j2",
                    **nomad,
                },
            }
        }
    )


def _pod_status(cp: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (cp.get(f"/api/v1/namespaces/{namespace}/pods/{name}") or {}).get(
        "status", {}
    )
    return found


def _running(cp: Any, namespace: str, name: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        st = _pod_status(cp, namespace, name)
        return st if st.get("phase") == "Running" and st.get("podIP") else None

    return check


def _job_of(cluster: NomadCluster, uid: str) -> dict[str, Any] | None:
    with cluster.http_client() as c:
        for stub in c.get("/v1/jobs", params={"namespace": "*", "meta": "true"}).json():
            if (stub.get("Meta") or {}).get("k8s.uid") == uid:
                r = c.get(f"/v1/job/{stub['ID']}", params={"namespace": stub["Namespace"]})
                if r.status_code == 404:
                    return None  # purged between the list and the read (Nomad: "job not found")
                r.raise_for_status()
                job: dict[str, Any] = r.json()
                return job
    return None


def _alloc_client_ip(cluster: NomadCluster, job: dict[str, Any]) -> str:
    allocs = cluster.get(f"/v1/job/{job['ID']}/allocations?namespace={job['Namespace']}")
    running = [a for a in allocs if a["ClientStatus"] == "running"]
    node = cluster.get(f"/v1/node/{running[0]['NodeID']}")
    ip: str = node["Attributes"]["unique.network.ip-address"]
    return ip


def test_pods_land_on_both_clients_and_carry_their_clients_address(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    gw = _gateway(start_gateway, nomad_cluster, node_pools=["pool-b"])
    tag = uuid.uuid4().hex[:5]
    a, b = f"on-c1-{tag}", f"on-c2-{tag}"
    kubectl("apply", "-f", "-", input=_pod(a, gw.node_name))
    kubectl(
        "apply",
        "-f",
        "-",
        input=_pod(b, gw.node_name, annotations={"vkgate.io/nomad-node-pool": "pool-b"}),
    )
    c1, c2 = nomad_cluster.clients
    try:
        for name, client in ((a, c1), (b, c2)):
            st = wait_until(f"{name} Running", _running(control_plane, "default", name))
            assert st["hostIP"] == st["podIP"] == client.ip, st
            assert st["podIPs"] == [{"ip": client.ip}]
            assert st["hostIPs"] == [{"ip": client.ip}]
            pod = control_plane.get(f"/api/v1/namespaces/default/pods/{name}")
            job = _job_of(nomad_cluster, pod["metadata"]["uid"])
            assert job is not None
            assert _alloc_client_ip(nomad_cluster, job) == client.ip
            assert job["NodePool"] == ("pool-b" if client is c2 else "default")
        # The Node names itself, never one of the Nomad clients.
        node = control_plane.get(f"/api/v1/nodes/{gw.node_name}")
        addresses = node["status"]["addresses"]
        assert {"type": "Hostname", "address": gw.node_name} in addresses
        names = {c.name for c in nomad_cluster.clients} | {c.ip for c in nomad_cluster.clients}
        assert not names & {x["address"] for x in addresses}, addresses
    finally:
        kubectl("delete", "pod", a, b, "--wait=false", check=False)


def _capacity(cp: Any, node: str) -> tuple[int, int]:
    cap = (cp.get(f"/api/v1/nodes/{node}") or {}).get("status", {}).get("capacity") or {}
    if "cpu" not in cap:
        return (-1, -1)
    return cpu_millis(cap["cpu"]), int(parse_quantity(cap["memory"]))


def _foreign_job(job_id: str) -> dict[str, Any]:
    """A job that is not vkgate's: 500 MHz / 256 MB on client 1."""
    return {
        "Job": {
            "ID": job_id,
            "Name": job_id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "Constraints": [{"LTarget": "${meta.vkgate-client}", "RTarget": "c1", "Operand": "="}],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 1,
                    "EphemeralDisk": {"SizeMB": 150},
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "raw_exec",
                            "Config": {"command": "/bin/sh", "args": ["-c", "exec sleep 600"]},
                            "Resources": {"CPU": 500, "MemoryMB": 256},
                        }
                    ],
                }
            ],
        }
    }


def test_capacity_is_what_other_jobs_leave_free(
    start_gateway: Any, control_plane: Any, nomad_cluster: NomadCluster
) -> None:
    """Capacity = the eligible clients minus what other Nomad jobs hold: a foreign job of
    500 MHz / 256 MB takes exactly 500m / 256Mi from the node (1,000 MHz per core here) and
    gives them back when it is purged."""
    gw = _gateway(start_gateway, nomad_cluster, mhz_per_core=1000)
    before = wait_until(
        "node capacity", lambda: (c := _capacity(control_plane, gw.node_name))[0] > 0 and c
    )
    job_id = f"foreign-{uuid.uuid4().hex[:6]}"
    nomad_cluster.request("POST", "/v1/jobs", body=_foreign_job(job_id))
    try:
        wait_until(
            "the foreign job's allocation running",
            lambda: any(
                a["ClientStatus"] == "running"
                for a in nomad_cluster.get(f"/v1/job/{job_id}/allocations")
            ),
        )
        held = wait_until(
            "capacity lowered by the foreign job",
            lambda: (c := _capacity(control_plane, gw.node_name)) != before and c,
            timeout=30,
        )
        assert before[0] - held[0] == 500, (before, held)
        assert before[1] - held[1] == 256 * 2**20, (before, held)
    finally:
        nomad_cluster.request("DELETE", f"/v1/job/{job_id}?purge=true")
    wait_until(
        "capacity back after the purge",
        lambda: _capacity(control_plane, gw.node_name) == before,
        timeout=30,
    )


def _policy_with_namespace(namespace: str) -> str:
    """The shipped policy with its namespace block repeated for ``namespace``, as the policy
    file says to do for every namespace vkgate uses."""
    text = POLICY_FILE.read_text()
    block = re.search(r'namespace "default" \{.*?\n\}\n', text, re.S)
    assert block is not None, "the shipped policy has no default namespace block"
    return text + "\n" + block.group(0).replace('"default"', f'"{namespace}"')


def test_pod_namespaces_map_to_nomad_namespaces(
    start_gateway: Any, control_plane: Any, kubectl: Any, nomad_cluster: NomadCluster
) -> None:
    ns = f"team-{uuid.uuid4().hex[:4]}"
    nomad_cluster.request("POST", f"/v1/namespace/{ns}", body={"Name": ns})
    token = apply_policy(
        nomad_cluster.local_address,
        nomad_cluster.tls,
        nomad_cluster.management_token,
        _policy_with_namespace(ns),
        name=f"vkgate-{ns}",
    )
    kubectl("create", "namespace", ns)
    kubectl("create", "namespace", f"{ns}-z")
    gw = _gateway(
        start_gateway,
        nomad_cluster,
        token=token,
        namespaces=[ns],
        namespace_from_pod="same",
    )
    try:
        kubectl("apply", "-f", "-", input=_pod("mapped", gw.node_name, namespace=ns))
        kubectl("apply", "-f", "-", input=_pod("unmapped", gw.node_name, namespace=f"{ns}-z"))
        wait_until("the mapped pod Running", _running(control_plane, ns, "mapped"))
        pod = control_plane.get(f"/api/v1/namespaces/{ns}/pods/mapped")
        job = _job_of(nomad_cluster, pod["metadata"]["uid"])
        assert job is not None and job["Namespace"] == ns
        refused = wait_until(
            "the unmapped pod refused",
            lambda: (
                (st := _pod_status(control_plane, f"{ns}-z", "unmapped")).get("reason")
                == "TranslationFailed"
                and st
            ),
        )
        assert f"Nomad namespace '{ns}-z'" in refused["message"], refused
        assert "namespace_from_pod" in refused["message"], refused
        kubectl("delete", "pod", "mapped", "-n", ns, "--wait=false")
        wait_until(
            "the mapped pod's job stopped",
            lambda: (j := _job_of(nomad_cluster, pod["metadata"]["uid"])) is None or j["Stop"],
            timeout=60,
        )
    finally:
        # (this cluster runs no namespace controller: delete the pods, then the namespaces)
        kubectl("delete", "pod", "--all", "-n", ns, "--wait=false", check=False)
        kubectl("delete", "pod", "--all", "-n", f"{ns}-z", "--wait=false", check=False)
        kubectl("delete", "namespace", ns, f"{ns}-z", "--wait=false", check=False)


def _node_ready(cp: Any, node: str) -> dict[str, Any] | None:
    for cond in (cp.get(f"/api/v1/nodes/{node}") or {}).get("status", {}).get("conditions", []):
        if cond["type"] == "Ready":
            found: dict[str, Any] = cond
            return found
    return None


def test_a_wrong_ca_is_one_line_and_the_node_not_ready(
    start_gateway: Any, control_plane: Any, nomad_cluster: NomadCluster, tmp_path: Any
) -> None:
    from devstack.certs import new_ca

    other = new_ca(tmp_path, "other-ca", "not the nomad CA").files.cert
    gw = _gateway(start_gateway, nomad_cluster, ca_cert=str(other))
    ready = wait_until(
        "Node Ready=False naming the TLS failure",
        lambda: (c := _node_ready(control_plane, gw.node_name)) and c["status"] == "False" and c,
        timeout=60,
    )
    assert nomad_cluster.address in ready["message"], ready
    assert "certificate verify failed" in ready["message"], ready
    # What the agent does while the backend stays unreachable: a fixed window in which the
    # TLS failures logged are counted (a hot loop has no end state to wait for).
    time.sleep(10)
    log = gw.log_text()
    assert "Traceback" not in log
    attempts = log.count("certificate verify failed")
    assert attempts <= 12, f"{attempts} TLS failures logged in ~10 s: a hot loop"


def test_a_missing_capability_is_named_and_the_node_not_ready(
    start_gateway: Any, control_plane: Any, nomad_cluster: NomadCluster
) -> None:
    """The guide's old grant list (no list-jobs): the Node is NotReady and says what is missing."""
    narrowed = POLICY_FILE.read_text().replace('"list-jobs",', "")
    assert narrowed != POLICY_FILE.read_text()
    token = apply_policy(
        nomad_cluster.local_address,
        nomad_cluster.tls,
        nomad_cluster.management_token,
        narrowed,
        name="vkgate-no-list-jobs",
    )
    gw = _gateway(start_gateway, nomad_cluster, token=token)
    ready = wait_until(
        "Node Ready=False naming list-jobs",
        lambda: (c := _node_ready(control_plane, gw.node_name)) and c["status"] == "False" and c,
        timeout=60,
    )
    assert "list-jobs" in ready["message"], ready
    assert "Traceback" not in gw.log_text()
