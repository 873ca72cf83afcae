"""Reachable like a pod: ``podIP:containerPort`` answers on Nomad, and a Service over vkgate pods
has EndpointSlices that answer (docs/backends/nomad.md, "Pod networking").

Everything runs against the whole ``cluster`` (its kube-controller-manager runs the endpointslice
controller) and the e2e Nomad cluster, inside the test's network namespace:

* bridge mode (docker): one network namespace per pod, held by the locally imported infra image —
  a sidecar reaches the main container on ``127.0.0.1``; the pod's address is its allocation's
  (203.0.113.0/26 on client 1's bridge ``vkbr1``), and the test reaches ``podIP:containerPort``
  directly; a Service's EndpointSlice holds that address, ``ready`` following the pods' Ready
  condition.
* ``cni/vknet``: the same on an operator's CNI network (203.0.113.128/26).
* host mode (raw_exec, the default mode): each containerPort is a static port on the client, so
  ``podIP:containerPort`` (the client's address) answers; a second pod asking for the same port
  stays Pending with Nomad's placement failure as its message, runs on the other client when it
  may go there, and is placed once the port is free.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Kubectl, unavailable
from waiting import wait_until

from devstack.agent import GatewayProcess
from devstack.nomad_cluster import (
    BRIDGE_SUBNETS,
    CNI_NETWORK,
    CNI_SUBNETS,
    NomadCluster,
    bridge_unavailable_reason,
)

#: busybox httpd serving one page that names the pod (``$POD``) from a dir in the container.
HTTPD = 'mkdir -p /tmp/www && echo "hello from $POD" > /tmp/www/index.html && exec httpd -f -p {port} -h /tmp/www'


def get(url: str, timeout: float = 3.0) -> str:
    """One plain HTTP GET from the test process (inside the namespace, no proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def answers(url: str) -> str:
    try:
        return get(url)
    except OSError:
        return ""


def pod_doc(
    name: str,
    node: str,
    containers: list[dict[str, Any]],
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    for c in containers:
        c.setdefault("image", "busybox:1.36")
        c.setdefault("env", []).append({"name": "POD", "value": name})
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": labels or {},
                "annotations": annotations or {},
            },
            "spec": {
                "nodeName": node,
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 2,
                "tolerations": [{"operator": "Exists"}],
                "containers": containers,
            },
        }
    )


def status(kubectl: Kubectl, name: str) -> dict[str, Any]:
    r = kubectl("get", "pod", name, "-o", "json", check=False)
    return dict(json.loads(r.stdout).get("status") or {}) if r.returncode == 0 else {}


def running_with_ip(kubectl: Kubectl, name: str) -> dict[str, Any] | None:
    st = status(kubectl, name)
    return st if st.get("phase") == "Running" and st.get("podIP") else None


def ready(st: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])


def endpoints(kubectl: Kubectl, service: str) -> list[dict[str, Any]]:
    out = kubectl(
        "get",
        "endpointslices",
        "-l",
        f"kubernetes.io/service-name={service}",
        "-o",
        "json",
    ).stdout
    found: list[dict[str, Any]] = []
    for s in json.loads(out)["items"]:
        ports = [p.get("port") for p in s.get("ports") or []]
        for e in s.get("endpoints") or []:
            found.append({**e, "ports": ports})
    return found


def job_networks(nomad: NomadCluster, pod_uid: str) -> list[dict[str, Any]]:
    with nomad.http_client() as c:
        for stub in c.get("/v1/jobs", params={"namespace": "*", "meta": "true"}).json():
            if (stub.get("Meta") or {}).get("k8s.uid") == pod_uid:
                job = c.get(f"/v1/job/{stub['ID']}", params={"namespace": stub["Namespace"]})
                nets: list[dict[str, Any]] = job.json()["TaskGroups"][0]["Networks"] or []
                return nets
    raise AssertionError(f"no Nomad job for pod uid {pod_uid}")


def uid_of(kubectl: Kubectl, name: str) -> str:
    return str(kubectl("get", "pod", name, "-o", "jsonpath={.metadata.uid}").stdout)


@pytest.fixture(scope="module")
def bridge_ok() -> None:
    why = bridge_unavailable_reason()
    if why:
        unavailable(f"Nomad bridge networking: {why}")


@pytest.fixture
def bridge_gateway(
    bridge_ok: None, start_cluster_gateway: Any, nomad_cluster: NomadCluster
) -> Iterator[GatewayProcess]:
    # the default docker template; a container that exits waits 20 s before its restart, so
    # the pod is visibly not Ready in between
    nomad = {
        **nomad_cluster.backend_settings(),
        "network_mode": "bridge",
        "restart_delay": "20s",
        "restart_attempts": 2,
        "restart_interval": "5m",
    }
    yield start_cluster_gateway({"backend": {"kind": "nomad", "nomad": nomad}})


def test_bridge_pod_shares_localhost_answers_on_its_ip_and_backs_a_service(
    bridge_gateway: GatewayProcess, cluster_kubectl: Kubectl, nomad_cluster: NomadCluster
) -> None:
    kubectl, node = cluster_kubectl, bridge_gateway.node_name
    tag = uuid.uuid4().hex[:5]
    app, web, flaky, svc = f"net-{tag}", f"br-web-{tag}", f"br-flaky-{tag}", f"svc-{tag}"
    labels = {"app": app}
    http = [{"name": "http", "containerPort": 8080}]
    sidecar = {
        "name": "poller",
        # the main container on localhost: only one network namespace per pod makes this work
        "command": ["sh", "-c", "while :; do wget -qO- http://127.0.0.1:8080/; sleep 1; done"],
    }
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_doc(
            web,
            node,
            [
                {"name": "web", "command": ["sh", "-c", HTTPD.format(port=8080)], "ports": http},
                sidecar,
            ],
            labels=labels,
        ),
    )
    # serves a few seconds, exits, and waits 20 s before its restart: Ready flips to False
    # (httpd in the background: the shell, PID 1, exits and ends the container)
    flaky_cmd = HTTPD.format(port=8080).replace("exec httpd -f", "httpd") + "; sleep 6; exit 1"
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_doc(
            flaky,
            node,
            [{"name": "web", "command": ["sh", "-c", flaky_cmd], "ports": http}],
            labels=labels,
        ),
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": svc, "namespace": "default"},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": "http"}]},
    }
    kubectl("apply", "-f", "-", input=json.dumps(service))
    try:
        st = wait_until(f"{web} Running with an address", lambda: running_with_ip(kubectl, web), 90)
        ip = st["podIP"]
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(BRIDGE_SUBNETS[0]), st
        assert st["podIPs"] == [{"ip": ip}]
        assert st["hostIP"] == nomad_cluster.clients[0].ip  # the client it runs on
        nets = job_networks(nomad_cluster, uid_of(kubectl, web))
        assert [n["Mode"] for n in nets] == ["bridge"], nets
        assert not (nets[0].get("DynamicPorts") or nets[0].get("ReservedPorts")), nets
        # the sidecar reached the main container on localhost
        hello = f"hello from {web}\n"
        wait_until(
            f"{web} poller's logs showing the page",
            lambda: hello in kubectl("logs", web, "-c", "poller").stdout,
            timeout=30,
        )
        # the test reaches podIP:containerPort
        assert wait_until(f"{ip}:8080 answers", lambda: answers(f"http://{ip}:8080/")) == (
            f"hello from {web}\n"
        )

        # the Service's EndpointSlice holds the pod's address, ready while the pod is Ready
        def web_endpoint() -> dict[str, Any] | None:
            for e in endpoints(kubectl, svc):
                if ip in e["addresses"] and e["conditions"].get("ready"):
                    return e
            return None

        ep = wait_until(f"EndpointSlice of {svc} holds {ip} ready", web_endpoint, timeout=60)
        assert ep["ports"] == [8080] and ep["nodeName"] == node
        assert ep["targetRef"]["name"] == web
        assert get(f"http://{ep['addresses'][0]}:{ep['ports'][0]}/") == f"hello from {web}\n"

        # the flaky pod: listed while Ready, then not ready once its container exited
        flaky_ip = wait_until(
            f"{flaky} Running with an address", lambda: running_with_ip(kubectl, flaky), 90
        )["podIP"]
        assert flaky_ip != ip

        def flaky_endpoint(want_ready: bool) -> dict[str, Any] | None:
            for e in endpoints(kubectl, svc):
                if flaky_ip in e["addresses"] and bool(e["conditions"].get("ready")) is want_ready:
                    return e
            return None

        wait_until(f"{flaky} endpoint ready", lambda: flaky_endpoint(True), timeout=60)
        wait_until(f"{flaky} endpoint not ready", lambda: flaky_endpoint(False), timeout=60)
        assert not ready(status(kubectl, flaky))  # following the pod's Ready condition
        assert web_endpoint() is not None  # the steady pod is still ready
    finally:
        kubectl("delete", "service", svc, "--wait=false", check=False)
        kubectl("delete", "pod", web, flaky, "--wait=false", check=False)


def test_a_cni_network_pod_has_that_networks_address_and_shared_localhost(
    bridge_ok: None,
    start_cluster_gateway: Any,
    cluster_kubectl: Kubectl,
    nomad_cluster: NomadCluster,
) -> None:
    """``network_mode = "cni/vknet"``: the operator's own CNI network (a conflist in the
    client's ``cni_config_dir``) gives the pod its address and one namespace."""
    nomad = {**nomad_cluster.backend_settings(), "network_mode": f"cni/{CNI_NETWORK}"}
    gw = start_cluster_gateway({"backend": {"kind": "nomad", "nomad": nomad}})
    kubectl, name = cluster_kubectl, f"cni-{uuid.uuid4().hex[:5]}"
    poller = "while :; do wget -qO- http://127.0.0.1:9090/; sleep 1; done"
    containers: list[dict[str, Any]] = [
        {
            "name": "web",
            "command": ["sh", "-c", HTTPD.format(port=9090)],
            "ports": [{"name": "http", "containerPort": 9090}],
        },
        {"name": "poller", "command": ["sh", "-c", poller]},
    ]
    kubectl("apply", "-f", "-", input=pod_doc(name, gw.node_name, containers))
    try:
        st = wait_until(f"{name} Running with an address", lambda: running_with_ip(kubectl, name))
        ip = st["podIP"]
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(CNI_SUBNETS[0]), st
        assert st["podIPs"] == [{"ip": ip}] and st["hostIP"] == nomad_cluster.clients[0].ip
        nets = job_networks(nomad_cluster, uid_of(kubectl, name))
        assert [n["Mode"] for n in nets] == [f"cni/{CNI_NETWORK}"], nets
        hello = f"hello from {name}\n"
        assert wait_until(f"{ip}:9090 answers", lambda: answers(f"http://{ip}:9090/")) == hello
        wait_until(
            f"{name} poller reached web on localhost",
            lambda: hello in kubectl("logs", name, "-c", "poller").stdout,
            timeout=30,
        )
    finally:
        kubectl("delete", "pod", name, "--wait=false", check=False)


@pytest.fixture
def host_gateway(start_cluster_gateway: Any, nomad_cluster: NomadCluster) -> GatewayProcess:
    nomad = {
        **nomad_cluster.backend_settings(),
        "template": "nomad/raw_exec.j2",
        "node_pools": ["pool-b"],
    }
    gw: GatewayProcess = start_cluster_gateway({"backend": {"kind": "nomad", "nomad": nomad}})
    return gw


def test_host_mode_ports_are_static_and_a_taken_port_stays_pending_with_nomads_reason(
    host_gateway: GatewayProcess, cluster_kubectl: Kubectl, nomad_cluster: NomadCluster
) -> None:
    kubectl, node = cluster_kubectl, host_gateway.node_name
    tag = uuid.uuid4().hex[:5]
    port = 18000 + int(tag, 16) % 1000
    first, second, other = f"h1-{tag}", f"h2-{tag}", f"h3-{tag}"
    # raw_exec runs the host's busybox; the page lives in the task directory.  Both clients
    # share the test's network namespace, so each server binds its pod's address (a
    # status.podIP fieldRef: the client's address) as it would on a host of its own.
    serve = (
        'mkdir -p www && echo "hello from $POD" > www/index.html && '
        f"exec /bin/busybox httpd -f -p $MY_IP:{port} -h www"
    )

    def server(name: str, **kw: Any) -> str:
        c = {
            "name": "web",
            "command": ["/bin/sh", "-c", serve],
            "ports": [{"containerPort": port}],
            "env": [{"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        }
        return pod_doc(name, node, [c], **kw)

    c1, c2 = nomad_cluster.clients
    kubectl("apply", "-f", "-", input=server(first))
    try:
        st = wait_until(f"{first} Running", lambda: running_with_ip(kubectl, first), 60)
        assert st["podIP"] == c1.ip
        nets = job_networks(nomad_cluster, uid_of(kubectl, first))
        assert [n["Mode"] for n in nets] == ["host"] and not nets[0].get("DynamicPorts"), nets
        assert [(p["Value"], p["To"]) for p in nets[0]["ReservedPorts"]] == [(port, port)], nets
        url = f"http://{c1.ip}:{port}/"
        assert wait_until(f"{url} answers", lambda: answers(url)) == f"hello from {first}\n"

        # the same port on the same client: Pending, with Nomad's placement failure
        kubectl("apply", "-f", "-", input=server(second))
        pending = wait_until(
            f"{second} Pending with Nomad's reason",
            lambda: (s := status(kubectl, second)).get("reason") == "Unschedulable" and s,
            timeout=60,
        )
        assert pending["phase"] == "Pending" and not pending.get("podIP"), pending
        assert "port collision" in pending["message"], pending["message"]
        print(f"\n{second}: {pending['message']}")

        # a pod that may go to the other client gets the same port there
        kubectl(
            "apply",
            "-f",
            "-",
            input=server(other, annotations={"vkgate.io/nomad-node-pool": "pool-b"}),
        )
        st = wait_until(f"{other} Running", lambda: running_with_ip(kubectl, other), 60)
        assert st["podIP"] == c2.ip
        url2 = f"http://{c2.ip}:{port}/"
        assert wait_until(f"{url2} answers", lambda: answers(url2)) == f"hello from {other}\n"

        # the port freed, Nomad places the waiting pod: never on a random port
        kubectl("delete", "pod", first, "--wait=false")
        wait_until(f"{second} Running", lambda: running_with_ip(kubectl, second), 90)
        assert wait_until(
            f"{url} answers {second}", lambda: answers(url) == f"hello from {second}\n"
        )
    finally:
        kubectl("delete", "pod", first, second, other, "--wait=false", check=False)


def test_a_services_endpoint_follows_the_pods_readiness_probe(
    start_cluster_gateway: Any, nomad_cluster: NomadCluster, cluster_kubectl: Kubectl
) -> None:
    """Host mode on raw_exec: the pod serves on podIP:port from the start, but its
    readinessProbe (exec: a file exists) decides whether the Service's EndpointSlice lists it
    ready — created, removed and created again through ``kubectl exec``."""
    gw = start_cluster_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {**nomad_cluster.backend_settings(), "template": "nomad/raw_exec.j2"},
            }
        }
    )
    tag = uuid.uuid4().hex[:5]
    name, svc, port = f"probed-{tag}", f"probed-svc-{tag}", 18000 + int(tag[:3], 16) % 1000
    flag = f"/tmp/vkgate-ready-{tag}"  # raw_exec: the client's filesystem
    # raw_exec runs the host's busybox, bound to the pod's (the client's) address
    serve = (
        'mkdir -p www && echo "hello from $POD" > www/index.html && '
        f"exec /bin/busybox httpd -f -p $MY_IP:{port} -h www"
    )
    container = {
        "name": "web",
        "command": ["/bin/sh", "-c", serve],
        "ports": [{"containerPort": port}],
        "env": [{"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "readinessProbe": {
            "exec": {"command": ["/bin/sh", "-c", f"test -f {flag}"]},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    }
    kubectl = cluster_kubectl
    kubectl("apply", "-f", "-", input=pod_doc(name, gw.node_name, [container], labels={"app": svc}))
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": svc, "namespace": "default"},
                "spec": {"selector": {"app": svc}, "ports": [{"port": port, "targetPort": port}]},
            }
        ),
    )
    try:
        st = wait_until(f"{name} Running", lambda: running_with_ip(kubectl, name), timeout=90)
        ip = st["podIP"]
        wait_until(f"{ip}:{port} answers", lambda: answers(f"http://{ip}:{port}/"), timeout=30)

        def endpoint(want_ready: bool) -> dict[str, Any] | None:
            for e in endpoints(kubectl, svc):
                if ip in e["addresses"] and bool(e["conditions"].get("ready")) is want_ready:
                    return e
            return None

        # serving, but the probe fails: listed, not ready
        wait_until("endpoint listed not ready", lambda: endpoint(False), timeout=60)
        assert not ready(status(kubectl, name))
        for want in (True, False, True):
            op = "touch" if want else "rm -f"
            kubectl("exec", name, "--", "/bin/sh", "-c", f"{op} {flag}")
            wait_until(f"endpoint ready={want}", lambda w=want: endpoint(w), timeout=30)
            assert ready(status(kubectl, name)) is want
    finally:
        kubectl("delete", "service", svc, "--wait=false", check=False)
        kubectl("delete", "pod", name, "--wait=false", check=False)
