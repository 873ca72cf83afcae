"""Secrets stay secret, end to end on real Nomad at debug log level: a pod with an env value
from a Secret, a Secret volume and an image pull Secret runs, is exec'd into and its logs are
read, with the Nomad ACL token set — every value a canary.  Then the gateway's whole log, the
pod's Events and status, and the gateway's and the kubelet API's metrics are searched for the
canaries (docs/design/secrets.md).  The exec proves the values arrived, by digest only."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def test_no_canary_leaks_through_a_full_lifecycle_at_debug(
    kubectl: Any, nomad_agent: Any, start_gateway: Any
) -> None:
    tag = uuid.uuid4().hex[:10]
    # The Nomad token is a real one (ACLs are on): a new token of the shipped policy, whose
    # secret is searched for everywhere below.
    token = nomad_agent.request(
        "POST",
        "/v1/acl/token",
        body={"Name": f"canary-{tag}", "Type": "client", "Policies": ["vkgate"]},
    )["SecretID"]
    canary = {
        "token": token,
        "env": f"canary-env-{tag}",
        "file": f"canary-file-{tag}",
        "pull": f"canary-pull-{tag}",
    }
    ns = f"canary-{tag[:6]}"
    kubectl("create", "namespace", ns)
    gw = start_gateway(
        {
            "backend": {
                "kind": "nomad",
                "nomad": {
                    **nomad_agent.backend_settings(),
                    "template": "nomad/raw_exec.j2",
                    "token": canary["token"],
                },
            },
            "log": {"level": "debug"},
        }
    )
    auth = base64.b64encode(f"bot:{canary['pull']}".encode()).decode()
    docker = {
        "auths": {"registry.example": {"username": "bot", "password": canary["pull"], "auth": auth}}
    }
    objs = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "namespace": ns},
            "stringData": {"env": canary["env"], "file": canary["file"]},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "pull", "namespace": ns},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": json.dumps(docker)},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app", "namespace": ns},
            "spec": {
                "nodeName": gw.node_name,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"operator": "Exists"}],
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}],
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.example/app:1",
                        "command": ["/bin/sh", "-c", "echo started; exec sleep 300"],
                        "env": [
                            {
                                "name": "CANARY",
                                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "env"}},
                            }
                        ],
                        "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}],
                    }
                ],
            },
        },
    ]
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    )

    def pod() -> dict[str, Any]:
        result: dict[str, Any] = json.loads(
            kubectl("get", "pod", "-n", ns, "app", "-o", "json").stdout
        )
        return result

    wait_until("the pod Running", lambda: pod()["status"].get("phase") == "Running")
    # exec: the values arrived (compared by digest, so the command line carries no canary)
    script = 'echo "env=$(printf %s "$CANARY" | md5sum)"; f=$(find . -path "*vkgate/creds/file" | head -1); echo "file=$(md5sum < "$f")"'
    out = kubectl("exec", "-n", ns, "app", "--", "/bin/sh", "-c", script, timeout=30)
    assert f"env={md5(canary['env'])}" in out.stdout, out.stdout
    assert f"file={md5(canary['file'])}" in out.stdout, out.stdout
    logs = kubectl("logs", "-n", ns, "app", timeout=30)
    assert logs.stdout == "started\n"

    # every place a value could leak to
    places: dict[str, str] = {
        "gateway log": gw.log_text(),
        "events": kubectl("get", "events", "-n", ns, "-o", "json").stdout,
        "pod status": json.dumps(pod()["status"]),
        "kubectl logs": logs.stdout,
    }
    metrics_address = gw.settings["kubelet"]["metrics_address"]
    places["gateway metrics"] = httpx.get(f"http://{metrics_address}/metrics", timeout=10).text
    for path in ("metrics/resource", "stats/summary", "metrics"):
        raw = kubectl("get", "--raw", f"/api/v1/nodes/{gw.node_name}/proxy/{path}", check=False)
        places[f"kubelet {path}"] = raw.stdout + raw.stderr
    kubectl("delete", "pod", "-n", ns, "app", "--wait=true", timeout=60)
    places["gateway log"] = gw.log_text()  # the delete too

    assert "DEBUG" in places["gateway log"]  # it really ran at debug
    assert all(places.values()), [k for k, v in places.items() if not v]
    leaks = {
        (what, where)
        for what, value in canary.items()
        for where, text in places.items()
        if value in text
    }
    leaks |= {
        (f"{what} (base64)", where)
        for what, value in canary.items()
        for where, text in places.items()
        if base64.b64encode(value.encode()).decode() in text
    }
    assert leaks == set()
    print(
        f"\nsecret canaries: none of {len(canary)} values in {len(places)} places "
        f"({sum(len(t) for t in places.values())} characters searched)"
    )
    kubectl("delete", "namespace", ns, "--wait=false", check=False)
