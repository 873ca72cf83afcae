"""Pod lifecycle on a real kube-apiserver with the simulated backend.

Each test gets its own namespace and its own gateway (node).  The simulated backend keeps its
workloads in a state file (``<gateway workdir>/simulated-state.json``), which is how these
tests see exactly what reached the backend — and that it survives gateway restarts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from waiting import events_about, wait_for_event, wait_until

from devstack.agent import GatewayProcess

COND_TYPES = [
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
]


#: This file's waits: polling every 0.2 s (waiting.wait_until: 60 s, every 0.3 s).
POLL = 0.2


def describe_once_it_shows(kubectl: Any, ns: str, name: str, *patterns: str) -> str:
    """``kubectl describe pod`` once every regex in ``patterns`` is in it: Events trail the
    status write they belong to (the sender holds them back while pod work is due)."""
    last = ""

    def shows() -> str | None:
        nonlocal last
        last = kubectl("describe", "pod", "-n", ns, name).stdout
        return last if all(re.search(p, last) for p in patterns) else None

    try:
        return str(wait_until(f"{name}'s Events {patterns}", shows, timeout=15, every=POLL))
    except AssertionError:
        raise AssertionError(f"{patterns} not in:\n{last}") from None


@pytest.fixture
def ns(kubectl: Any) -> str:
    name = f"pods-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    return name


def apply(kubectl: Any, *objs: dict[str, Any]) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}),
    )


def pod(
    name: str,
    ns: str,
    node: str,
    *,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": containers or [{"name": "app", "image": "nginx:1.27"}],
            **spec,
        },
    }


def get_pod(cp: Any, ns: str, name: str) -> dict[str, Any] | None:
    result: dict[str, Any] | None = cp.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return result


def phase_is(cp: Any, ns: str, name: str, phase: str) -> Callable[[], Any]:
    def check() -> Any:
        p = get_pod(cp, ns, name)
        return p if p and p.get("status", {}).get("phase") == phase else None

    return check


def workloads(gw: GatewayProcess) -> dict[str, Any]:
    path = Path(gw.config_path).parent / "simulated-state.json"
    if not path.exists():
        return {}
    data: dict[str, Any] = json.loads(path.read_text() or "{}")
    return data


def status_writes(gw: GatewayProcess) -> Counter[str]:
    """Status writes per pod, from the gateway's log ("pod ns/name status: X (status write #n)")."""
    counts: Counter[str] = Counter()
    for m in re.finditer(r"pod (\S+) status: \w+ \(status write #(\d+)\)", gw.log_text()):
        counts[m.group(1)] = max(counts[m.group(1)], int(m.group(2)))
    return counts


def masked(value: str) -> str:
    return "<secret:" + hashlib.sha256(value.encode()).hexdigest()[:12] + ">"


# --------------------------------------------------------------------------- tests


def test_create_to_running_with_all_conditions(start_gateway, control_plane, kubectl, ns) -> None:
    gw = start_gateway()
    apply(kubectl, pod("web", ns, gw.node_name))
    p = wait_until("Running", phase_is(control_plane, ns, "web", "Running"), timeout=30, every=POLL)
    # Ready comes with (or right after) Running
    p = wait_until(
        "all conditions True",
        lambda: (
            (q := get_pod(control_plane, ns, "web"))
            and all(c["status"] == "True" for c in q["status"].get("conditions", []))
            and q
        ),
        every=POLL,
    )
    status = p["status"]
    assert [c["type"] for c in status["conditions"]] == COND_TYPES
    uid = p["metadata"]["uid"]
    [cs] = status["containerStatuses"]
    assert cs["ready"] is True and cs["started"] is True and cs["restartCount"] == 0
    assert "running" in cs["state"] and cs["state"]["running"]["startedAt"]
    assert cs["containerID"].startswith("simulated://")
    assert cs["image"] == "nginx:1.27"
    assert status["podIP"] and status["podIPs"] == [{"ip": status["podIP"]}]
    assert status["hostIP"] == "127.0.0.1" and status["hostIPs"] == [{"ip": "127.0.0.1"}]
    assert status["startTime"] and status["qosClass"] == "BestEffort"
    assert list(workloads(gw)) == [uid]

    describe_once_it_shows(
        kubectl, ns, "web", *(rf"Normal\s+{r}\s" for r in ("Accepted", "Created", "Started"))
    )
    describe = describe_once_it_shows(kubectl, ns, "web", "Started container app")
    assert describe

    # A reconcile interval or more, then count the status writes: that nothing new is written
    # has no moment to wait for, only a time to let pass.
    time.sleep(6)
    writes = status_writes(gw)
    print(f"\nstatus writes per pod (happy path, create -> Running): {dict(writes)}")
    log = gw.log_text()
    posts = len(re.findall(rf"POST \S+/namespaces/{ns}/events ", log))
    patches = len(re.findall(rf"PATCH \S+/namespaces/{ns}/events/", log))
    print(
        f"API writes for pod {ns}/web: {writes[f'{ns}/web']} status patches, {posts} event creates, {patches} event updates"
    )
    assert writes[f"{ns}/web"] <= 3


def test_exit_codes(start_gateway, control_plane, kubectl, ns) -> None:
    gw = start_gateway()
    apply(
        kubectl,
        pod(
            "ok",
            ns,
            gw.node_name,
            restartPolicy="Never",
            annotations={"vkgate.io/sim-exit-code": "0"},
        ),
        pod(
            "bad",
            ns,
            gw.node_name,
            restartPolicy="Never",
            annotations={"vkgate.io/sim-exit-code": "3"},
        ),
    )
    ok = wait_until(
        "Succeeded", phase_is(control_plane, ns, "ok", "Succeeded"), timeout=30, every=POLL
    )
    bad = wait_until("Failed", phase_is(control_plane, ns, "bad", "Failed"), timeout=30, every=POLL)
    term = ok["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    term = bad["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    conds = {c["type"]: c for c in bad["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False"
    assert (
        kubectl("get", "pod", "-n", ns, "bad", "-o", "jsonpath={.status.phase}").stdout == "Failed"
    )
    assert describe_once_it_shows(kubectl, ns, "bad", "Container app exited with code 3")


def test_graceful_delete_ends_when_backend_is_done(
    start_gateway, control_plane, kubectl, ns
) -> None:
    gw = start_gateway()
    apply(kubectl, pod("g", ns, gw.node_name, annotations={"vkgate.io/sim-stop-seconds": "2"}))
    p = wait_until("Running", phase_is(control_plane, ns, "g", "Running"), timeout=30, every=POLL)
    uid = p["metadata"]["uid"]
    t0 = time.monotonic()
    kubectl("delete", "pod", "-n", ns, "g", "--grace-period=60", "--wait=false")
    wait_until("pod gone", lambda: get_pod(control_plane, ns, "g") is None, timeout=30, every=POLL)
    took = time.monotonic() - t0
    print(f"\ngraceful delete (backend stops in 2 s, grace 60 s) took {took:.1f}s")
    assert took < 15
    assert uid not in workloads(gw)
    # Events are written after the status (their own queue and budget): wait for it
    wait_for_event("a Killing Event", control_plane, ns, "g", "Killing", timeout=15, every=POLL)


def test_graceful_delete_forced_at_deadline(start_gateway, control_plane, kubectl, ns) -> None:
    gw = start_gateway()
    apply(kubectl, pod("stuck", ns, gw.node_name, annotations={"vkgate.io/sim-never-stop": "true"}))
    wait_until("Running", phase_is(control_plane, ns, "stuck", "Running"), timeout=30, every=POLL)
    t0 = time.monotonic()
    kubectl("delete", "pod", "-n", ns, "stuck", "--grace-period=4", "--wait=false")
    # Halfway to the 4 s deadline the pod must still be there: a wait on a condition would
    # pass at once (it is there right after the delete); only time passing can be observed.
    time.sleep(2)
    assert get_pod(control_plane, ns, "stuck") is not None
    wait_until(
        "pod gone", lambda: get_pod(control_plane, ns, "stuck") is None, timeout=30, every=POLL
    )
    assert time.monotonic() - t0 >= 4

    # Events are written after the delete (their own queue and budget): wait for it
    [ev] = wait_until(
        "a ForceDeleted Event",
        lambda: events_about(control_plane, ns, "stuck", "ForceDeleted"),
        timeout=15,
        every=POLL,
    )
    assert ev["type"] == "Warning" and "(4s)" in ev["message"]


def test_force_delete_removes_workload(start_gateway, control_plane, kubectl, ns) -> None:
    gw = start_gateway()
    apply(kubectl, pod("f", ns, gw.node_name))
    p = wait_until("Running", phase_is(control_plane, ns, "f", "Running"), timeout=30, every=POLL)
    uid = p["metadata"]["uid"]
    assert uid in workloads(gw)
    kubectl("delete", "pod", "-n", ns, "f", "--grace-period=0", "--force")
    wait_until("workload removed", lambda: uid not in workloads(gw), timeout=20, every=POLL)


def test_restart_mid_burst_has_exactly_one_workload_per_pod(
    start_gateway, control_plane, kubectl, ns
) -> None:
    gw = start_gateway({"pods": {"workers": 10}})
    n = 200
    apply(kubectl, *[pod(f"b{i:03d}", ns, gw.node_name) for i in range(n)])
    wait_until("some workloads created", lambda: len(workloads(gw)) >= 20, timeout=60, every=0.05)
    half = len(workloads(gw))
    gw.kill()  # a crash, mid-burst
    t_restart = time.monotonic()
    gw.start()
    listed = lambda: kubectl("get", "pods", "-n", ns, "-o", "json").stdout  # noqa: E731
    wait_until(
        "all pods Running",
        lambda: all(i["status"].get("phase") == "Running" for i in json.loads(listed())["items"]),
        timeout=180,
        every=1,
    )
    took = time.monotonic() - t_restart
    items = json.loads(listed())["items"]
    uids = {i["metadata"]["uid"] for i in items}
    state = workloads(gw)
    assert len(items) == n
    assert set(state) == uids, "every pod has exactly one workload and nothing else"
    dups = {
        uid: r["extra"].get("duplicate_creates")
        for uid, r in state.items()
        if r["extra"].get("duplicate_creates")
    }
    assert dups == {}, f"workloads submitted twice after the restart: {dups}"
    assert "adopted" in gw.log_text()
    writes = status_writes(gw)
    print(
        f"\nburst: {half} of {n} workloads existed at the crash; all Running {took:.1f}s after "
        f"the restart; status writes per pod: "
        f"max {max(writes.values())}, distribution {sorted(Counter(writes.values()).items())}"
    )


def test_pods_deleted_while_gateway_down(start_gateway, control_plane, kubectl, ns) -> None:
    gw = start_gateway()
    apply(
        kubectl,
        pod("gone", ns, gw.node_name),
        pod("graceful", ns, gw.node_name),
        pod("stays", ns, gw.node_name),
    )
    for name in ("gone", "graceful", "stays"):
        wait_until(
            f"{name} Running", phase_is(control_plane, ns, name, "Running"), timeout=30, every=POLL
        )
    uids = {
        name: get_pod(control_plane, ns, name)["metadata"]["uid"]
        for name in ("gone", "graceful", "stays")
    }  # type: ignore[index]
    gw.stop()
    kubectl("delete", "pod", "-n", ns, "gone", "--grace-period=0", "--force")
    kubectl("delete", "pod", "-n", ns, "graceful", "--grace-period=120", "--wait=false")
    assert get_pod(control_plane, ns, "graceful")["metadata"]["deletionTimestamp"]  # type: ignore[index]
    gw.start()
    wait_until(
        "orphan workload removed", lambda: uids["gone"] not in workloads(gw), timeout=30, every=POLL
    )
    wait_until(
        "terminating pod finished",
        lambda: get_pod(control_plane, ns, "graceful") is None,
        timeout=30,
        every=POLL,
    )
    assert uids["graceful"] not in workloads(gw)
    assert uids["stays"] in workloads(gw)
    assert workloads(gw)[uids["stays"]]["extra"].get("duplicate_creates") is None
    assert get_pod(control_plane, ns, "stays")["status"]["phase"] == "Running"  # type: ignore[index]


def test_env_resolved_as_kubernetes_would(start_gateway, control_plane, kubectl, ns) -> None:
    gw = start_gateway()
    apply(
        kubectl,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": ns},
            "data": {"LOG": "debug", "port": "8080", "app.conf": "a=1\n"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db", "namespace": ns},
            "data": {"password": base64.b64encode(b"s3cr3t").decode()},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "my-db", "namespace": ns},
            "spec": {"ports": [{"name": "pg", "port": 5432}]},
        },
        pod(
            "env",
            ns,
            gw.node_name,
            restartPolicy="Never",
            containers=[
                {
                    "name": "app",
                    "image": "busybox",
                    "command": ["/bin/serve", "--listen=$(POD_IP):$(PORT)"],
                    "args": ["$$(PORT)", "$(UNKNOWN)"],
                    "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}},
                    "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
                    "env": [
                        {
                            "name": "PORT",
                            "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "port"}},
                        },
                        {
                            "name": "PASSWORD",
                            "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}},
                        },
                        {
                            "name": "POD_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                        {
                            "name": "HOST_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}},
                        },
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {
                            "name": "NS",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                        {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                        {
                            "name": "CPU_M",
                            "valueFrom": {
                                "resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}
                            },
                        },
                        {
                            "name": "CPU",
                            "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}},
                        },
                        {
                            "name": "MEM_MI",
                            "valueFrom": {
                                "resourceFieldRef": {
                                    "resource": "requests.memory",
                                    "divisor": "1Mi",
                                }
                            },
                        },
                        {
                            "name": "URL",
                            "value": "http://$(POD_IP):$(PORT)/?k=$(CFG_LOG)&e=$$(PORT)",
                        },
                    ],
                    "volumeMounts": [
                        {"name": "conf", "mountPath": "/etc/app"},
                        {"name": "sec", "mountPath": "/run/sec"},
                    ],
                }
            ],
            volumes=[
                {
                    "name": "conf",
                    "configMap": {
                        "name": "cfg",
                        "items": [{"key": "app.conf", "path": "app.conf"}],
                    },
                },
                {"name": "sec", "secret": {"secretName": "db"}},
            ],
        ),
    )
    p = wait_until("Running", phase_is(control_plane, ns, "env", "Running"), timeout=30, every=POLL)
    uid = p["metadata"]["uid"]
    # values Kubernetes itself knows: the pod's IP, the services' cluster IPs, defaulted requests
    pod_ip = p["status"]["podIP"]
    kube_svc = control_plane.get("/api/v1/namespaces/default/services/kubernetes")
    my_db = control_plane.get(f"/api/v1/namespaces/{ns}/services/my-db")
    requests = p["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {
        "cpu": "250m",
        "memory": "64Mi",
    }  # the API server defaulted them from limits
    got = workloads(gw)[uid]["extra"]["containers"]["app"]
    env = dict(got["env"])
    assert env["CFG_LOG"] == "debug" and env["CFG_port"] == "8080"
    assert env["PORT"] == "8080"
    assert env["PASSWORD"] == masked("s3cr3t")
    assert env["POD_IP"] == pod_ip
    assert env["HOST_IP"] == p["status"]["hostIP"] == "127.0.0.1"
    assert env["NODE"] == gw.node_name and env["NS"] == ns and env["UID"] == uid
    assert env["CPU_M"] == "250" and env["CPU"] == "1" and env["MEM_MI"] == "64"
    assert env["URL"] == f"http://{pod_ip}:8080/?k=debug&e=$(PORT)"
    assert env["KUBERNETES_SERVICE_HOST"] == kube_svc["spec"]["clusterIP"]
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    assert env["MY_DB_SERVICE_HOST"] == my_db["spec"]["clusterIP"]
    assert env["MY_DB_SERVICE_PORT_PG"] == "5432"
    assert env["MY_DB_PORT"] == f"tcp://{my_db['spec']['clusterIP']}:5432"
    # declaration order: envFrom, then env, then service links
    names = [n for n, _ in got["env"]]
    assert (
        names.index("CFG_LOG")
        < names.index("PORT")
        < names.index("URL")
        < names.index("KUBERNETES_SERVICE_HOST")
    )
    assert got["command"] == ["/bin/serve", f"--listen={pod_ip}:8080"]
    assert got["args"] == ["$(PORT)", "$(UNKNOWN)"]
    assert got["files"]["/etc/app/app.conf"] == "a=1\n"
    assert got["files"]["/run/sec/password"] == masked("s3cr3t")


def test_missing_mandatory_key_keeps_pod_pending_with_event(
    start_gateway, control_plane, kubectl, ns
) -> None:
    gw = start_gateway({"pods": {"config_refresh_interval": 2.0}})
    apply(
        kubectl,
        pod(
            "cfgerr",
            ns,
            gw.node_name,
            containers=[
                {
                    "name": "app",
                    "image": "busybox",
                    "env": [
                        {
                            "name": "X",
                            "valueFrom": {"configMapKeyRef": {"name": "later", "key": "x"}},
                        }
                    ],
                }
            ],
        ),
    )

    def config_error() -> Any:
        p = get_pod(control_plane, ns, "cfgerr")
        waiting = (
            ((p or {}).get("status", {}).get("containerStatuses") or [{}])[0]
            .get("state", {})
            .get("waiting", {})
        )
        return p if waiting.get("reason") == "CreateContainerConfigError" else None

    p = wait_until("CreateContainerConfigError", config_error, timeout=30, every=POLL)
    assert p["status"]["phase"] == "Pending"
    assert (
        'configmap "later" not found'
        in p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    )
    assert not workloads(gw)
    describe = describe_once_it_shows(
        kubectl, ns, "cfgerr", r"Warning\s+MandatoryConfigMapNotFound"
    )
    assert "CreateContainerConfigError" in describe
    # the ConfigMap appears: the pod starts without anyone touching it
    apply(
        kubectl,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "later", "namespace": ns},
            "data": {"x": "1"},
        },
    )
    p = wait_until(
        "Running", phase_is(control_plane, ns, "cfgerr", "Running"), timeout=30, every=POLL
    )
    assert (
        dict(workloads(gw)[p["metadata"]["uid"]]["extra"]["containers"]["app"]["env"])["X"] == "1"
    )


def test_unsupported_volume_fails_with_reason(start_gateway, control_plane, kubectl, ns) -> None:
    gw = start_gateway()
    apply(
        kubectl,
        pod("hp", ns, gw.node_name, volumes=[{"name": "host", "hostPath": {"path": "/etc"}}]),
    )
    p = wait_until("Failed", phase_is(control_plane, ns, "hp", "Failed"), timeout=30, every=POLL)
    assert p["status"]["reason"] == "UnsupportedVolume"
    assert 'volume "host"' in p["status"]["message"]
    out = kubectl("get", "pod", "-n", ns, "hp").stdout
    assert "UnsupportedVolume" in out


def test_projected_service_account_token(start_gateway, control_plane, kubectl, ns) -> None:
    gw = start_gateway()
    apply(
        kubectl,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "builder", "namespace": ns},
        },
        pod(
            "tok",
            ns,
            gw.node_name,
            serviceAccountName="builder",
            containers=[
                {
                    "name": "app",
                    "image": "busybox",
                    "volumeMounts": [{"name": "api", "mountPath": "/var/run/api"}],
                }
            ],
            volumes=[
                {
                    "name": "api",
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "path": "token",
                                    "expirationSeconds": 3600,
                                    "audience": "vault",
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {"fieldPath": "metadata.namespace"},
                                        }
                                    ]
                                }
                            },
                        ]
                    },
                }
            ],
        ),
    )
    p = wait_until("Running", phase_is(control_plane, ns, "tok", "Running"), timeout=30, every=POLL)
    files = workloads(gw)[p["metadata"]["uid"]]["extra"]["containers"]["app"]["files"]
    assert files["/var/run/api/namespace"] == ns
    token = files["/var/run/api/token"]
    assert token.startswith("<secret:") and token != masked("")  # a real token, kept out of sight
