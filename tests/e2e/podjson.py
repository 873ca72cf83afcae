"""One-container pod manifests for the kubectl e2e tests (JSON for ``kubectl apply -f -``)."""

from __future__ import annotations

import json
from typing import Any


def pod_json(
    name: str,
    node: str,
    *,
    command: list[str] | None = None,
    image: str = "busybox:1.36",
    policy: str = "Never",
    memory: str | None = None,
) -> str:
    """Container ``app``; ``memory`` sets request = limit; tolerates the node's taint."""
    container: dict[str, Any] = {"name": "app", "image": image}
    if command:
        container["command"] = command
    if memory:
        container["resources"] = {"requests": {"memory": memory}, "limits": {"memory": memory}}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "restartPolicy": policy,
                "terminationGracePeriodSeconds": 2,
                "tolerations": [{"operator": "Exists"}],
                "containers": [container],
            },
        }
    )
