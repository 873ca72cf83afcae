"""The kubelet serving certificate from a CSR, signed by the real kube-controller-manager
(signer kubernetes.io/kubelet-serving) of the whole cluster; the API server — which verifies
kubelets against that signer's CA — then reaches the agent's kubelet API
(docs/design/kubelet-csr.md)."""

from __future__ import annotations

import json
import re
import socket
import ssl
import uuid
from typing import Any

from waiting import wait_until

from gateway.kubelet.auth import cert_facts


def served_cert(port: int) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), 5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return ssl.DER_cert_to_PEM_cert(der).encode()


def pod_on(cluster_kubectl: Any, node: str) -> str:
    name = f"csr-{uuid.uuid4().hex[:6]}"
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "60"]}],
        },
    }
    cluster_kubectl("apply", "-f", "-", input=json.dumps(manifest))
    wait_until(
        f"pod {name} Running",
        lambda: (
            cluster_kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout
            == "Running"
        ),
    )
    return name


def logs_verified(cluster_kubectl: Any, pod: str) -> str:
    """ "" when ``kubectl logs`` works (the API server verified the kubelet's certificate
    against --kubelet-certificate-authority), else its error."""
    got = cluster_kubectl("logs", pod, check=False)
    return "" if got.returncode == 0 else got.stderr.strip()


def _check_signed(gw: Any, cluster: Any, cluster_kubectl: Any) -> None:
    port = int(gw.settings["kubelet"]["port"])
    _, _, ips, dns, issuer = cert_facts(served_cert(port))
    ca_subject = cert_facts(cluster.kubelet_serving_ca.cert.read_bytes())[4]
    assert issuer == ca_subject, f"served by {issuer}, not the cluster signer {ca_subject}"
    assert "127.0.0.1" in ips and gw.node_name in dns
    # the API server verifies the kubelet against that CA: kubectl logs works end to end
    pod = pod_on(cluster_kubectl, gw.node_name)
    wait_until("kubectl logs via the kubelet", lambda: not logs_verified(cluster_kubectl, pod))
    cluster_kubectl("delete", "pod", pod, "--wait=false")


def test_self_approved_csr_signed_by_the_controller_manager(
    start_cluster_gateway: Any, cluster: Any, cluster_kubectl: Any
) -> None:
    gw = start_cluster_gateway(
        {"kubelet": {"csr": True, "csr_self_approve": True, "cert_file": "", "key_file": ""}}
    )
    wait_until("the CSR certificate", lambda: "serving certificate from CSR" in gw.log_text())
    _check_signed(gw, cluster, cluster_kubectl)
    name = re.search(r"CSR (vkgate-\S+) created", gw.log_text()).group(1)  # type: ignore[union-attr]
    conds = cluster_kubectl(
        "get", "csr", name, "-o", "jsonpath={.status.conditions[*].reason}"
    ).stdout
    assert "VkgateSelfApproved" in conds


def test_manual_approval_with_kubectl_certificate_approve(
    start_cluster_gateway: Any, cluster: Any, cluster_kubectl: Any
) -> None:
    gw = start_cluster_gateway({"kubelet": {"csr": True, "cert_file": "", "key_file": ""}})
    found = wait_until(
        "the approval hint",
        lambda: re.search(r"kubectl certificate approve (vkgate-\S+)", gw.log_text()),
    )
    pod = pod_on(cluster_kubectl, gw.node_name)
    refused = logs_verified(cluster_kubectl, pod)
    assert "x509" in refused or "certificate" in refused, f"self-signed must not verify: {refused}"
    cluster_kubectl("certificate", "approve", found.group(1))
    wait_until("the CSR certificate", lambda: "serving certificate from CSR" in gw.log_text())
    _check_signed(gw, cluster, cluster_kubectl)
