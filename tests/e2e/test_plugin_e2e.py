"""A third-party backend (``tests/plugins/vkgate-acme``) runs pods through a live ``vkgate run``
against the real API server, with no change to vkgate: the open backend seam end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

pytestmark = pytest.mark.e2e


#: This file's waits: polling every 0.2 s (waiting.wait_until: 60 s, every 0.3 s).
POLL = 0.2


def test_a_plugin_backend_runs_pods_live(
    start_gateway: Any, control_plane: Any, kubectl: Any, tmp_path: Path
) -> None:
    record = tmp_path / "submitted"
    gw = start_gateway(
        {"backend": {"kind": "acme", "acme": {"slots": 3, "record_dir": str(record)}}}
    )
    ns = f"acme-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "nodeName": gw.node_name,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "app", "image": "nginx:1.27", "args": ["--port", "8080"]},
                {"name": "side", "image": "busybox:1.36"},
            ],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(pod))
    path = f"/api/v1/namespaces/{ns}/pods/web"
    live = wait_until(
        "Running",
        lambda: (p := control_plane.get(path)) and p["status"].get("phase") == "Running" and p,
        every=POLL,
    )
    node = control_plane.get(f"/api/v1/nodes/{gw.node_name}")
    assert node["metadata"]["labels"]["vkgate.io/backend"] == "acme"
    assert [c["name"] for c in live["status"]["containerStatuses"]] == ["app", "side"]

    submitted = json.loads((record / f"{live['metadata']['uid']}.json").read_text())
    assert submitted["name"] == f"acme-{ns}-web" and submitted["slots"] == 3

    # `vkgate render` of the same pod shows the same request (env aside: the live agent adds
    # the default/kubernetes service variables, which offline rendering has no Services for).
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(
        json.dumps({**pod, "metadata": {**pod["metadata"], "uid": live["metadata"]["uid"]}})
    )
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "render", str(pod_file), "-c", str(gw.config_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rendered = json.loads(out)
    strip = lambda body: {  # noqa: E731
        **body,
        "containers": [{k: v for k, v in c.items() if k != "env"} for c in body["containers"]],
    }
    assert strip(rendered) == strip(submitted)
