"""The node and pod proxies of kube-apiserver reach vkgate on a routable node address.

kube-apiserver refuses to proxy to a loopback node address ("address not allowed"), so these
run the node on a documentation address (198.51.100.x) put on ``lo`` inside the e2e network
namespace (``routable_ips``).  The gateway listens there and its serving certificate names it
(``devstack.agent.serving_ips``), so the API server's verified TLS connection works.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

pytestmark = pytest.mark.e2e


def test_node_proxy_pods_and_stats_summary_through_the_api_server(
    start_gateway: Any, kubectl: Any, routable_ips: tuple[str, ...]
) -> None:
    ip = routable_ips[0]
    gw = start_gateway({"node": {"internal_ip": ip}, "kubelet": {"address": ip}})
    node = json.loads(kubectl("get", "node", gw.node_name, "-o", "json").stdout)
    assert {"type": "InternalIP", "address": ip} in node["status"]["addresses"]
    name = f"proxied-{uuid.uuid4().hex[:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": gw.node_name,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "busybox"}],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(pod))
    deadline = time.monotonic() + 60
    while kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout != "Running":
        assert time.monotonic() < deadline, "pod did not start"
        time.sleep(0.3)

    listed = json.loads(kubectl("get", "--raw", f"/api/v1/nodes/{gw.node_name}/proxy/pods").stdout)
    assert listed["kind"] == "PodList"
    assert name in {p["metadata"]["name"] for p in listed["items"]}
    assert all(p["spec"]["nodeName"] == gw.node_name for p in listed["items"])

    summary: dict[str, Any] = json.loads(
        kubectl("get", "--raw", f"/api/v1/nodes/{gw.node_name}/proxy/stats/summary").stdout
    )
    assert summary["node"]["nodeName"] == gw.node_name
    refs = [p["podRef"] for p in summary["pods"]]
    assert {"name": name, "namespace": "default"}.items() <= next(
        r for r in refs if r["name"] == name
    ).items()
    metrics = kubectl("get", "--raw", f"/api/v1/nodes/{gw.node_name}/proxy/metrics/resource")
    assert f'pod="{name}"' in metrics.stdout
    kubectl("delete", "pod", name, "--grace-period=0", "--force")


def test_a_loopback_node_address_is_refused_by_the_api_server(
    start_gateway: Any, kubectl: Any
) -> None:
    """Why the fixture above exists: the API server will not proxy to 127.0.0.0/8."""
    gw = start_gateway()
    res = kubectl("get", "--raw", f"/api/v1/nodes/{gw.node_name}/proxy/pods", check=False)
    assert res.returncode != 0
    assert "address not allowed" in res.stderr
