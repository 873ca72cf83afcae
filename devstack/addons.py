"""The rest of a real control plane: kube-scheduler, kube-controller-manager, metrics-server.

A virtual node is only useful in a cluster that schedules onto it (kube-scheduler), reacts when
its Lease stops (the node lifecycle and taint-eviction controllers), owns Deployments, Jobs and
garbage collection, mints ServiceAccount tokens and ``kube-root-ca.crt`` for the
``kube-api-access-*`` volume, signs CSRs, and serves ``kubectl top`` (metrics-server behind the
aggregation layer).  All three are built from the pinned modules (``components.py``) and run on
127.0.0.1 with their own identities and kubeconfigs, as kubeadm sets them up
(docs/design/control-plane.md, "The whole cluster").

metrics-server is reached by the aggregator through an ExternalName Service that names
``localhost`` (no kube-proxy here, and Endpoints/EndpointSlices refuse loopback addresses); its
serving certificate carries ``metrics-server.kube-system.svc`` and the APIService pins the CA.
It talks to vkgate's kubelet port with a client certificate from the kubelet-client CA (the one
vkgate trusts) and checks vkgate's serving certificate against the kubelet-serving CA.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from devstack.certs import Pki, write_kubeconfig
from devstack.process import DevstackError, Proc, free_port, wait_for

#: Node lifecycle timing of the local cluster.  The defaults (grace 50 s) are for real fleets;
#: a test cluster notices a dead gateway faster.  The grace must exceed the Lease renew interval.
NODE_MONITOR_PERIOD = "2s"
NODE_MONITOR_GRACE = "20s"

#: The controllers: kube-controller-manager's default set (``*``: every controller not disabled
#: by default — HPA, StatefulSet, DaemonSet, ResourceQuota, the PV binder and attach/detach, … —
#: docs/design/control-plane.md, "The whole cluster") minus the three cloud-provider ones, which
#: 1.36 would only log as skipped (kube-controller-manager has no in-tree cloud provider).
CONTROLLERS = (
    "*",
    "-service-lb-controller",
    "-node-route-controller",
    "-cloud-node-lifecycle-controller",
)

#: HPA timing of the local cluster: a sync every 5 s (default 15 s) and a 15 s downscale
#: stabilization window (default 5 min), so a test sees a scale-down within a minute.
HPA_SYNC_PERIOD = "5s"
HPA_DOWNSCALE_STABILIZATION = "15s"

METRICS_SERVER_USER = "system:metrics-server"
METRICS_API = "v1beta1.metrics.k8s.io"


class Api:
    """A tiny admin client for the harness: create objects, read them (urllib, no event loop)."""

    def __init__(self, url: str, ctx: ssl.SSLContext) -> None:
        self.url = url
        self.ctx = ctx

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    def get(self, path: str) -> Any | None:
        try:
            return self.request("GET", path)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def create(self, path: str, obj: Mapping[str, Any]) -> None:
        """POST ``obj`` to the collection ``path``; an existing object is left as it is."""
        try:
            self.request("POST", path, obj)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                detail = exc.read().decode(errors="replace")[:500]
                raise DevstackError(
                    f"creating {obj.get('kind')} at {path}: {exc} {detail}"
                ) from exc


def _healthz(port: int) -> Callable[[], bool]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # self-signed serving certs of loopback components

    def check() -> bool:
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=3
            ) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    return check


def _component_kubeconfig(pki: Pki, workdir: Path, url: str, user: str, stem: str) -> Path:
    return write_kubeconfig(
        workdir / f"{stem}.kubeconfig",
        server=url,
        ca_file=pki.serving_ca,
        client=pki.client_cert(user, stem=stem),
        user=user,
    )


def start_scheduler(binary: Path, pki: Pki, workdir: Path, url: str) -> Proc:
    """kube-scheduler with its own identity (``system:kube-scheduler``) on 127.0.0.1."""
    kc = _component_kubeconfig(pki, workdir, url, "system:kube-scheduler", "scheduler")
    port = free_port()
    proc = Proc(
        "kube-scheduler",
        [
            str(binary),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={workdir / 'scheduler-certs'}",
            "--leader-elect=false",
            "--profiling=false",
        ],
        log_file=workdir / "logs" / "kube-scheduler.log",
    )
    _wait_healthy(proc, port)
    return proc


def controller_manager_args(pki: Pki, workdir: Path, kubeconfig: Path, port: int) -> list[str]:
    client = pki.client_ca_pair
    serving = pki.kubelet_serving_ca
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={workdir / 'controller-manager-certs'}",
        "--leader-elect=false",
        "--profiling=false",
        f"--controllers={','.join(CONTROLLERS)}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.serving_ca}",
        # kubernetes.io/kubelet-serving certificates must verify against the CA kube-apiserver
        # uses for kubelets; client signers issue from the CA it trusts for client certs.
        f"--cluster-signing-kubelet-serving-cert-file={serving.cert}",
        f"--cluster-signing-kubelet-serving-key-file={serving.key}",
        f"--cluster-signing-kubelet-client-cert-file={client.cert}",
        f"--cluster-signing-kubelet-client-key-file={client.key}",
        f"--cluster-signing-kube-apiserver-client-cert-file={client.cert}",
        f"--cluster-signing-kube-apiserver-client-key-file={client.key}",
        f"--cluster-signing-legacy-unknown-cert-file={client.cert}",
        f"--cluster-signing-legacy-unknown-key-file={client.key}",
        f"--node-monitor-period={NODE_MONITOR_PERIOD}",
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
        f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD}",
        f"--horizontal-pod-autoscaler-downscale-stabilization={HPA_DOWNSCALE_STABILIZATION}",
    ]


def start_controller_manager(binary: Path, pki: Pki, workdir: Path, url: str) -> Proc:
    """kube-controller-manager as ``system:kube-controller-manager`` (one token per controller)."""
    kc = _component_kubeconfig(
        pki, workdir, url, "system:kube-controller-manager", "controller-manager"
    )
    port = free_port()
    proc = Proc(
        "kube-controller-manager",
        [str(binary), *controller_manager_args(pki, workdir, kc, port)],
        log_file=workdir / "logs" / "kube-controller-manager.log",
    )
    _wait_healthy(proc, port)
    return proc


def wait_for_service_accounts(api: Api, proc: Proc, *, namespace: str = "default") -> None:
    """Pods are admitted only once ``default`` ServiceAccount and ``kube-root-ca.crt`` exist."""
    wait_for(
        f"ServiceAccount {namespace}/default and ConfigMap kube-root-ca.crt",
        lambda: (
            api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default") is not None
            and api.get(f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt") is not None
        ),
        timeout=60,
        interval=0.3,
        proc=proc,
    )


def _wait_healthy(proc: Proc, port: int) -> None:
    try:
        wait_for(f"{proc.name} /healthz", _healthz(port), timeout=90, interval=0.3, proc=proc)
    except BaseException:
        proc.stop(timeout=5)
        raise


def metrics_server_objects(port: int, ca_bundle: bytes) -> list[tuple[str, dict[str, Any]]]:
    """RBAC, the ExternalName Service and the APIService of metrics-server (upstream's
    manifests, minus the Deployment: the binary runs on the host)."""
    import base64

    rbac = "/apis/rbac.authorization.k8s.io/v1"
    user = {"kind": "User", "name": METRICS_SERVER_USER, "apiGroup": "rbac.authorization.k8s.io"}
    return [
        (
            f"{rbac}/clusterroles",
            {
                "kind": "ClusterRole",
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "metadata": {"name": "system:metrics-server"},
                "rules": [
                    {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                    {
                        "apiGroups": [""],
                        "resources": ["pods", "nodes"],
                        "verbs": ["get", "list", "watch"],
                    },
                ],
            },
        ),
        (
            f"{rbac}/clusterrolebindings",
            {
                "kind": "ClusterRoleBinding",
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "metadata": {"name": "system:metrics-server"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:metrics-server",
                },
                "subjects": [user],
            },
        ),
        (
            f"{rbac}/clusterrolebindings",
            {
                "kind": "ClusterRoleBinding",
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "metadata": {"name": "metrics-server:system:auth-delegator"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:auth-delegator",
                },
                "subjects": [user],
            },
        ),
        (
            f"{rbac}/namespaces/kube-system/rolebindings",
            {
                "kind": "RoleBinding",
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "metadata": {"name": "metrics-server-auth-reader", "namespace": "kube-system"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "extension-apiserver-authentication-reader",
                },
                "subjects": [user],
            },
        ),
        (
            "/api/v1/namespaces/kube-system/services",
            {
                "kind": "Service",
                "apiVersion": "v1",
                "metadata": {"name": "metrics-server", "namespace": "kube-system"},
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            },
        ),
        (
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "kind": "APIService",
                "apiVersion": "apiregistration.k8s.io/v1",
                "metadata": {"name": METRICS_API},
                "spec": {
                    "group": "metrics.k8s.io",
                    "version": "v1beta1",
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                    "caBundle": base64.b64encode(ca_bundle).decode(),
                    # ExternalName has no targetPort: the APIService names the real port.
                    "service": {"namespace": "kube-system", "name": "metrics-server", "port": port},
                },
            },
        ),
    ]


def start_metrics_server(binary: Path, pki: Pki, workdir: Path, url: str, api: Api) -> Proc:
    """metrics-server on 127.0.0.1 registered as ``v1beta1.metrics.k8s.io``; waits until the
    aggregator reports the APIService Available."""
    kc = _component_kubeconfig(pki, workdir, url, METRICS_SERVER_USER, "metrics-server")
    serving = pki.serving_cert(
        "metrics-server-serving", dns=("metrics-server.kube-system.svc", "localhost")
    )
    kubelet_client = pki.kubelet_client_cert(METRICS_SERVER_USER)
    port = free_port()
    for path, obj in metrics_server_objects(port, pki.serving_ca.read_bytes()):
        api.create(path, obj)
    proc = Proc(
        "metrics-server",
        [
            str(binary),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--kubelet-certificate-authority={pki.kubelet_serving_ca.cert}",
            f"--kubelet-client-certificate={kubelet_client.cert}",
            f"--kubelet-client-key={kubelet_client.key}",
            "--kubelet-preferred-address-types=InternalIP",
            "--kubelet-use-node-status-port",
            "--metric-resolution=10s",
            "--kubelet-request-timeout=5s",
            "--v=2",
        ],
        log_file=workdir / "logs" / "metrics-server.log",
    )
    try:
        wait_for(
            f"APIService {METRICS_API} Available",
            lambda: _available(
                api.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{METRICS_API}")
            ),
            timeout=90,
            interval=0.5,
            proc=proc,
        )
    except BaseException:
        proc.stop(timeout=5)
        raise
    return proc


def _available(obj: Mapping[str, Any] | None) -> bool:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Available":
            return bool(cond.get("status") == "True")
    return False
