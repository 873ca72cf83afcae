"""imagePullSecrets end to end on a real kube-apiserver with the simulated backend.

The gateway runs as ``system:node:<name>`` (Node authorizer + NodeRestriction), so reading a
pull secret only works because the pod on this node references it — no cluster-wide Secret
access.  The simulated backend's state file shows which registry logins reached the backend
(server and username; the password must never appear there).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from waiting import events_about, wait_until

from devstack.agent import GatewayProcess

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-registry-password-7f3a"


#: This file's waits: polling every 0.2 s (waiting.wait_until: 60 s, every 0.3 s).
POLL = 0.2


def apply(kubectl: Any, *objs: dict[str, Any]) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}),
    )


def pod(name: str, ns: str, node: str, image: str, pull_secrets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "imagePullSecrets": [{"name": n} for n in pull_secrets],
            "containers": [{"name": "app", "image": image}],
        },
    }


def dockerconfigjson(name: str, ns: str, auths: dict[str, Any]) -> dict[str, Any]:
    payload = json.dumps({"auths": auths}).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(payload).decode()},
    }


def workload(gw: GatewayProcess, ns: str, name: str) -> dict[str, Any] | None:
    path = Path(gw.config_path).parent / "simulated-state.json"
    if not path.exists():
        return None
    for rec in json.loads(path.read_text() or "{}").values():
        if rec["ref"][:2] == [ns, name]:
            return dict(rec)
    return None


def running(cp: Any, ns: str, name: str) -> Callable[[], Any]:
    def check() -> Any:
        p = cp.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return p if p and p.get("status", {}).get("phase") == "Running" else None

    return check


def test_pull_secrets_reach_the_backend_and_missing_ones_only_warn(
    start_gateway, control_plane, kubectl
) -> None:
    node = f"vk-pull-{uuid.uuid4().hex[:6]}"
    gw = start_gateway(
        {
            "kube": {"kubeconfig": str(control_plane.node_kubeconfig(node))},
            # nodes may not list namespaces: teams from templates.teams only
            "templates": {"namespace_labels": False},
        },
        node_name=node,
    )
    ns = f"pull-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    auth = base64.b64encode(f"gh-bot:{PASSWORD}".encode()).decode()
    apply(
        kubectl,
        dockerconfigjson(
            "regcred",
            ns,
            {
                "https://ghcr.io": {"auth": auth},
                "https://index.docker.io/v1/": {"username": "hubuser", "password": PASSWORD},
            },
        ),
        # valid JSON, so the API server accepts it; the "auth" value is not base64
        dockerconfigjson("broken", ns, {"quay.io": {"auth": "%%% not base64 %%%"}}),
        pod("private", ns, node, "ghcr.io/example/private-app:1.4", ["regcred"]),
        pod("orphan", ns, node, "ghcr.io/example/private-app:1.4", ["does-not-exist"]),
        pod("bad", ns, node, "quay.io/example/tool:2", ["broken"]),
    )

    # 1. the matching login (only ghcr.io: the Docker Hub one matches no image) reached the backend
    wait_until("private Running", running(control_plane, ns, "private"), every=POLL)
    rec = wait_until("private's workload", lambda: workload(gw, ns, "private"), every=POLL)
    assert rec["extra"]["registry_credentials"] == [
        {"server": "ghcr.io", "username": "gh-bot", "source": "secret/regcred"}
    ]
    state_text = (Path(gw.config_path).parent / "simulated-state.json").read_text()
    assert PASSWORD not in state_text
    assert PASSWORD not in gw.log_text()

    # 2. a missing pull secret: the pod still runs, with the kubelet's Warning event
    wait_until("orphan Running", running(control_plane, ns, "orphan"), every=POLL)
    orphan = wait_until("orphan's workload", lambda: workload(gw, ns, "orphan"), every=POLL)
    assert orphan["extra"]["registry_credentials"] == []
    missing = (
        "Unable to retrieve some image pull secrets (does-not-exist); attempting to pull the "
        "image may not succeed."
    )

    # one Warning for the 404; the Node authorizer may answer 403 for a few ms after the pod
    # was created ("Unable to read image pull secrets …", gateway/pods/resolve/pullsecrets.py), which
    # is its own Warning with the same reason: a CI run saw both
    def with_missing() -> list[dict[str, Any]] | None:
        evs = events_about(
            control_plane, ns, "orphan", "FailedToRetrieveImagePullSecret", event_type="Warning"
        )
        return evs if any(e["message"] == missing for e in evs) else None

    seen = wait_until("FailedToRetrieveImagePullSecret for the 404", with_missing, every=POLL)
    assert [e["message"] for e in seen if e["message"] == missing] == [missing], seen
    assert all(
        e["message"] == missing or e["message"].startswith("Unable to read image pull secrets")
        for e in seen
    ), seen

    # 3. a malformed pull secret: named in a Warning event, the pod still runs
    wait_until("bad Running", running(control_plane, ns, "bad"), every=POLL)
    (bad,) = wait_until(
        "InvalidImagePullSecret",
        lambda: events_about(
            control_plane, ns, "bad", "InvalidImagePullSecret", event_type="Warning"
        ),
        every=POLL,
    )
    assert 'image pull secret "broken" key ".dockerconfigjson"' in bad["message"]
    assert "quay.io" in bad["message"] and "not base64" in bad["message"]

    log = gw.log_text()
    assert "Traceback" not in log, log[-3000:]
