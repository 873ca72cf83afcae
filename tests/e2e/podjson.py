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
    return pod_with(name, node, container, policy=policy)


def pod_with(
    name: str, node: str, container: dict[str, Any], *, policy: str = "Always", grace: int = 2
) -> str:
    """A pod in ``default`` with this one container (busybox unless it names an image), bound
    to ``node``, tolerating every taint."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "restartPolicy": policy,
                "terminationGracePeriodSeconds": grace,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"image": "busybox:1.36", **container}],
            },
        }
    )
